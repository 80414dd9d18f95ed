//! A key held for a stacked decision (see [`crate::core::exact::stack`]): its shard stays
//! locked while the request's other limits answer, and the key answers in two steps, first
//! what it would say, then, only if every limit said yes, the taking.
//!
//! The one thing a keyed table adds to that is room. A new key is stored only when it is
//! taken from, and a full table refuses it. If the room were looked for at the taking, the
//! table could refuse after the other limits had taken their tokens, so it is made when the
//! key is asked: a fresh, full entry is stored then, and let go of if the request is refused.
//! A fresh entry is indistinguishable from no entry, so storing and letting go changes no
//! answer, for this key or any other.
//!
//! Every key the request asks is **pinned** until it is settled: a later key of the same
//! request that needs room never forgets it, fresh as it may be (the place holder is fresh by
//! design, and a key the table holds may have refilled). Forgotten, its room would go to that
//! later key, and the taking would find the table full after the other limits had taken.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard};

use hashbrown::Equivalent;

use super::room::Others;
use super::{lock, Answer, KeyInShard, KeyedDecision, KeyedLimiter, Shard};
use crate::core::exact::home;
use crate::core::exact::limiter::Decision;

/// The shards of a table a stacked decision needs, locked: the one shard of its key, or, for
/// keys in several shards, every shard of the table, so that a new key can look for room in
/// the others as a single call would (a shard the request held itself would look busy).
pub struct HeldShards<'a, K> {
    shards: Vec<MutexGuard<'a, Shard<K>>>,
    /// The index of the first one held.
    first: usize,
    /// The hashes of the keys asked so far: no room is made by forgetting them.
    pinned: Vec<u64>,
}

impl<'a, K> HeldShards<'a, K> {
    /// The shard `index`, the others where room may be looked for, and the keys pinned.
    fn split<'h>(
        &'h mut self,
        all: &'h [Mutex<Shard<K>>],
        index: usize,
    ) -> (&'h mut Shard<K>, Others<'h, 'a, K>, &'h [u64]) {
        if self.shards.len() == 1 {
            return (
                &mut self.shards[0],
                Others::Unlocked {
                    shards: all,
                    own: index,
                },
                &self.pinned,
            );
        }
        let (before, rest) = self.shards.split_at_mut(index - self.first);
        let (own, after) = rest.split_first_mut().expect("every shard is held");
        (own, Others::Held(before, after), &self.pinned)
    }
}

