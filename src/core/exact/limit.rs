//! One limiter, as a caller sees it: the same questions, whoever keeps the state.
//!
//! Three limiters keep the bands' state in three places, and settle it with the same code
//! ([`Balances`](super::limiter::Balances)):
//!
//! * a [`Limiter`] keeps one set of balances, behind a lock (`Mutex<Limiter>`);
//! * a [`KeyedLimiter`] one set per key, in this process's memory;
//! * a shared [`Table`] one set per key, in memory the processes of one host map together.
//!
//! [`Limit`] is what they all answer: take, peek, give back, settle a cost once it is known,
//! reserve a turn and hand it back, and say what a key holds. [`KeyedLimit`] adds what only the keyed tables have: keys, counts
//! and whole traces. A caller written against these traits (the Python glue) is written once
//! for all three.
//!
//! Every call is one step, in two parts:
//!
//! 1. **The clock.** The call's time is put on the limiter's clock. A time too far from it to
//!    be a reading of the same clock (see [`clock_gap`](super::clock_gap)) is refused with
//!    `Err(gap)`, how far it is (positive when ahead), and nothing changes.
//! 2. **The decision**, at that time, for the state the call's key names: `()` for the one
//!    limiter, a key for the keyed table, a digest for the shared one.
//!
//! The one limiter takes both parts under its lock, since its clock moves with its balances;
//! a table checks its clock first, then locks the key's shard or buckets.
//!
//! The answers are the keyed tables' ([`KeyedDecision`], [`Answer`], [`KeyedReservation`]): a
//! limiter of one key is simply never refused for want of room.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::exact::key::{plain_int, Key, KeyRef};
use crate::core::exact::keyed::{
    off_the_clock, Answer, KeyedDecision, KeyedLimiter, KeyedReservation, Stats,
};
use crate::core::exact::limiter::{Level, Limiter};
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::shared::{Table, Words};

/// A call's time too far from a limiter's clock: how far, in nanoseconds (positive when ahead).
pub type OffTheClock = i128;

/// The questions every limiter answers. Each takes the caller's time, `now_ns`, and puts it on
/// the limiter's clock first (see the module's docs): `Err` says how far from it the time was.
pub trait Limit {
    /// How a call names the state it decides on: `()` for a limiter of one key, a key for a
    /// keyed table, a digest for a shared one.
    type Key<'k>: Copy;

    /// Take `n` tokens if every band holds them (all or nothing).
    ///
    /// # Errors
    ///
    /// For every call here: the time's distance from the clock, if too far (nothing changes).
    fn acquire(
        &self,
        key: Self::Key<'_>,
        n: u64,
        now_ns: i64,
    ) -> Result<KeyedDecision, OffTheClock>;

