//! Waiters on a key, and tokens handed back: a reservation settles its key ahead of the
//! table's clock, and a refund or a waiter that gives up hands tokens back.

use std::hash::Hash;

use hashbrown::Equivalent;

use super::{KeyedLimiter, KeyedReservation};
use crate::core::exact::home;

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// Give `n` tokens back to `key` (capped at each burst); a key that is then full is
    /// forgotten at once, and an unknown key is already full. The shard's and the table's
    /// notes of when room appears are dropped, since the key may now be full sooner than they
    /// say.
    pub fn refund<Q>(&self, key: &Q, n: u64, now_ns: i64)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        home::refund(&mut self.locked(key, now_ns).home(self, key), n);
    }

    /// Settle a cost `key` took as `reserved` tokens, now known to be `actual`: see
    /// [`home::settle_cost`]. A key not remembered is full: what it is refunded changes
    /// nothing, and an overage makes it a key in debt, stored as a new key is (a key in debt
    /// is not fresh, so it is never forgotten before the debt is repaid). A table full of keys
    /// none of which can be forgotten has no room to store it: then, and only then, the
    /// overage is not recorded.
    pub fn settle_cost<Q>(&self, key: &Q, reserved: u64, actual: u64, now_ns: i64)
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let mut locked = self.locked(key, now_ns);
        home::settle_cost(&mut locked.home(self, key), reserved, actual);
    }

    /// Take `n` tokens for `key` at the first moment its every band holds them, if that is at
    /// most `max_wait_ns` from the caller's time `now_ns`: see [`home::reserve`]. Decided at
    /// the table's clock, as [`KeyedLimiter::acquire`] is, with the wait counted from
    /// `now_ns`. Later callers for the same key queue behind the reservation; a waiter that
    /// stops waiting hands the tokens back with [`KeyedLimiter::give_back`].
    ///
    /// A key not remembered is full, so its reservation is an [`KeyedLimiter::acquire`]: taken
    /// at once, or refused when the table is full (the caller then retries after `retry_in`).
    /// Counted as `acquire` counts: taken is allowed, too late or never is denied.
    ///
    /// A reservation settles the key ahead of the table's clock. Such a key is not fresh
    /// ([`Balances::is_fresh_at`](crate::core::exact::limiter::Balances::is_fresh_at) needs its
    /// settlement point to have come), so it is never forgotten while a waiter counts on it,
    /// and its first room
    /// ([`Balances::fresh_from`](crate::core::exact::limiter::Balances::fresh_from)) counts
    /// from that point.
    pub fn reserve<Q>(&self, key: &Q, n: u64, now_ns: i64, max_wait_ns: u128) -> KeyedReservation
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        home::reserve(
            &mut self.locked(key, now_ns).home(self, key),
            n,
            max_wait_ns,
        )
    }

    /// A waiter that stops waiting hands back the `n` tokens it reserved for `key` with
    /// [`KeyedLimiter::reserve`], booked for `reserved_at` on the table's clock (the caller's
    /// time plus the wait it was told). As
    /// [`Balances::give_back`](crate::core::exact::limiter::Balances::give_back) does: undone
    /// as time if it was the key's last reservation, so nobody gets them before their turn
    /// would have come; forfeited if other waiters queue behind it. A key not remembered is
    /// full: nothing to give back.
    pub fn give_back<Q>(&self, key: &Q, n: u64, now_ns: i64, reserved_at: i64)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        home::give_back(
            &mut self.locked(key, now_ns).home(self, key),
            n,
            reserved_at,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::keyed::{KeyedDecision, Stats};
    use crate::core::exact::limiter::{Decision, Reservation};
    use crate::core::exact::rate::BandSpec;
    use crate::core::exact::rate::Rate;

    const SECOND: i64 = 1_000_000_000;
    const NS: u128 = 1_000_000_000;

    /// `burst` tokens, one a second, in one shard.
    fn table(max_keys: usize, burst: u64) -> KeyedLimiter<String> {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), burst).unwrap();
        KeyedLimiter::new(&[spec], max_keys, 1)
    }

    fn taken(after_ns: u128) -> KeyedReservation {
        KeyedReservation::Decided(Reservation::Taken { after_ns })
    }

    fn wait(ns: u128) -> KeyedDecision {
        KeyedDecision::Decided(Decision::Wait(ns))
    }

    const ALLOWED: KeyedDecision = KeyedDecision::Decided(Decision::Allowed);

    #[test]
    fn a_reserved_key_s_next_caller_queues_behind_it() {
        let limiter = table(4, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        assert_eq!(limiter.reserve("a", 1, 0, u128::MAX), taken(NS));
        assert_eq!(limiter.acquire("a", 1, 0), wait(2 * NS));
        assert_eq!(
            limiter.reserve("a", 1, SECOND / 2, u128::MAX),
            taken(3 * NS / 2)
        );
        assert_eq!(limiter.acquire("a", 1, 2 * SECOND), wait(NS));
        assert_eq!(limiter.acquire("a", 1, 3 * SECOND), ALLOWED);
        // Another key is not held up by this one's queue.
        assert_eq!(limiter.reserve("b", 2, 0, 0), taken(0));
        assert_eq!(
            limiter.stats(),
            Stats {
                allowed: 5,
                denied: 2,
                refused: 0,
                forgotten: 0,
            }
        );
    }

    #[test]
    fn a_large_reservation_is_not_overtaken_by_small_requests() {
        let limiter = table(4, 10);
        assert_eq!(limiter.acquire("a", 10, 0), ALLOWED);
        assert_eq!(limiter.reserve("a", 5, 0, u128::MAX), taken(5 * NS));
        for t in 1..=5 {
            assert!(matches!(
                limiter.acquire("a", 1, t * SECOND),
                KeyedDecision::Decided(Decision::Wait(_))
            ));
        }
        assert_eq!(limiter.acquire("a", 1, 6 * SECOND), ALLOWED);
    }

    #[test]
    fn a_reservation_too_far_ahead_takes_nothing() {
        let limiter = table(4, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        let before = limiter.entries();
        assert_eq!(
            limiter.reserve("a", 2, 0, 2 * NS - 1),
            KeyedReservation::Decided(Reservation::TooLate(2 * NS))
        );
        assert_eq!(
            limiter.reserve("a", 3, 0, u128::MAX),
            KeyedReservation::Decided(Reservation::Never)
        );
        assert_eq!(
            limiter.reserve("new", 3, 0, u128::MAX),
            KeyedReservation::Decided(Reservation::Never)
        );
        assert_eq!(limiter.entries(), before);
        assert_eq!(limiter.stats().denied, 3);
        assert_eq!(limiter.acquire("a", 1, SECOND), ALLOWED);
    }

    #[test]
    fn a_caller_behind_the_table_s_clock_waits_from_its_own_time() {
        let limiter = table(4, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        assert_eq!(limiter.acquire("b", 1, SECOND), ALLOWED);
        // Decided at 1 s, when "a" has 1 token: the next is there at 2 s, 2 s from 0.
        assert_eq!(
            limiter.reserve("a", 2, 0, 2 * NS - 1),
            KeyedReservation::Decided(Reservation::TooLate(2 * NS))
        );
        assert_eq!(limiter.reserve("a", 2, 0, 2 * NS), taken(2 * NS));
        assert_eq!(limiter.acquire("a", 1, 2 * SECOND), wait(NS));
    }

    #[test]
    fn a_reservation_given_back_leaves_the_key_as_it_was() {
        let limiter = table(4, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        let before = limiter.entries();
        assert_eq!(limiter.reserve("a", 2, 0, u128::MAX), taken(2 * NS));
        assert_eq!(limiter.acquire("a", 1, 0), wait(3 * NS));
        limiter.give_back("a", 2, 0, 2 * SECOND);
        assert_eq!(limiter.entries(), before);
        assert_eq!(limiter.acquire("a", 1, SECOND), ALLOWED);
        // A new key's reservation is taken at once; given back, the key is full and forgotten.
        assert_eq!(limiter.reserve("b", 1, SECOND, u128::MAX), taken(0));
        assert!(limiter.contains("b"));
        limiter.give_back("b", 1, SECOND, SECOND);
        assert!(!limiter.contains("b"));
        limiter.give_back("nobody", 1, SECOND, SECOND);
        assert!(!limiter.contains("nobody"));
    }

    #[test]
    fn a_key_s_reservation_given_back_with_others_behind_it_is_forfeited() {
        // Burst 1, the token spent: A is booked at 1 s, B at 2 s, and A gives up. Its second
        // is not handed out again while B keeps its turn: C is booked behind B.
        let limiter = table(4, 1);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(limiter.reserve("a", 1, 0, u128::MAX), taken(NS));
        assert_eq!(limiter.reserve("a", 1, 0, u128::MAX), taken(2 * NS));
        limiter.give_back("a", 1, 0, SECOND);
        assert_eq!(limiter.reserve("a", 1, 0, u128::MAX), taken(3 * NS));
    }

    #[test]
    fn a_reserved_key_is_not_forgotten_before_its_time() {
        let limiter = table(1, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        assert_eq!(limiter.reserve("a", 1, 0, u128::MAX), taken(NS));
        // A refund while the waiter queues is forfeited: the key is full again only 2 s after
        // the reservation's end, at 3 s.
        limiter.refund("a", 2, 0);
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("a", 0, SECOND / 2), ALLOWED);
        assert!(
            limiter.contains("a"),
            "settled ahead of the clock is not fresh"
        );
        assert_eq!(
            limiter.acquire("b", 1, SECOND / 2),
            KeyedDecision::Refused {
                retry_in: 2_500_000_000
            }
        );
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("b", 1, 3 * SECOND), ALLOWED);
        assert!(!limiter.contains("a"));
    }

    #[test]
    fn a_reserved_key_makes_room_only_once_its_reservation_has_refilled() {
        let limiter = table(1, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        assert_eq!(limiter.reserve("a", 2, 0, u128::MAX), taken(2 * NS));
        // Settled at 2 s, empty: full again at 4 s.
        assert_eq!(
            limiter.reserve("b", 1, 3 * SECOND, u128::MAX),
            KeyedReservation::Refused { retry_in: NS }
        );
        assert!(limiter.contains("a"));
        assert_eq!(limiter.reserve("b", 1, 4 * SECOND, u128::MAX), taken(0));
        assert!(!limiter.contains("a"));
        assert_eq!(limiter.stats().refused, 1);
    }

    #[test]
    fn a_reservation_from_the_first_key_due_moves_the_refusal_hint_later() {
        let limiter = table(1, 2);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(
            limiter.acquire("b", 1, 0),
            KeyedDecision::Refused { retry_in: NS }
        );
        assert_eq!(limiter.reserve("a", 2, 0, u128::MAX), taken(NS));
        // Settled at 1 s, empty: full again at 3 s, not 1 s.
        assert_eq!(
            limiter.acquire("b", 1, SECOND),
            KeyedDecision::Refused { retry_in: 2 * NS }
        );
        assert_eq!(limiter.acquire("b", 1, 3 * SECOND), ALLOWED);
    }

    #[test]
    fn a_table_with_a_reserved_key_is_saved_and_restored() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let saved: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 2);
        assert_eq!(saved.acquire("a", 2, 0), ALLOWED);
        assert_eq!(saved.reserve("a", 2, 0, u128::MAX), taken(2 * NS));
        let entries = saved.entries();
        assert!(entries
            .iter()
            .any(|(_, balances)| balances[0].settled_at > saved.latest()));
        let restored: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 2);
        restored
            .restore(saved.seed(), entries, saved.latest(), saved.stats())
            .unwrap();
        assert_eq!(restored.peek("a", 1, 0), saved.peek("a", 1, 0));
        assert_eq!(restored.acquire("a", 1, SECOND), wait(2 * NS));
        assert_eq!(restored.acquire("a", 1, 3 * SECOND), ALLOWED);
    }

    #[test]
    fn a_key_in_debt_is_neither_fresh_nor_forgotten_until_repaid() {
        // Burst 2, 1 a second: 2 reserved, 4 used owes 2 s; full again at 4 s.
        let limiter = table(1, 2);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        limiter.settle_cost("a", 2, 4, 0);
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("a", 1, 3 * SECOND - 1), wait(1));
        // The table is full of a key in debt: another key waits for it to be repaid.
        assert_eq!(
            limiter.acquire("b", 1, SECOND),
            KeyedDecision::Refused { retry_in: 3 * NS }
        );
        assert_eq!(limiter.acquire("b", 1, 4 * SECOND), ALLOWED);
        assert!(!limiter.contains("a"), "forgotten once full again");
    }

    #[test]
    fn a_key_not_remembered_is_stored_in_debt_and_refunds_to_it_store_nothing() {
        let limiter = table(2, 2);
        limiter.settle_cost("a", 5, 1, 0);
        assert!(!limiter.contains("a"), "a full key refunded is still full");
        limiter.settle_cost("a", 1, 1, 0);
        assert!(!limiter.contains("a"));
        // Forgotten once full, then settled with an overage: stored, owing 1 s.
        limiter.settle_cost("a", 1, 4, 0);
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("a", 1, SECOND), wait(NS));
        assert_eq!(limiter.acquire("a", 1, 2 * SECOND), ALLOWED);
    }

    #[test]
    fn a_full_table_of_keys_in_use_cannot_record_a_new_key_s_overage() {
        let limiter = table(1, 2);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        limiter.settle_cost("b", 0, 3, 0);
        assert!(!limiter.contains("b"));
        assert_eq!(limiter.len(), 1);
    }
}