/// What [`KeyedLimiter::ask_held`] found, for the steps after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    /// The key's answer, taking nothing.
    pub answer: Answer,
    /// The table's time the key was asked at, which the taking uses too.
    now: i64,
    /// How far the caller's time is behind it.
    behind: u128,
    /// Whether a fresh entry was stored to make the key's room.
    stored: bool,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// The index of the shard that keeps `key`: the order stacked decisions lock shards in.
    pub fn shard_for<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        self.shard_index(key).1
    }

    /// Lock the shards of keys in `shards` (indices [`KeyedLimiter::shard_for`] gave): that
    /// one shard, or every shard of the table, in order, if they are several.
    pub fn hold(&self, shards: &[usize]) -> HeldShards<'_, K> {
        match shards {
            [one] => HeldShards {
                shards: vec![lock(&self.shards[*one])],
                first: *one,
                pinned: Vec::new(),
            },
            _ => HeldShards {
                shards: self.shards.iter().map(lock).collect(),
                first: 0,
                pinned: Vec::new(),
            },
        }
    }

    /// What taking `n` tokens for `key` at `now_ns` would answer, taking nothing. A new key
    /// that the taking would store is given its room now: if there is none, the answer is
    /// the refusal; otherwise a fresh entry holds the place. Either way the key is pinned:
    /// the room later keys of the request need is never made by forgetting it.
    pub fn ask_held<Q>(&self, held: &mut HeldShards<'_, K>, key: &Q, n: u64, now_ns: i64) -> Asked
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let now = self.latest.fetch_max(now_ns, Ordering::Relaxed).max(now_ns);
        let behind = (i128::from(now) - i128::from(now_ns)).unsigned_abs();
        let asked = |decision: KeyedDecision, remaining, stored| Asked {
            answer: Answer {
                decision: decision.from_caller(behind),
                remaining,
            },
            now,
            behind,
            stored,
        };
        let specs = &self.specs;
        let (hash, index) = self.shard_index(key);
        held.pinned.push(hash);
        let (shard, mut others, pinned) = held.split(&self.shards, index);
        if let Some(mut stored) = Self::find(shard, hash, key) {
            let mut limiter = stored.balances();
            let decision = limiter.peek(specs, n, now);
            // Asking anchors a place holder never asked before, as it anchors any new state.
            stored.store(&limiter);
            let remaining = limiter.available_at(specs, now);
            return asked(KeyedDecision::Decided(decision), remaining, false);
        }
        let remaining = self.fresh.clone().available_at(specs, now);
        let mut taken = self.fresh.clone();
        let decision = taken.acquire(specs, n, now);
        if decision != Decision::Allowed || taken.is_full(specs) {
            // Refused even when full (n beyond a burst), or allowed taking nothing: the taking
            // stores nothing, so it needs no room.
            return asked(KeyedDecision::Decided(decision), remaining, false);
        }
        if let Some(retry_in) = self.make_room(shard, &mut others, now, true, pinned) {
            return asked(KeyedDecision::Refused { retry_in }, 0, false);
        }
        // The place holder is fresh: due to be forgotten at once, as the shard's hint says.
        shard.room_from = Some(self.fresh.fresh_from(specs));
        shard
            .entries
            .insert(hash, K::from(key), &self.fresh, |key| {
                self.hasher.hash_one(key)
            });
        self.changes.fetch_add(1, Ordering::Release);
        asked(KeyedDecision::Decided(decision), remaining, true)
    }

    /// Take the `n` tokens [`KeyedLimiter::ask_held`] allowed for `key`, at the same time.
    pub fn take_held<Q>(
        &self,
        held: &mut HeldShards<'_, K>,
        key: &Q,
        n: u64,
        asked: &Asked,
    ) -> Answer
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let (hash, index) = self.shard_index(key);
        let (shard, others, _) = held.split(&self.shards, index);
        let mut view = KeyInShard {
            table: self,
            shard,
            others,
            hash,
            key,
            now: asked.now,
            behind: asked.behind,
        };
        let answer = home::take(&mut view, n, true);
        self.unpinned(view.shard, hash, key);
        answer
    }

    /// Nothing is taken for `key`: the request was refused elsewhere, or only asked about
    /// (`counted` false). The place held for it, if any, is let go of; a refused request is
    /// counted as the key said, its own refusal, or DENIED where the key would have allowed.
    pub fn let_go_held<Q>(
        &self,
        held: &mut HeldShards<'_, K>,
        key: &Q,
        asked: &Asked,
        counted: bool,
    ) where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let (hash, index) = self.shard_index(key);
        let (shard, _, _) = held.split(&self.shards, index);
        let stored = asked.stored;
        if stored
            && shard
                .entries
                .remove(hash, |known| key.equivalent(known))
                .is_some()
        {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            // The hint may have named the place holder: unknown until the next sweep.
            shard.room_from = None;
        }
        self.unpinned(shard, hash, key);
        if counted {
            shard.stats.count(match asked.answer.decision {
                KeyedDecision::Decided(Decision::Allowed) => {
                    KeyedDecision::Decided(Decision::Wait(0))
                }
                refused => refused,
            });
        }
    }

    /// `key` is settled: no longer pinned. A sweep while it was may have left it out of its
    /// shard's first room, and the table's; it is counted in them again.
    fn unpinned<Q>(&self, shard: &mut Shard<K>, hash: u64, key: &Q)
    where
        Q: Equivalent<K> + ?Sized,
    {
        if let Some(at) = shard.room_from {
            let specs = &self.specs;
            if let Some(from) =
                Self::find(shard, hash, key).map(|kept| kept.balances().fresh_from(specs))
            {
                shard.room_from = Some(at.min(from));
            }
        }
        // The table's hint may leave it out too: stale from here on.
        self.changes.fetch_add(1, Ordering::Release);
    }
}
