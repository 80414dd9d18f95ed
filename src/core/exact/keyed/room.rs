//! New keys, and the room they need: a key is forgotten only once it is indistinguishable from
//! a new one, and a new key that finds no such key is refused, never let in by evicting anyone.

use std::hash::BuildHasher;
use std::hash::Hash;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, TryLockError};

use hashbrown::Equivalent;

use super::{lock, KeyedLimiter, Shard};
use crate::core::exact::limiter::Balances;

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// Store `key`, not in the table, with `limiter` (a state no new key has), if there is
    /// room for it at `now` (see [`KeyedLimiter::make_room`]); else how long until there may
    /// be, storing nothing.
    ///
    /// # Errors
    ///
    /// That wait, when the table is full of keys that cannot be forgotten.
    pub(super) fn store_new<Q>(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        hash: u64,
        key: &Q,
        limiter: &Balances,
        now: i64,
    ) -> Result<(), u128>
    where
        Q: Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        if let Some(retry_in) = self.make_room(shard, others, now, true, &[]) {
            return Err(retry_in);
        }
        // A new key may be full again before any the last sweep saw.
        let fresh_from = limiter.fresh_from(&self.specs);
        shard.room_from = shard.room_from.map(|at| at.min(fresh_from));
        shard
            .entries
            .insert(hash, K::from(key), limiter, |key| self.hasher.hash_one(key));
        self.changes.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Room for one more key at `now`: `None` if there is, else how long until there may be.
    /// With `reserve`, the room is taken at once (the table's count includes the key the
    /// caller is about to store in `shard`, whose lock it holds). Keys whose hash is in
    /// `pinned` are never forgotten to make it: a stacked request's own keys (see
    /// [`super::held`]), which it will take from once every limit has answered.
    ///
    /// While the table holds fewer than `max_keys` keys there is room, in whatever shard. When
    /// it is full, keys that are fresh again are forgotten to make some: in `shard` first, then
    /// in the `others`, stopping at the first shard that gives room. Each shard's `room_from`
    /// spares a sweep that would find nothing, and the table's `room_hint` spares looking at
    /// the other shards at all while no key of any can be due, so a flood of new keys into a
    /// full table costs one pass over the shards, not one per key.
    pub(super) fn make_room(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        now: i64,
        reserve: bool,
        pinned: &[u64],
    ) -> Option<u128> {
        if self.has_room(reserve) {
            return None;
        }
        if self.sweep(shard, now, pinned) > 0 && self.has_room(reserve) {
            return None;
        }
        if others.is_empty() {
            return Some(retry_in(shard.room_from, now));
        }
        let changes = self.changes.load(Ordering::Acquire);
        if let Some(from) = lock(&self.room_hint).at(changes) {
            if now < from {
                return Some(retry_in(Some(from), now));
            }
        }
        let mut first_room = shard.room_from;
        let (found, every_shard) = others.any(|other| {
            let found = self.sweep(other, now, pinned) > 0 && self.has_room(reserve);
            first_room = earliest(first_room, other.room_from);
            found
        });
        if found {
            return None;
        }
        if let (true, Some(from)) = (every_shard, first_room) {
            // Found at `changes`: any key stored or refunded since makes it stale.
            *lock(&self.room_hint) = RoomHint { changes, from };
        }
        Some(retry_in(first_room, now))
    }

    /// Whether the table holds fewer than `max_keys` keys; with `reserve`, one more is
    /// counted if so, in the same atomic step, so that two new keys can never both take the
    /// last place.
    fn has_room(&self, reserve: bool) -> bool {
        if reserve {
            self.keys
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |keys| {
                    (keys < self.max_keys).then_some(keys + 1)
                })
                .is_ok()
        } else {
            self.keys.load(Ordering::Relaxed) < self.max_keys
        }
    }

    /// Forget the keys of `shard` that are fresh at `now`, except those `pinned` (by hash),
    /// and learn when the first of the others will be; returns how many were forgotten.
    /// Skipped (0) while the shard's `room_from` says that no key is fresh yet.
    ///
    /// A pinned key is left out of `room_from` (it is not room for anyone while pinned): its
    /// request puts it back when it lets go of the key ([`super::held`]).
    fn sweep(&self, shard: &mut Shard<K>, now: i64, pinned: &[u64]) -> usize {
        if shard.room_from.is_some_and(|at| now < at) {
            return 0;
        }
        let before = shard.entries.len();
        let mut gone = Vec::new();
        let mut first_room = None;
        shard.entries.retain(|key, limiter| {
            if !limiter.is_fresh_at(&self.specs, now) {
                first_room = earliest(first_room, Some(limiter.fresh_from(&self.specs)));
                return true;
            }
            // Hashed only when fresh, and only for a stacked request. A key of someone else
            // whose hash is a pinned one's is only kept, which changes no answer.
            if !pinned.is_empty() && pinned.contains(&self.hasher.hash_one(key)) {
                return true;
            }
            if (self.watched)(key) {
                gone.push(key.clone());
            }
            false
        });
        let forgotten = before - shard.entries.len();
        shard.stats.forgotten += forgotten as u64;
        shard.room_from = first_room;
        self.keys.fetch_sub(forgotten, Ordering::Relaxed);
        self.note_forgotten(gone);
        forgotten
    }

    /// Forget `key`, which is fresh again: forgetting it changes no answer.
    pub(super) fn forget<Q>(&self, shard: &mut Shard<K>, hash: u64, key: &Q)
    where
        Q: Equivalent<K> + ?Sized,
    {
        if let Some(key) = shard.entries.remove(hash, |known| key.equivalent(known)) {
            self.keys.fetch_sub(1, Ordering::Relaxed);
            shard.stats.forgotten += 1;
            shard.room_from = None;
            if (self.watched)(&key) {
                self.note_forgotten(vec![key]);
            }
        }
    }

    fn note_forgotten(&self, keys: Vec<K>) {
        if !keys.is_empty() {
            lock(&self.forgotten_watched).extend(keys);
        }
    }
}