    /// [`Limit::acquire`], also saying the whole tokens left (every band's least).
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn check(&self, key: Self::Key<'_>, n: u64, now_ns: i64) -> Result<Answer, OffTheClock>;

    /// What [`Limit::check`] would answer, taking nothing.
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn peek(&self, key: Self::Key<'_>, n: u64, now_ns: i64) -> Result<Answer, OffTheClock>;

    /// Give `n` tokens back to every band (each capped at its burst).
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn refund(&self, key: Self::Key<'_>, n: u64, now_ns: i64) -> Result<(), OffTheClock>;

    /// Settle a cost taken as `reserved` tokens, now known to be `actual`: the difference is
    /// refunded if less, taken even beyond the balance if more (a debt later callers wait
    /// out), nothing if the same. See [`Balances::settle_cost`](super::limiter::Balances).
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn settle_cost(
        &self,
        key: Self::Key<'_>,
        reserved: u64,
        actual: u64,
        now_ns: i64,
    ) -> Result<(), OffTheClock>;

    /// Take `n` tokens at the moment they will be there, if that is within `max_wait_ns`: a
    /// waiter's turn, behind which later callers queue.
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn reserve(
        &self,
        key: Self::Key<'_>,
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> Result<KeyedReservation, OffTheClock>;

    /// Hand back the `n` tokens of a turn reserved for `reserved_at` that a waiter gave up:
    /// undone if nobody queues behind it, else forfeited.
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn give_back(
        &self,
        key: Self::Key<'_>,
        n: u64,
        now_ns: i64,
        reserved_at: i64,
    ) -> Result<(), OffTheClock>;

    /// Whole tokens every band holds (the least of them).
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn available(&self, key: Self::Key<'_>, now_ns: i64) -> Result<u128, OffTheClock>;

    /// Each band's whole tokens, and how long until it can give one more.
    ///
    /// # Errors
    ///
    /// See [`Limit::acquire`].
    fn levels(&self, key: Self::Key<'_>, now_ns: i64) -> Result<Vec<Level>, OffTheClock>;
}

/// What only the keyed tables have: the keys they hold, their counts, and whole traces.
pub trait KeyedLimit: Limit {
    /// Whether `key` is held (a key not held is a new, full one).
    fn contains(&self, key: Self::Key<'_>) -> bool;

    /// How many keys are held.
    fn held(&self) -> usize;

    /// The most keys the table holds at once.
    fn capacity(&self) -> usize;

    /// What the table has decided since it was made.
    fn stats(&self) -> Stats;

    /// The table's clock: the latest time a call has used (`None` before the first).
    fn latest(&self) -> Option<i64>;

    /// [`Limit::acquire`] for each request of a trace of integer keys in turn (key, tokens,
    /// time), each answer handed to `answer` in order, with no clock step: see
    /// [`KeyedLimit::acquire_trace`].
    fn acquire_ints(
        &self,
        requests: impl Iterator<Item = (i128, u64, i64)>,
        answer: impl FnMut(KeyedDecision),
    );

    /// Decide a whole trace: request `i` is `counts.at(i)` tokens for `keys[i]` at `times[i]`
    /// (the slices are of one length). Every time is checked first, against the table's clock
    /// as the trace will have moved it when that request's turn comes; if one is too far,
    /// nothing is decided and `Err` names its index and its gap.
    ///
    /// # Errors
    ///
    /// The first request whose time is off the clock, and how far.
    fn acquire_trace(
        &self,
        keys: &[i128],
        counts: &Counts,
        times: &[i64],
        answer: impl FnMut(KeyedDecision),
    ) -> Result<(), (usize, OffTheClock)> {
        let mut clock = self.latest();
        for (index, &now) in times.iter().enumerate() {
            if let Some(gap) = clock.and_then(|latest| off_the_clock(latest, now)) {
                return Err((index, gap));
            }
            clock = Some(clock.map_or(now, |latest| latest.max(now)));
        }
        let requests = (0..keys.len()).map(|i| (keys[i], counts.at(i), times[i]));
        self.acquire_ints(requests, answer);
        Ok(())
    }
}

/// The tokens of each request in a trace: one count for all, or one each.
pub enum Counts {
    Each(u64),
    Items(Vec<u64>),
}

impl Counts {
    /// Request `index`'s tokens.
    #[must_use]
    pub fn at(&self, index: usize) -> u64 {
        match self {
            Self::Each(n) => *n,
            Self::Items(items) => items[index],
        }
    }
}

/// A trace whose parts are not all one length: how long each is, `counts` only where the
/// trace gives one count per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLengths {
    pub keys: usize,
    pub times: usize,
    pub counts: Option<usize>,
}

impl TraceLengths {
    /// Whether a trace's `keys`, `times` and `counts` (where given one per request) are all
    /// one length: what a caller reading the trace in parts checks before it reads them.
    ///
    /// # Errors
    ///
    /// Every length, if not.
    pub fn check(keys: usize, times: usize, counts: Option<usize>) -> Result<(), Self> {
        if times == keys && counts.is_none_or(|counts| counts == keys) {
            Ok(())
        } else {
            Err(Self {
                keys,
                times,
                counts,
            })
        }
    }
}

impl fmt::Display for TraceLengths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "keys ({}), now_ns ({})", self.keys, self.times)?;
        if let Some(counts) = self.counts {
            write!(f, " and n ({counts})")?;
        }
        f.write_str(" must have the same length")
    }
}

/// `decide`, unless `gap` says the time is off the clock: a table's clock step.
fn unless_off<R>(gap: Option<OffTheClock>, decide: impl FnOnce() -> R) -> Result<R, OffTheClock> {
    match gap {
        Some(gap) => Err(gap),
        None => Ok(decide()),
    }
}

/// The limiter, locked, with `now_ns` on its clock (see [`Limiter::on_the_clock`]): its clock
/// step, under the same lock as the decision that follows.
fn at(limiter: &Mutex<Limiter>, now_ns: i64) -> Result<MutexGuard<'_, Limiter>, OffTheClock> {
    // Every change to a `Limiter` completes without panicking or is not started: a poisoned
    // lock still guards a consistent state.
    let mut limiter = limiter.lock().unwrap_or_else(PoisonError::into_inner);
    limiter.on_the_clock(now_ns)?;
    Ok(limiter)
}

/// The one limiter: one key, behind its lock.
impl Limit for Mutex<Limiter> {
    type Key<'k> = ();

    #[inline]
    fn acquire(&self, (): (), n: u64, now_ns: i64) -> Result<KeyedDecision, OffTheClock> {
        Ok(KeyedDecision::Decided(at(self, now_ns)?.acquire(n, now_ns)))
    }

    fn check(&self, (): (), n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        let mut limiter = at(self, now_ns)?;
        let decision = KeyedDecision::Decided(limiter.acquire(n, now_ns));
        Ok(Answer {
            decision,
            remaining: limiter.available(),
        })
    }

    fn peek(&self, (): (), n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        let mut limiter = at(self, now_ns)?;
        let decision = KeyedDecision::Decided(limiter.peek(n, now_ns));
        Ok(Answer {
            decision,
            remaining: limiter.available_at(now_ns),
        })
    }

    fn refund(&self, (): (), n: u64, now_ns: i64) -> Result<(), OffTheClock> {
        at(self, now_ns)?.refund(n, now_ns);
        Ok(())
    }

    fn settle_cost(
        &self,
        (): (),
        reserved: u64,
        actual: u64,
        now_ns: i64,
    ) -> Result<(), OffTheClock> {
        at(self, now_ns)?.settle_cost(reserved, actual, now_ns);
        Ok(())
    }

    fn reserve(
        &self,
        (): (),
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> Result<KeyedReservation, OffTheClock> {
        let reservation = at(self, now_ns)?.reserve(n, now_ns, max_wait_ns);
        Ok(KeyedReservation::Decided(reservation))
    }

    fn give_back(&self, (): (), n: u64, now_ns: i64, reserved_at: i64) -> Result<(), OffTheClock> {
        at(self, now_ns)?.give_back(n, now_ns, reserved_at);
        Ok(())
    }

    fn available(&self, (): (), now_ns: i64) -> Result<u128, OffTheClock> {
        Ok(at(self, now_ns)?.available_at(now_ns))
    }

    fn levels(&self, (): (), now_ns: i64) -> Result<Vec<Level>, OffTheClock> {
        Ok(at(self, now_ns)?.levels_at(now_ns))
    }
}

/// The keyed table of this process, with keys of every kind (see [`super::key`]).
impl Limit for KeyedLimiter<Key> {
    type Key<'k> = &'k KeyRef<'k>;

    #[inline]
    fn acquire(&self, key: &KeyRef<'_>, n: u64, now_ns: i64) -> Result<KeyedDecision, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::acquire(self, key, n, now_ns)
        })
    }

    fn check(&self, key: &KeyRef<'_>, n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::check(self, key, n, now_ns)
        })
    }

    fn peek(&self, key: &KeyRef<'_>, n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::peek(self, key, n, now_ns)
        })
    }

    fn refund(&self, key: &KeyRef<'_>, n: u64, now_ns: i64) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::refund(self, key, n, now_ns);
        })
    }

    fn settle_cost(
        &self,
        key: &KeyRef<'_>,
        reserved: u64,
        actual: u64,
        now_ns: i64,
    ) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::settle_cost(self, key, reserved, actual, now_ns);
        })
    }

    fn reserve(
        &self,
        key: &KeyRef<'_>,
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> Result<KeyedReservation, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::reserve(self, key, n, now_ns, max_wait_ns)
        })
    }

    fn give_back(
        &self,
        key: &KeyRef<'_>,
        n: u64,
        now_ns: i64,
        reserved_at: i64,
    ) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::give_back(self, key, n, now_ns, reserved_at);
        })
    }

    fn available(&self, key: &KeyRef<'_>, now_ns: i64) -> Result<u128, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::available(self, key, now_ns)
        })
    }

    fn levels(&self, key: &KeyRef<'_>, now_ns: i64) -> Result<Vec<Level>, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            KeyedLimiter::levels(self, key, now_ns)
        })
    }
}

