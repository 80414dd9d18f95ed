//! Deciding for a key of a shared table: each call is the in-process one ([`Balances`]), run
//! on the key's slot under its buckets' locks, and stored back (or the key forgotten, once it is
//! a new key's state again).

use super::{buckets_of, Digest, Locked, Table, Words};
use crate::core::exact::keyed::{Answer, KeyedDecision, KeyedReservation};
use crate::core::exact::limiter::{Balances, Decision, Level, Reservation};
use crate::core::exact::rate::BandSpec;

impl<W: Words> Table<W> {
    /// Take `n` tokens for the key of `digest` at `now_ns`, as its own limiter decides.
    pub fn acquire(&self, digest: Digest, n: u64, now_ns: i64) -> KeyedDecision {
        self.take(digest, n, now_ns, false).decision
    }

    /// [`Table::acquire`], also saying what the key holds after (every band's least whole
    /// tokens; 0 if refused).
    pub fn check(&self, digest: Digest, n: u64, now_ns: i64) -> Answer {
        self.take(digest, n, now_ns, true)
    }

    /// Take `n` tokens; what remains is counted only `with_remaining` (a division per band).
    fn take(&self, digest: Digest, n: u64, now_ns: i64, with_remaining: bool) -> Answer {
        self.take_in(&self.locked(digest, now_ns), digest, n, with_remaining)
    }

    /// [`Table::take`] on buckets already locked.
    pub(super) fn take_in(
        &self,
        locked: &Locked<'_>,
        digest: Digest,
        n: u64,
        with_remaining: bool,
    ) -> Answer {
        let remaining_of = |balances: &Balances| {
            if with_remaining {
                balances.available(&self.specs)
            } else {
                0
            }
        };
        let now = locked.now;
        let (decision, remaining) = if let Some(slot) = self.find(locked, digest) {
            let mut balances = slot.balances();
            let decision = balances.acquire(&self.specs, n, now);
            if decision == Decision::Allowed || self.one {
                self.keep(locked, slot, &balances);
            }
            (KeyedDecision::Decided(decision), remaining_of(&balances))
        } else {
            let mut balances = self.fresh.clone();
            let decision = balances.acquire(&self.specs, n, now);
            let remaining = remaining_of(&balances);
            if decision != Decision::Allowed || balances.is_full(&self.specs) {
                (KeyedDecision::Decided(decision), remaining)
            } else {
                match self.room(locked, &[]) {
                    Ok(slot) => {
                        slot.fill(digest, &balances);
                        (KeyedDecision::Decided(decision), remaining)
                    }
                    Err(retry_in) => (KeyedDecision::Refused { retry_in }, 0),
                }
            }
        };
        let decision = decision.from_caller(locked.behind);
        self.count(locked, decision);
        Answer {
            decision,
            remaining,
        }
    }

