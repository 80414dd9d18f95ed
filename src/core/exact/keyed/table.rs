//! Deciding for a key: one request, or a whole trace, at the table's one clock. Each call
//! locks the key's shard and runs the one decision ([`home`]) on it.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::Ordering;

use hashbrown::Equivalent;

use super::room::Others;
use super::{lock, Answer, KeyInShard, KeyedDecision, KeyedLimiter};
use crate::core::exact::home;
use crate::core::exact::limiter::Level;

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// Take `n` tokens for `key` at `now_ns`, as its own limiter decides.
    pub fn acquire<Q>(&self, key: &Q, n: u64, now_ns: i64) -> KeyedDecision
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        home::take(&mut self.locked(key, now_ns).home(self, key), n, false).decision
    }

    /// [`KeyedLimiter::acquire`], also saying what the key holds after it.
    pub fn check<Q>(&self, key: &Q, n: u64, now_ns: i64) -> Answer
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        home::take(&mut self.locked(key, now_ns).home(self, key), n, true)
    }

    /// [`KeyedLimiter::acquire`] for each request in turn (key, n, time), answers in order:
    /// exactly the calls one by one, but with every shard locked once per stretch of requests
    /// rather than once per request. Other threads get in between stretches.
    pub fn acquire_many<Q, R>(
        &self,
        requests: impl IntoIterator<Item = (R, u64, i64)>,
        mut answer: impl FnMut(KeyedDecision),
    ) where
        R: Borrow<Q>,
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'r> From<&'r Q>,
    {
        const STRETCH: usize = 4096;
        let mut requests = requests.into_iter().peekable();
        while requests.peek().is_some() {
            let mut shards: Vec<_> = self.shards.iter().map(lock).collect();
            // Every shard is held, so the table's clock can run locally for the stretch.
            let mut latest = self.latest.load(Ordering::Relaxed);
            for (key, n, now_ns) in requests.by_ref().take(STRETCH) {
                let key = key.borrow();
                let (hash, index) = self.shard_index(key);
                latest = latest.max(now_ns);
                let behind = (i128::from(latest) - i128::from(now_ns)).unsigned_abs();
                // The key's shard, and the others beside it (`index` is always a shard's).
                let (before, rest) = shards.split_at_mut(index);
                let [shard, after @ ..] = rest else { continue };
                let mut view = KeyInShard {
                    table: self,
                    shard,
                    others: Others::Held(before, after),
                    hash,
                    key,
                    now: latest,
                    behind,
                };
                answer(home::take(&mut view, n, false).decision);
            }
            self.latest.fetch_max(latest, Ordering::Relaxed);
        }
    }

    /// What [`KeyedLimiter::check`] would answer, taking nothing and storing nothing new
    /// (though keys that are fresh again may be forgotten, which changes no answer).
    pub fn peek<Q>(&self, key: &Q, n: u64, now_ns: i64) -> Answer
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        home::peek(&mut self.locked(key, now_ns).home(self, key), n)
    }

    /// Whole tokens `key` holds at `now_ns` (a key not remembered is full).
    pub fn available<Q>(&self, key: &Q, now_ns: i64) -> u128
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        home::available(&mut self.locked(key, now_ns).home(self, key))
    }

    /// Each band's [`Level`] for `key` at `now_ns` (a key not remembered is full), storing
    /// nothing.
    pub fn levels<Q>(&self, key: &Q, now_ns: i64) -> Vec<Level>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        home::levels(&mut self.locked(key, now_ns).home(self, key))
    }
}

#[cfg(test)]
mod tests;
