//! One table in two homes: every operation on a key of a keyed table, written once, over the
//! place the key is kept.
//!
//! Two tables keep one limiter per key. The in-process table
//! ([`keyed`](crate::core::exact::keyed)) keeps its keys in the heap, in shards behind mutexes;
//! the shared table ([`shared`](crate::core::exact::shared)) keeps them in slots of a file that
//! every process of the host maps, behind bucket locks. Both store a key's state as the same
//! record ([`record`](crate::core::exact::record)) and decide with the same settlement
//! ([`Balances`]). What differs is only *where* the key lives: how it is found, how a change is
//! written back or the key forgotten, where a new key finds room, where a decision is counted.
//! [`Home`] is that difference and nothing more: one table's view of one key, its home locked
//! for the call. Each operation below is the rule itself, run on any home:
//!
//! ```text
//! find the key, or take a new key's state (every band full, anchored at its first call)
//! run the Balances operation at the table's time
//! keep the change: write it back, or forget the key if it is a new key's state again;
//!   a new key whose state changed is stored if there is room, else refused with a wait
//! count the decision
//! count its waits from the caller's time, which may be behind the table's clock
//! ```
//!
//! A table's public method is then three steps: lock the key's home, make the view, call the
//! operation here (`keyed/table.rs` and `keyed/reservations.rs`; `shared/decide.rs`).
//!
//! **Why "forgetting changes nothing".** A key not stored answers as a new key: full, anchored
//! at its first call. So a key whose state is a new key's again (every band full, no
//! reservation ahead of the clock) can be forgotten at any time without changing an answer, and
//! a new key's call that leaves its state a new key's (refused, or allowed taking nothing)
//! stores nothing. A home decides which keys to forget to make room; no operation here ever
//! forgets a key that is not fresh.
//!
//! **Where the homes differ** is in what they write, never in an answer. The heap writes every
//! change back, a denial's settlement too, and forgets a key the moment it is fresh again
//! (a refilled key asked for more than its burst, or settled at exactly its estimate, is
//! forgotten then); the file writes only what changes an answer (a commit is two writes to
//! memory other processes read), and leaves a refilled key in its slot until a new key needs
//! the room. The heap also keeps notes on when its shards will have room
//! (`keyed/home.rs`), which a change may make stale.
//!
//! **The table's clock.** A home decides at the table's time ([`Home::now`]): the latest time
//! any call has used, so a key forgotten at noon is not brought back anchored at 11:00. A caller
//! behind it ([`Home::behind`]) is told its waits from its own time
//! ([`KeyedDecision::from_caller`]).

use crate::core::exact::answers::{Answer, KeyedDecision, KeyedReservation};
use crate::core::exact::limiter::{Balances, Decision, Level, Reservation};
use crate::core::exact::rate::BandSpec;

/// What an operation did to a key the table holds, for its home to keep (a home keeps notes
/// on its keys, and a change tells it which notes may no longer hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A request was decided on the key: tokens taken now or reserved ahead (`taken`), or
    /// denied, the balances only settled to the table's time.
    Decided { taken: bool },
    /// Tokens were handed back: a refund, a cost settled, a reservation given back. The key
    /// may be full again sooner than before.
    HandedBack,
    /// Only read: nothing taken or given, though a first call anchors a new state's clock.
    Read,
}

/// One key of a keyed table, its home locked for one call: the heap's shard, or the file's
/// buckets. `'t` is the table's: the specs and a new key's state outlive the view.
pub trait Home<'t> {
    /// The bands every key of the table is limited by.
    fn specs(&self) -> &'t [BandSpec];

    /// A new key's balances: every band full, anchored at its first call.
    fn fresh(&self) -> &'t Balances;

    /// The time the call is decided at: the table's clock, moved up to the caller's time (the
    /// shared one-key form decides at the caller's own time, as a one-key limiter does).
    fn now(&self) -> i64;

    /// How far the caller's time is behind [`Home::now`]: added to every wait it is told.
    fn behind(&self) -> u128;

    /// The table's clock: the latest time any call has used, this one's included. A band
    /// settled beyond it holds a waiter's reservation, so a refund to it is forfeited (see
    /// [`Balances::refund`]). A keyed table decides at its clock: [`Home::now`].
    fn clock(&self) -> i64 {
        self.now()
    }

    /// If the table holds the key: run `operation` on its balances, and keep what it leaves
    /// as the [`Change`] it returns says (written back, or the key forgotten if they are a
    /// new key's state again; a read written only where its anchoring must be remembered,
    /// the shared one-key form, which answers exactly as a one-key limiter does). `None`, and
    /// nothing run, for a key the table does not hold: it answers as a new key.
    fn update<R>(&mut self, operation: impl FnOnce(&mut Balances) -> (Change, R)) -> Option<R>;

    /// Whether a new key would find room now: `None` if it would, else the nanoseconds until
    /// it may. Stores nothing (a home may forget keys that are fresh again on the way, which
    /// changes no answer).
    fn room_for_new(&mut self) -> Option<u128>;

    /// Count `decision` in the table's stats.
    fn count(&mut self, decision: KeyedDecision);
}

