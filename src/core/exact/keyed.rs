//! Many clients at once: one lazily settled limiter per key, in bounded memory.
//!
//! A server limits each client (an IP, an API key) separately, so it keeps one [`Limiter`] per
//! key. Two things make such a table dangerous, and this one avoids both:
//!
//! * **Unbounded growth.** A flood of distinct keys must not grow the table without limit. The
//!   table holds at most `max_keys` entries.
//! * **Unsafe forgetting.** Evicting by age (LRU) forgets a throttled client and hands it a fresh,
//!   full bucket: an attacker rotates through enough keys and is never limited. Here a key is
//!   forgotten only when its state is *indistinguishable from a fresh key's*: every band full,
//!   settled no later than now. Forgetting it then changes no answer, ever.
//!
//! Forgetting is lazy, the same read-time trick as a DNS cache entry that expires only when
//! someone looks: nothing runs in the background; when a new key finds its shard full, the shard
//! is swept for keys that have refilled to the top. If none has, the new key is refused (fail
//! closed, counted in [`Stats::refused`]) rather than anyone being evicted. The trade-off is
//! deliberate: under a flood of distinct keys faster than buckets refill, new clients wait, but
//! no throttled client is ever let off.
//!
//! The table is split into shards, each behind its own lock, so different keys rarely contend.
//! Fresh keys start full, which is what lets "full" mean "forgettable".

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::core::exact::limiter::{Decision, Limiter};
use crate::core::exact::rate::BandSpec;

/// What a keyed limiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedDecision {
    /// The key's own limiter decided.
    Decided(Decision),
    /// The key is new and the table is full of keys that cannot be forgotten: refused, without
    /// evicting anyone.
    Refused,
}

/// Counts since the limiter was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    pub allowed: u64,
    pub denied: u64,
    pub refused: u64,
    pub forgotten: u64,
}

impl Stats {
    fn count(&mut self, decision: KeyedDecision) {
        match decision {
            KeyedDecision::Decided(Decision::Allowed) => self.allowed += 1,
            KeyedDecision::Decided(Decision::Wait(_) | Decision::Never) => self.denied += 1,
            KeyedDecision::Refused => self.refused += 1,
        }
    }

    fn add(&mut self, other: &Self) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.refused += other.refused;
        self.forgotten += other.forgotten;
    }
}

struct Shard<K> {
    entries: HashMap<K, Limiter>,
    /// The time of the last sweep that found nothing to forget: until the clock moves past it,
    /// another sweep would find nothing either (only time makes a key forgettable).
    fruitless_sweep_at: Option<i64>,
    stats: Stats,
}

/// One limiter per key, at most `max_keys` of them, forgotten only when safe.
pub struct KeyedLimiter<K> {
    /// Seeded per table, so nobody can choose keys that all land in one shard.
    hasher: RandomState,
    specs: Vec<BandSpec>,
    fresh: Limiter,
    shards: Vec<Mutex<Shard<K>>>,
    per_shard: usize,
}

