//! A saved table back: its seed (so every key falls in the same shard), its keys, its clock and
//! its counts, all checked before anything is restored.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;

use super::{lock, off_the_clock, KeyedLimiter, Stats};
use crate::core::exact::limiter::Balances;
pub use crate::core::exact::limiter::RestoreError;
use crate::core::exact::settle::Balance;

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A saved key's balances, checked against the table's bands (see [`Balances::saved`]) and
    /// the saved table's clock, `latest`. A key is stored only by a call, so a table with a key
    /// has a clock; a key with a waiter is settled ahead of it, at the end of its reservations,
    /// but never as far as a time read on another clock would be.
    ///
    /// # Errors
    ///
    /// As [`Balances::saved`], or [`RestoreError::Ahead`] for a balance settled later than
    /// that.
    pub fn saved_key(
        &self,
        saved: Vec<Balance>,
        latest: Option<i64>,
    ) -> Result<Balances, RestoreError> {
        let balances = Balances::saved(&self.specs, saved)?;
        let ahead = |at: i64| {
            latest.is_none_or(|latest| off_the_clock(latest, at).is_some_and(|gap| gap > 0))
        };
        if balances
            .iter()
            .any(|balance| balance.settled_at.is_some_and(ahead))
        {
            return Err(RestoreError::Ahead);
        }
        Ok(balances)
    }

    /// Whether the table is new, as one must be to take a saved state: no key held, and no
    /// call's time seen.
    ///
    /// # Errors
    ///
    /// [`RestoreError::Used`] if not.
    pub fn unused(&self) -> Result<(), RestoreError> {
        if self.is_empty() && self.latest().is_none() {
            Ok(())
        } else {
            Err(RestoreError::Used)
        }
    }

    /// Put back what [`KeyedLimiter::seed`], [`KeyedLimiter::entries`],
    /// [`KeyedLimiter::latest`] and [`KeyedLimiter::stats`] saved, into a table of the same
    /// bands, `max_keys` and shards that has not been used yet. With the saved seed every key
    /// lands in the shard it was saved from.
    ///
    /// # Errors
    ///
    /// If a key appears twice or there are more than `max_keys` keys (a state this table could
    /// not have saved); then nothing is restored.
    pub fn restore(
        &self,
        seed: (u64, u64),
        entries: Vec<(K, Balances)>,
        latest: Option<i64>,
        stats: Stats,
    ) -> Result<(), RestoreError> {
        let mut shards: Vec<_> = self.shards.iter().map(lock).collect();
        let previous = self.hasher.keys();
        self.hasher.set(seed);
        let mut count = 0;
        for (key, limiter) in entries {
            let (hash, index) = self.shard_index(&key);
            let shard = &mut shards[index];
            let problem = if shard.entries.find(hash, |known| *known == key).is_some() {
                Some(RestoreError::Duplicate)
            } else if count >= self.max_keys {
                Some(RestoreError::Overfull)
            } else {
                None
            };
            if let Some(problem) = problem {
                // Back to the unused table this was.
                for shard in &mut shards {
                    shard.entries.clear();
                }
                self.hasher.set(previous);
                return Err(problem);
            }
            shard
                .entries
                .insert(hash, key, &limiter, |key| self.hasher.hash_one(key));
            count += 1;
        }
        self.keys.store(count, Ordering::Relaxed);
        shards[0].stats.add(&stats);
        if let Some(at) = latest {
            self.latest.fetch_max(at, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Every remembered key with its balances (a snapshot, shard by shard), in the order of
    /// [`KeyedLimiter::specs`].
    #[must_use]
    pub fn entries(&self) -> Vec<(K, Balances)> {
        let mut entries = Vec::with_capacity(self.len());
        for shard in &self.shards {
            lock(shard)
                .entries
                .each(|key, balances| entries.push((key.clone(), balances)));
        }
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
    use crate::core::exact::rate::{BandSpec, Rate};

    #[test]
    fn a_saved_key_is_checked_against_the_bands_and_the_saved_clock() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let table: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        let balance = |settled_at| Balance {
            units: 0,
            settled_at,
        };
        assert_eq!(
            table.saved_key(vec![balance(Some(5)), balance(Some(5))], Some(5)),
            Err(RestoreError::Bands)
        );
        let full = spec.capacity_units();
        let over = Balance {
            units: full + 1,
            settled_at: Some(5),
        };
        assert_eq!(
            table.saved_key(vec![over], Some(5)),
            Err(RestoreError::OverBurst)
        );
        // Settled ahead of the clock, as a waiter's reservation leaves a key: kept.
        assert!(table.saved_key(vec![balance(Some(1_000))], Some(5)).is_ok());
        // A key with a settlement and no clock, or one a decade ahead of it: refused.
        assert_eq!(
            table.saved_key(vec![balance(Some(5))], None),
            Err(RestoreError::Ahead)
        );
        let decade = MAX_CLOCK_GAP_NS + 6;
        assert_eq!(
            table.saved_key(vec![balance(Some(decade))], Some(5)),
            Err(RestoreError::Ahead)
        );
    }

    #[test]
    fn only_a_new_table_takes_a_saved_state() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let table: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        assert_eq!(table.unused(), Ok(()));
        // A call that took nothing and stored no key still moved the table's clock.
        table.peek("a", 1, 5);
        assert_eq!(table.unused(), Err(RestoreError::Used));
        let held: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        held.acquire("a", 1, 5);
        assert_eq!(held.unused(), Err(RestoreError::Used));
    }

    #[test]
    fn a_saved_table_comes_back_whole_and_a_bad_save_is_refused() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        // Room for three keys in each shard, however the keys fall.
        let saved: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        assert_eq!(saved.latest(), None);
        for (key, n) in [("a", 2), ("b", 1), ("c", 1)] {
            saved.acquire(key, n, -5);
        }
        assert_eq!(saved.latest(), Some(-5));
        let mut entries = saved.entries();
        assert_eq!(entries.len(), saved.len());
        let restored: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        assert_ne!(
            restored.seed(),
            saved.seed(),
            "each table draws its own seed"
        );
        assert_ne!(
            restored.hasher.hash_one("a"),
            saved.hasher.hash_one("a"),
            "keys are hashed with the table's seed"
        );
        assert_eq!(
            restored.restore(saved.seed(), entries.clone(), saved.latest(), saved.stats()),
            Ok(())
        );
        assert_eq!(restored.seed(), saved.seed());
        assert_eq!(restored.hasher.hash_one("a"), saved.hasher.hash_one("a"));
        assert_eq!(restored.latest(), Some(-5));
        assert_eq!(restored.stats(), saved.stats());
        let mut keys = restored.keys();
        keys.sort();
        assert_eq!(keys, ["a", "b", "c"]);
        for key in ["a", "b", "c", "d"] {
            assert_eq!(restored.peek(key, 2, -5), saved.peek(key, 2, -5), "{key}");
        }
        // A key twice, or more keys than a shard may hold: nothing is restored.
        let again: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, 2);
        let mut twice = entries.clone();
        twice.push(entries[0].clone());
        assert_eq!(
            again.restore(saved.seed(), twice, None, Stats::default()),
            Err(RestoreError::Duplicate)
        );
        assert!(again.is_empty());
        let small: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 2, 1);
        entries.truncate(3);
        assert_eq!(
            small.restore(saved.seed(), entries, None, Stats::default()),
            Err(RestoreError::Overfull)
        );
        assert!(small.is_empty());
    }
}