/// How long from `now` until `room_from`, at least 1 ns; 1 ns (try again at once) if no shard
/// told when its first key is due (each was busy or empty).
fn retry_in(room_from: Option<i64>, now: i64) -> u128 {
    room_from.map_or(1, |at| {
        (i128::from(at) - i128::from(now)).unsigned_abs().max(1)
    })
}

/// When the first key of a full table may be fresh again, and the table's count of changes
/// when that was found (see [`KeyedLimiter::make_room`]).
#[derive(Clone, Copy)]
pub(super) struct RoomHint {
    changes: u64,
    from: i64,
}

impl RoomHint {
    /// No hint: no count of changes ever matches it.
    pub(super) const NONE: Self = Self {
        changes: u64::MAX,
        from: i64::MIN,
    };

    /// The time, if found at `changes`.
    fn at(self, changes: u64) -> Option<i64> {
        (self.changes == changes).then_some(self.from)
    }
}

/// The earlier of two times, either of which may be unknown.
fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (known, None) | (None, known) => known,
    }
}

/// The shards other than a new key's own, where room is looked for when the table is full.
pub(super) enum Others<'a, 'g, K> {
    /// One call, holding its own shard's lock only. Another shard is swept only if its lock is
    /// free at once: two calls each holding one shard and waiting for the other's would wait
    /// forever.
    Unlocked {
        shards: &'a [Mutex<Shard<K>>],
        own: usize,
    },
    /// A trace, holding every shard's lock already: those before the key's own, and after.
    Held(
        &'a mut [MutexGuard<'g, Shard<K>>],
        &'a mut [MutexGuard<'g, Shard<K>>],
    ),
}

impl<K> Others<'_, '_, K> {
    /// Whether there are no other shards.
    fn is_empty(&self) -> bool {
        match self {
            Self::Unlocked { shards, .. } => shards.len() == 1,
            Self::Held(before, after) => before.is_empty() && after.is_empty(),
        }
    }

    /// Whether `found` says yes for one of the shards, asked in turn until it does; and
    /// whether every shard was asked (none was busy) if none did.
    fn any(&mut self, mut found: impl FnMut(&mut Shard<K>) -> bool) -> (bool, bool) {
        match self {
            Self::Unlocked { shards, own } => {
                let mut every_shard = true;
                let found = shards.iter().enumerate().any(|(index, shard)| {
                    index != *own
                        && match shard.try_lock() {
                            Ok(mut other) => found(&mut other),
                            Err(TryLockError::Poisoned(poisoned)) => {
                                found(&mut poisoned.into_inner())
                            }
                            Err(TryLockError::WouldBlock) => {
                                every_shard = false;
                                false
                            }
                        }
                });
                (found, every_shard)
            }
            Self::Held(before, after) => {
                let found = before
                    .iter_mut()
                    .chain(after.iter_mut())
                    .any(|other| found(other));
                (found, true)
            }
        }
    }
}

#[cfg(test)]
mod tests;