impl KeyedLimit for KeyedLimiter<Key> {
    fn contains(&self, key: &KeyRef<'_>) -> bool {
        KeyedLimiter::contains(self, key)
    }

    fn held(&self) -> usize {
        self.len()
    }

    fn capacity(&self) -> usize {
        self.max_keys()
    }

    fn stats(&self) -> Stats {
        KeyedLimiter::stats(self)
    }

    fn latest(&self) -> Option<i64> {
        KeyedLimiter::latest(self)
    }

    /// Every int from -2**127 to 2**127 - 1 is a plain key, as a single call reads it; each is
    /// made one when its turn comes, and the shards are locked once per stretch of requests.
    fn acquire_ints(
        &self,
        requests: impl Iterator<Item = (i128, u64, i64)>,
        answer: impl FnMut(KeyedDecision),
    ) {
        let requests = requests.map(|(key, n, now)| (plain_int(key), n, now));
        self.acquire_many::<KeyRef<'_>, _>(requests, answer);
    }
}

/// The table the processes of one host share: a key is its digest (a one-key table's is
/// `shared::THE_KEY`).
impl<W: Words> Limit for Table<W> {
    type Key<'k> = Digest;

    #[inline]
    fn acquire(&self, key: Digest, n: u64, now_ns: i64) -> Result<KeyedDecision, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::acquire(self, key, n, now_ns)
        })
    }

    fn check(&self, key: Digest, n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::check(self, key, n, now_ns)
        })
    }

    fn peek(&self, key: Digest, n: u64, now_ns: i64) -> Result<Answer, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::peek(self, key, n, now_ns)
        })
    }

    fn refund(&self, key: Digest, n: u64, now_ns: i64) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::refund(self, key, n, now_ns);
        })
    }

    fn settle_cost(
        &self,
        key: Digest,
        reserved: u64,
        actual: u64,
        now_ns: i64,
    ) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::settle_cost(self, key, reserved, actual, now_ns);
        })
    }

    fn reserve(
        &self,
        key: Digest,
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> Result<KeyedReservation, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::reserve(self, key, n, now_ns, max_wait_ns)
        })
    }

    fn give_back(
        &self,
        key: Digest,
        n: u64,
        now_ns: i64,
        reserved_at: i64,
    ) -> Result<(), OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::give_back(self, key, n, now_ns, reserved_at);
        })
    }

    fn available(&self, key: Digest, now_ns: i64) -> Result<u128, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::available(self, key, now_ns)
        })
    }

    fn levels(&self, key: Digest, now_ns: i64) -> Result<Vec<Level>, OffTheClock> {
        unless_off(self.off_the_clock(now_ns), || {
            Table::levels(self, key, now_ns)
        })
    }
}

impl<W: Words> KeyedLimit for Table<W> {
    fn contains(&self, key: Digest) -> bool {
        Table::contains(self, key)
    }

    fn held(&self) -> usize {
        self.len()
    }

    fn capacity(&self) -> usize {
        self.shape().capacity()
    }

    fn stats(&self) -> Stats {
        Table::stats(self)
    }

    fn latest(&self) -> Option<i64> {
        Table::latest(self)
    }

    /// Each int is digested as a single call's key is (see [`Table::digest_of`]).
    fn acquire_ints(
        &self,
        requests: impl Iterator<Item = (i128, u64, i64)>,
        mut answer: impl FnMut(KeyedDecision),
    ) {
        for (key, n, now) in requests {
            answer(Table::acquire(self, self.digest_of(plain_int(key)), n, now));
        }
    }
}

#[cfg(test)]
mod tests;