    /// What [`Table::check`] would answer, taking nothing and storing nothing.
    pub fn peek(&self, digest: Digest, n: u64, now_ns: i64) -> Answer {
        let locked = self.locked(digest, now_ns);
        let now = locked.now;
        let (decision, remaining) = if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            let decision = balances.peek(&self.specs, n, now);
            if self.one {
                slot.commit(&balances); // a first call anchors, as a limiter's does
            }
            (
                KeyedDecision::Decided(decision),
                balances.available_at(&self.specs, now),
            )
        } else {
            let mut balances = self.fresh.clone();
            let decision = balances.acquire(&self.specs, n, now);
            let stores = decision == Decision::Allowed && !balances.is_full(&self.specs);
            match stores.then(|| self.would_find_room(&locked)).flatten() {
                Some(retry_in) => (KeyedDecision::Refused { retry_in }, 0),
                None => (
                    KeyedDecision::Decided(decision),
                    self.fresh.clone().available_at(&self.specs, now),
                ),
            }
        };
        Answer {
            decision: decision.from_caller(locked.behind),
            remaining,
        }
    }

    /// `None` if a new key would find room now, else the wait until it may (see
    /// [`Table::room`]), changing nothing.
    fn would_find_room(&self, locked: &Locked<'_>) -> Option<u128> {
        let mut first_fresh = i64::MAX;
        for slot in buckets_of(locked).flat_map(|bucket| self.slots(bucket)) {
            if !slot.is_used() {
                return None;
            }
            let balances = slot.balances();
            if balances.is_fresh_at(&self.specs, locked.now) {
                return None;
            }
            first_fresh = first_fresh.min(balances.fresh_from(&self.specs));
        }
        Some(
            (i128::from(first_fresh) - i128::from(locked.now))
                .max(1)
                .unsigned_abs(),
        )
    }

    /// Give `n` tokens back to the key (each band capped at its burst); a key not stored is
    /// full already.
    pub fn refund(&self, digest: Digest, n: u64, now_ns: i64) {
        let locked = self.locked(digest, now_ns);
        if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            balances.refund(&self.specs, n, locked.now, locked.clock);
            self.keep(&locked, slot, &balances);
        }
    }

    /// Settle a cost the key took as `reserved` tokens, now known to be `actual` (see
    /// [`Balances::settle_cost`]). A key not stored is full: a refund changes nothing, and an
    /// overage stores it in debt if there is room (none when every key held is in use: then
    /// the overage is not recorded).
    pub fn settle_cost(&self, digest: Digest, reserved: u64, actual: u64, now_ns: i64) {
        let locked = self.locked(digest, now_ns);
        let settle = |balances: &mut Balances| {
            balances.settle_cost(&self.specs, reserved, actual, locked.now, locked.clock);
        };
        if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            settle(&mut balances);
            self.keep(&locked, slot, &balances);
            return;
        }
        let mut balances = self.fresh.clone();
        settle(&mut balances);
        if !balances.is_fresh_at(&self.specs, locked.now) {
            if let Ok(slot) = self.room(&locked, &[]) {
                slot.fill(digest, &balances);
            }
        }
    }

    /// Reserve `n` tokens for the key at the moment they will be there, if within
    /// `max_wait_ns` of the caller's time (see [`Balances::reserve`]); counted as a take.
    pub fn reserve(
        &self,
        digest: Digest,
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> KeyedReservation {
        let locked = self.locked(digest, now_ns);
        let (now, behind) = (locked.now, locked.behind);
        let (reservation, counted) = if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            let reservation =
                balances.reserve(&self.specs, n, now, max_wait_ns.saturating_sub(behind));
            let taken = matches!(reservation, Reservation::Taken { .. });
            if taken || self.one {
                self.keep(&locked, slot, &balances);
            }
            let reservation = reservation.from_caller(behind);
            let counted = if taken {
                Decision::Allowed
            } else {
                Decision::Never
            };
            (
                KeyedReservation::Decided(reservation),
                KeyedDecision::Decided(counted),
            )
        } else {
            let mut balances = self.fresh.clone();
            let decision = balances.acquire(&self.specs, n, now);
            let stores = decision == Decision::Allowed && !balances.is_full(&self.specs);
            let room = if stores {
                self.room(&locked, &[])
                    .map(|slot| slot.fill(digest, &balances))
            } else {
                Ok(())
            };
            match (room, decision) {
                (Err(retry_in), _) => {
                    let retry_in = retry_in.saturating_add(behind);
                    (
                        KeyedReservation::Refused { retry_in },
                        KeyedDecision::Refused { retry_in },
                    )
                }
                (Ok(()), Decision::Allowed) => (
                    KeyedReservation::Decided(Reservation::Taken { after_ns: 0 }),
                    KeyedDecision::Decided(decision),
                ),
                // A new key is full: it allows `n`, or `n` exceeds a burst.
                (Ok(()), _) => (
                    KeyedReservation::Decided(Reservation::Never),
                    KeyedDecision::Decided(decision),
                ),
            }
        };
        self.count(&locked, counted);
        reservation
    }

    /// A waiter that stops waiting hands back the `n` tokens it reserved for `reserved_at`
    /// (see [`Balances::give_back`]): undone if nobody queues behind them, else forfeited.
    pub fn give_back(&self, digest: Digest, n: u64, now_ns: i64, reserved_at: i64) {
        let locked = self.locked(digest, now_ns);
        if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            balances.give_back(&self.specs, n, locked.now, reserved_at);
            self.keep(&locked, slot, &balances);
        }
    }

    /// Whole tokens the key holds at `now_ns` (every band's least).
    pub fn available(&self, digest: Digest, now_ns: i64) -> u128 {
        self.read(digest, now_ns, |balances, specs, now| {
            balances.available_at(specs, now)
        })
    }

    /// Each band's whole tokens for the key at `now_ns`, and the time until it can give one
    /// more (see [`Balances::levels_at`]).
    pub fn levels(&self, digest: Digest, now_ns: i64) -> Vec<Level> {
        self.read(digest, now_ns, Balances::levels_at)
    }

    /// What `look` reads of the key's balances at the table's time for `now_ns` (a key not
    /// stored is a new one), taking nothing; the one-key form keeps the anchoring a first call
    /// makes, as a limiter does.
    fn read<R>(
        &self,
        digest: Digest,
        now_ns: i64,
        look: impl FnOnce(&mut Balances, &[BandSpec], i64) -> R,
    ) -> R {
        let locked = self.locked(digest, now_ns);
        let found = self.find(&locked, digest);
        let mut balances = found.map_or_else(|| self.fresh.clone(), |slot| slot.balances());
        let answer = look(&mut balances, &self.specs, locked.now);
        if let Some(slot) = found.filter(|_| self.one) {
            slot.commit(&balances); // a first call anchors, as a limiter's does
        }
        answer
    }
}
