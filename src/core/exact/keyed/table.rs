//! Deciding for a key: one request, or a whole trace, at the table's one clock.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::Ordering;

use hashbrown::Equivalent;

use super::room::Others;
use super::{lock, remaining_if, Answer, KeyedDecision, KeyedLimiter, Locked, Request, Shard};
use crate::core::exact::limiter::{Balances, Decision, Level};
use crate::core::exact::rate::BandSpec;

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// Take `n` tokens for `key` at `now_ns`, as its own limiter decides.
    pub fn acquire<Q>(&self, key: &Q, n: u64, now_ns: i64) -> KeyedDecision
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        self.acquire_locked(key, n, now_ns, false).0
    }

    /// [`KeyedLimiter::acquire`], also saying what the key holds after it.
    pub fn check<Q>(&self, key: &Q, n: u64, now_ns: i64) -> Answer
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let (decision, remaining) = self.acquire_locked(key, n, now_ns, true);
        Answer {
            decision,
            remaining,
        }
    }

    fn acquire_locked<Q>(
        &self,
        key: &Q,
        n: u64,
        now_ns: i64,
        with_remaining: bool,
    ) -> (KeyedDecision, u128)
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let mut locked = self.locked(key, now_ns);
        let request = locked.request(key, n, with_remaining);
        let mut others = Others::Unlocked {
            shards: &self.shards,
            own: locked.index,
        };
        self.acquire_in(&mut locked.shard, &mut others, &request)
    }

    /// Decide `request` in `shard`, whose lock the caller holds (as it may hold the `others`).
    pub(super) fn acquire_in<Q>(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        request: &Request<'_, Q>,
    ) -> (KeyedDecision, u128)
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let room_from = shard.room_from;
        let (decision, remaining) =
            if let Some(mut stored) = Self::find(shard, request.hash, request.key) {
                // Taking from the key that is full first moves the shard's first room later.
                let specs = &self.specs;
                let mut limiter = stored.balances();
                let was_first = room_from.is_some_and(|at| limiter.fresh_from(specs) == at);
                let decision = limiter.acquire(specs, request.n, request.now);
                stored.store(&limiter);
                let remaining = remaining_if(request.with_remaining, specs, &limiter);
                // Settled at the table's clock, unless a reservation settled it further ahead:
                // full there is not fresh yet (nothing accrues before it), so the cheap test
                // comes first and the exact one only for a key that is full.
                let full = limiter.is_full(specs) && limiter.is_fresh_at(specs, request.now);
                if was_first && decision == Decision::Allowed {
                    shard.room_from = None;
                    // The table's room hint may name this key's refill too, now later than it says.
                    self.changes.fetch_add(1, Ordering::Release);
                }
                if full {
                    // Taking nothing (n = 0) can leave a refilled key just like a fresh one.
                    self.forget(shard, request.hash, request.key);
                }
                (KeyedDecision::Decided(decision), remaining)
            } else {
                self.acquire_new(shard, others, request)
            };
        let decision = decision.from_caller(request.behind);
        shard.stats.count(decision);
        (decision, remaining)
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
                let mut others = Others::Held(before, after);
                let request = Request {
                    hash,
                    key,
                    n,
                    now: latest,
                    behind,
                    with_remaining: false,
                };
                let (decision, _) = self.acquire_in(shard, &mut others, &request);
                answer(decision);
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
        let Locked {
            mut shard,
            index,
            hash,
            now,
            behind,
        } = self.locked(key, now_ns);
        let (decision, remaining) = if let Some(stored) = Self::find(&mut shard, hash, key) {
            let mut limiter = stored.balances();
            let decision = limiter.peek(&self.specs, n, now);
            (
                KeyedDecision::Decided(decision),
                limiter.available_at(&self.specs, now),
            )
        } else {
            let mut limiter = self.fresh.clone();
            let decision = limiter.acquire(&self.specs, n, now);
            let stores = decision == Decision::Allowed && !limiter.is_fresh_at(&self.specs, now);
            let mut others = Others::Unlocked {
                shards: &self.shards,
                own: index,
            };
            match stores
                .then(|| self.make_room(&mut shard, &mut others, now, false, &[]))
                .flatten()
            {
                Some(retry_in) => (KeyedDecision::Refused { retry_in }, 0),
                None => (
                    KeyedDecision::Decided(decision),
                    self.fresh.clone().available_at(&self.specs, now),
                ),
            }
        };
        Answer {
            decision: decision.from_caller(behind),
            remaining,
        }
    }

    /// Whole tokens `key` holds at `now_ns` (a key not remembered is full).
    pub fn available<Q>(&self, key: &Q, now_ns: i64) -> u128
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.read(key, now_ns, Balances::available_at)
    }

    /// Each band's [`Level`] for `key` at `now_ns` (a key not remembered is full), storing
    /// nothing.
    pub fn levels<Q>(&self, key: &Q, now_ns: i64) -> Vec<Level>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.read(key, now_ns, Balances::levels_at)
    }

    /// `look` at a copy of `key`'s balances (a fresh key's if it is not remembered), at the
    /// table's time for `now_ns`, under its shard's lock.
    fn read<Q, R>(
        &self,
        key: &Q,
        now_ns: i64,
        look: impl FnOnce(&mut Balances, &[BandSpec], i64) -> R,
    ) -> R
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let Locked {
            mut shard,
            hash,
            now,
            ..
        } = self.locked(key, now_ns);
        let mut copy = Self::find(&mut shard, hash, key)
            .map_or_else(|| self.fresh.clone(), |stored| stored.balances());
        look(&mut copy, &self.specs, now)
    }
}

#[cfg(test)]
mod tests;