impl<K: Hash + Eq> KeyedLimiter<K> {
    /// A table of at most `max_keys` keys (at least 1), each limited by `specs`, split into
    /// `shards` shards (at least one, at most `max_keys`), each holding `max_keys / shards`.
    #[must_use]
    pub fn new(specs: &[BandSpec], max_keys: usize, shards: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = shards.clamp(1, max_keys);
        let per_shard = max_keys / shards;
        Self {
            hasher: RandomState::new(),
            specs: specs.to_vec(),
            fresh: Limiter::new(specs, None, None),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::new(),
                        fruitless_sweep_at: None,
                        stats: Stats::default(),
                    })
                })
                .collect(),
            per_shard,
        }
    }

    /// The bands every key is limited by.
    #[must_use]
    pub fn specs(&self) -> &[BandSpec] {
        &self.specs
    }

    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> MutexGuard<'_, Shard<K>> {
        #[allow(clippy::cast_possible_truncation)] // only the low bits pick a shard
        let index = (self.hasher.hash_one(key) as usize) % self.shards.len();
        // A shard's every change is a single insert or removal: a poisoned lock still guards
        // a consistent map.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Take `n` tokens for `key` at `now_ns`, as its own limiter decides.
    pub fn acquire<Q>(&self, key: &Q, n: u64, now_ns: i64) -> KeyedDecision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut shard = self.shard(key);
        let decision = if let Some(limiter) = shard.entries.get_mut(key) {
            let decision = limiter.acquire(n, now_ns);
            if limiter.is_fresh_at(now_ns) {
                // Taking nothing (n = 0) can leave a refilled key just like a fresh one.
                shard.entries.remove(key);
                shard.stats.forgotten += 1;
            }
            KeyedDecision::Decided(decision)
        } else {
            self.acquire_new(&mut shard, key, n, now_ns)
        };
        shard.stats.count(decision);
        decision
    }

    /// A key not in the table is a fresh, full limiter: answer as one, and store it only if
    /// the answer changed it.
    fn acquire_new<Q>(&self, shard: &mut Shard<K>, key: &Q, n: u64, now_ns: i64) -> KeyedDecision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut limiter = self.fresh.clone();
        let decision = limiter.acquire(n, now_ns);
        if decision != Decision::Allowed || limiter.is_fresh_at(now_ns) {
            // Refused by a fresh limiter (n beyond a burst), or allowed taking nothing: the
            // key's state is still a fresh one, so there is nothing to remember.
            return KeyedDecision::Decided(decision);
        }
        if shard.entries.len() >= self.per_shard && !Self::sweep(shard, now_ns) {
            return KeyedDecision::Refused;
        }
        shard.entries.insert(key.to_owned(), limiter);
        KeyedDecision::Decided(decision)
    }

    /// Forget every key of the shard that is indistinguishable from a fresh one at `now_ns`;
    /// whether any room was made.
    fn sweep(shard: &mut Shard<K>, now_ns: i64) -> bool {
        if shard.fruitless_sweep_at.is_some_and(|at| now_ns <= at) {
            return false;
        }
        let before = shard.entries.len();
        shard
            .entries
            .retain(|_, limiter| !limiter.is_fresh_at(now_ns));
        let forgotten = before - shard.entries.len();
        shard.stats.forgotten += forgotten as u64;
        if forgotten == 0 {
            shard.fruitless_sweep_at = Some(now_ns);
        }
        forgotten > 0
    }

    /// What [`KeyedLimiter::acquire`] would answer, taking nothing and storing nothing new.
    pub fn peek<Q>(&self, key: &Q, n: u64, now_ns: i64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut shard = self.shard(key);
        match shard.entries.get_mut(key) {
            Some(limiter) => limiter.peek(n, now_ns),
            None => self.fresh.clone().peek(n, now_ns),
        }
    }

    /// Give `n` tokens back to `key` (capped at each burst); a key that is then full is
    /// forgotten at once, and an unknown key is already full.
    pub fn refund<Q>(&self, key: &Q, n: u64, now_ns: i64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut shard = self.shard(key);
        let refilled = shard.entries.get_mut(key).is_some_and(|limiter| {
            limiter.refund(n, now_ns);
            limiter.is_fresh_at(now_ns)
        });
        if refilled {
            shard.entries.remove(key);
            shard.stats.forgotten += 1;
        }
    }

    /// How many keys are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entries
                    .len()
            })
            .sum()
    }

    /// Whether no key is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counts, summed over shards.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut total = Stats::default();
        for shard in &self.shards {
            total.add(&shard.lock().unwrap_or_else(PoisonError::into_inner).stats);
        }
        total
    }
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// The remembered keys (a snapshot, shard by shard).
    #[must_use]
    pub fn keys(&self) -> Vec<K> {
        self.shards
            .iter()
            .flat_map(|shard| {
                let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard.entries.keys().cloned().collect::<Vec<_>>()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::rate::Rate;

    const SECOND: i64 = 1_000_000_000;

    /// 1 token per second, burst 2, in one shard (so the bound is exact).
    fn table(max_keys: usize) -> KeyedLimiter<String> {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        KeyedLimiter::new(&[spec], max_keys, 1)
    }

    const ALLOWED: KeyedDecision = KeyedDecision::Decided(Decision::Allowed);

    #[test]
    fn a_flood_of_new_keys_never_grows_the_table_past_its_bound() {
        let limiter = table(100);
        for i in 0..10_000 {
            limiter.acquire(format!("client-{i}").as_str(), 1, 0);
        }
        assert!(limiter.len() <= 100);
        let stats = limiter.stats();
        assert_eq!(stats.allowed + stats.refused, 10_000);
        assert!(stats.refused >= 9_900 - 100);
    }

    #[test]
    fn the_bound_holds_whatever_the_shard_count() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        for (max_keys, shards) in [(10, 4), (0, 3), (7, 7), (5, 64)] {
            let limiter: KeyedLimiter<String> = KeyedLimiter::new(&[spec], max_keys, shards);
            for i in 0..1_000 {
                limiter.acquire(format!("k{i}").as_str(), 1, 0);
            }
            assert!(
                limiter.len() <= max_keys.max(1),
                "{max_keys} keys in {shards} shards"
            );
        }
    }

    #[test]
    fn a_throttled_key_is_never_forgotten_however_many_keys_follow() {
        let limiter = table(8);
        assert_eq!(limiter.acquire("attacker", 2, 0), ALLOWED);
        for i in 0..1_000 {
            limiter.acquire(format!("decoy-{i}").as_str(), 1, 0);
        }
        // Still empty at the same instant: an LRU table would have handed back a full bucket.
        assert_eq!(
            limiter.acquire("attacker", 1, 0),
            KeyedDecision::Decided(Decision::Wait(SECOND.unsigned_abs().into()))
        );
    }

    #[test]
    fn a_refilled_key_is_forgotten_when_room_is_needed_and_answers_as_before() {
        let limiter = table(4);
        for i in 0..4 {
            assert_eq!(limiter.acquire(format!("k{i}").as_str(), 1, 0), ALLOWED);
        }
        // One second later every key is full again: new keys make room by forgetting them.
        for i in 4..8 {
            assert_eq!(
                limiter.acquire(format!("k{i}").as_str(), 1, SECOND),
                ALLOWED
            );
        }
        assert!(limiter.len() <= 4);
        assert!(limiter.stats().forgotten >= 1);
        // A forgotten key answers exactly as if it had been kept: full, burst 2.
        assert_eq!(limiter.peek("k0", 2, SECOND), Decision::Allowed);
        // Taking from it needs room, and k4..k7 are not full until a second later.
        assert_eq!(limiter.acquire("k0", 2, SECOND), KeyedDecision::Refused);
        assert_eq!(limiter.acquire("k0", 2, 2 * SECOND), ALLOWED);
        assert_eq!(
            limiter.peek("k0", 1, 2 * SECOND),
            Decision::Wait(1_000_000_000)
        );
    }

    #[test]
    fn forgetting_changes_no_answer() {
        // The same random workload through a tiny table and through one that never forgets.
        let spec = BandSpec::new(Rate::new(3, 2).unwrap(), 3).unwrap();
        let small = KeyedLimiter::new(&[spec], 2, 1);
        let large = KeyedLimiter::new(&[spec], 1_000_000, 2);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut now = 0_i64;
        for _ in 0..20_000 {
            now += i64::try_from(next() % 400_000_000).unwrap();
            let key = (next() % 3).to_string();
            let n = next() % 4;
            // A refusal takes nothing from a key the small table holds as fresh; the large
            // table skips that request too, so both keep seeing the same history.
            let small_said = small.acquire(key.as_str(), n, now);
            if small_said != KeyedDecision::Refused {
                let large_said = large.acquire(key.as_str(), n, now);
                assert_eq!(small_said, large_said, "key {key}, n {n}, at {now}");
            }
        }
        assert!(small.stats().forgotten > 0);
    }

    #[test]
    fn refunds_and_peeks_do_not_store_fresh_keys() {
        let limiter = table(4);
        limiter.refund("nobody", 5, 0);
        assert_eq!(limiter.peek("nobody", 2, 0), Decision::Allowed);
        assert_eq!(
            limiter.acquire("nobody", 3, 0),
            KeyedDecision::Decided(Decision::Never)
        );
        assert!(limiter.is_empty());
        assert_eq!(limiter.acquire("someone", 1, 0), ALLOWED);
        limiter.refund("someone", 1, 0);
        assert!(limiter.is_empty(), "full again, so forgotten at once");
    }
}