/// A [`Home`] that can take in a key it does not hold: what an operation that may store a new
/// key needs (a take, a reservation, a cost settled beyond what was reserved).
pub trait NewKey<'t>: Home<'t> {
    /// Store the key, which the table does not hold, with `balances` (a state no new key has),
    /// if there is room for it; else the nanoseconds until there may be, storing nothing.
    ///
    /// # Errors
    ///
    /// The wait, at least 1 ns, when the table has no room (its keys cannot be forgotten).
    fn store_new(&mut self, balances: &Balances) -> Result<(), u128>;
}

/// Take `n` tokens for the key, as its own limiter decides (`acquire`, and `check` with
/// `with_remaining`: what the key then holds, every band's least whole tokens, a division
/// per band; 0 if refused or not asked).
///
/// A stored key settles, decides and keeps the result. A new key decides on a new key's
/// state, and is stored only if that changed it: refused by a fresh limiter (`n` beyond a
/// burst) or allowed taking nothing, it is still a new key, and needs no room. A new key that
/// took tokens and finds no room is refused, taking nothing.
pub fn take<'t>(home: &mut impl NewKey<'t>, n: u64, with_remaining: bool) -> Answer {
    let (specs, now) = (home.specs(), home.now());
    let remaining_of = |balances: &Balances| {
        if with_remaining {
            balances.available(specs)
        } else {
            0
        }
    };
    let stored = home.update(|balances| {
        let decision = balances.acquire(specs, n, now);
        let taken = decision == Decision::Allowed;
        let answer = (KeyedDecision::Decided(decision), remaining_of(balances));
        (Change::Decided { taken }, answer)
    });
    let (decision, remaining) = stored.unwrap_or_else(|| {
        let (decision, balances) = take_new(home, n);
        match decision {
            KeyedDecision::Refused { .. } => (decision, 0),
            KeyedDecision::Decided(_) => (decision, remaining_of(&balances)),
        }
    });
    let decision = decision.from_caller(home.behind());
    home.count(decision);
    Answer {
        decision,
        remaining,
    }
}

/// `n` tokens taken from a new key's state, which is stored only if the taking changed it
/// (see [`take`]); the state it was decided on, for what it then holds.
fn take_new<'t>(home: &mut impl NewKey<'t>, n: u64) -> (KeyedDecision, Balances) {
    let specs = home.specs();
    let mut balances = home.fresh().clone();
    let decision = balances.acquire(specs, n, home.now());
    if decision == Decision::Allowed && !balances.is_full(specs) {
        if let Err(retry_in) = home.store_new(&balances) {
            return (KeyedDecision::Refused { retry_in }, balances);
        }
    }
    (KeyedDecision::Decided(decision), balances)
}

/// What [`take`] with `with_remaining` would answer, taking nothing and storing nothing new:
/// a stored key's answer from a settled copy, a new key's from a new key's state, refused if
/// its taking would need room the table does not have.
pub fn peek<'t>(home: &mut impl Home<'t>, n: u64) -> Answer {
    let (specs, now) = (home.specs(), home.now());
    let stored = home.update(|balances| {
        let decision = balances.peek(specs, n, now);
        let answer = (
            KeyedDecision::Decided(decision),
            balances.available_at(specs, now),
        );
        (Change::Read, answer)
    });
    let (decision, remaining) = stored.unwrap_or_else(|| {
        let mut balances = home.fresh().clone();
        let decision = balances.acquire(specs, n, now);
        // As for a take (`take_new`): a new key's state taken from at `now` is full exactly
        // when it is fresh at `now`, since it was anchored there.
        let needs_room = decision == Decision::Allowed && !balances.is_full(specs);
        match needs_room.then(|| home.room_for_new()).flatten() {
            Some(retry_in) => (KeyedDecision::Refused { retry_in }, 0),
            None => (
                KeyedDecision::Decided(decision),
                home.fresh().clone().available_at(specs, now),
            ),
        }
    });
    Answer {
        decision: decision.from_caller(home.behind()),
        remaining,
    }
}

/// Take `n` tokens for the key at the first moment its every band holds them, if that is at
/// most `max_wait_ns` from the caller's time: see [`Balances::reserve`]. Decided at the table's
/// time as [`take`] is; the caller waits [`Home::behind`] more than that time says, so a wait
/// beyond what is then left of `max_wait_ns` is too late, and none is left once `behind`
/// exceeds it. The waits told count from the caller's time.
///
/// A reservation settles the key ahead of the table's clock: such a key is not fresh (nothing
/// accrues to it before that point), so it is never forgotten while a waiter counts on it.
/// A new key is full, so its reservation is a [`take`]: taken at once, never (`n` beyond a
/// burst), or refused when the table is full. Counted as a take is: taken is allowed, too late
/// or never is denied.
pub fn reserve<'t>(home: &mut impl NewKey<'t>, n: u64, max_wait_ns: u128) -> KeyedReservation {
    let (specs, now, behind) = (home.specs(), home.now(), home.behind());
    let stored = home.update(|balances| {
        let reservation = balances.reserve(specs, n, now, max_wait_ns.saturating_sub(behind));
        let taken = matches!(reservation, Reservation::Taken { .. });
        (Change::Decided { taken }, reservation)
    });
    let (reservation, counted) = if let Some(reservation) = stored {
        let counted = match reservation {
            Reservation::Taken { .. } => Decision::Allowed,
            Reservation::TooLate(_) | Reservation::Never => Decision::Never,
        };
        (
            KeyedReservation::Decided(reservation.from_caller(behind)),
            KeyedDecision::Decided(counted),
        )
    } else {
        let decision = take_new(home, n).0.from_caller(behind);
        let reservation = match decision {
            KeyedDecision::Decided(Decision::Allowed) => {
                KeyedReservation::Decided(Reservation::Taken { after_ns: 0 })
            }
            // A new key is full: it allows `n`, or `n` exceeds a burst.
            KeyedDecision::Decided(Decision::Never | Decision::Wait(_)) => {
                KeyedReservation::Decided(Reservation::Never)
            }
            KeyedDecision::Refused { retry_in } => KeyedReservation::Refused { retry_in },
        };
        (reservation, decision)
    };
    home.count(counted);
    reservation
}

/// Give `n` tokens back to the key, each band capped at its burst (see [`Balances::refund`]:
/// forfeited while a waiter's reservation is ahead of the table's clock). A key not stored is
/// full already.
pub fn refund<'t>(home: &mut impl Home<'t>, n: u64) {
    let (now, clock) = (home.now(), home.clock());
    hand_back(home, |balances, specs| {
        balances.refund(specs, n, now, clock);
    });
}

/// Settle a cost the key took as `reserved` tokens, now known to be `actual`: see
/// [`Balances::settle_cost`]. A key not stored is full: what it is refunded changes nothing,
/// and an overage makes it a key in debt, stored as a new key is (a key in debt is not fresh,
/// so it is never forgotten before the debt is repaid). A table with no room for it cannot
/// record the overage: then, and only then, it is not recorded.
pub fn settle_cost<'t>(home: &mut impl NewKey<'t>, reserved: u64, actual: u64) {
    let (specs, now, clock) = (home.specs(), home.now(), home.clock());
    let settle = |balances: &mut Balances, specs: &[BandSpec]| {
        balances.settle_cost(specs, reserved, actual, now, clock);
    };
    if hand_back(home, settle) {
        return;
    }
    let mut balances = home.fresh().clone();
    settle(&mut balances, specs);
    if !balances.is_fresh_at(specs, now) {
        // With no room, the overage is not recorded (see above).
        let _ = home.store_new(&balances);
    }
}

/// A waiter that stops waiting hands back the `n` tokens it reserved for `reserved_at` on the
/// table's clock (the caller's time plus the wait it was told): see [`Balances::give_back`],
/// undone if nobody queues behind them, else forfeited. A key not stored is full: nothing to
/// give back.
pub fn give_back<'t>(home: &mut impl Home<'t>, n: u64, reserved_at: i64) {
    let now = home.now();
    hand_back(home, |balances, specs| {
        balances.give_back(specs, n, now, reserved_at);
    });
}

/// Tokens handed back to the key by `hand` (a refund, a cost settled, a reservation given
/// back), kept as [`Change::HandedBack`]; `false`, and nothing done, if the table does not
/// hold the key.
fn hand_back<'t>(home: &mut impl Home<'t>, hand: impl FnOnce(&mut Balances, &[BandSpec])) -> bool {
    let specs = home.specs();
    let handed = home.update(|balances| {
        hand(balances, specs);
        (Change::HandedBack, ())
    });
    handed.is_some()
}

/// Whole tokens the key holds at the table's time (every band's least; a key not stored is
/// full).
pub fn available<'t>(home: &mut impl Home<'t>) -> u128 {
    read(home, Balances::available_at)
}

/// Each band's [`Level`] for the key at the table's time (a key not stored is full).
pub fn levels<'t>(home: &mut impl Home<'t>) -> Vec<Level> {
    read(home, Balances::levels_at)
}

/// What `look` reads of the key's balances (a new key's, if it is not stored) at the table's
/// time, taking nothing ([`Change::Read`]).
fn read<'t, R>(home: &mut impl Home<'t>, look: impl Fn(&mut Balances, &[BandSpec], i64) -> R) -> R {
    let (specs, now) = (home.specs(), home.now());
    let stored = home.update(|balances| (Change::Read, look(balances, specs, now)));
    stored.unwrap_or_else(|| look(&mut home.fresh().clone(), specs, now))
}
