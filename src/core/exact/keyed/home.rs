//! A key's home in the heap: its shard, locked, and the other shards where a new key may find
//! room. The operations themselves are written once for both tables
//! ([`home`](crate::core::exact::home)); this is what the in-process table adds to them.
//!
//! * **Finding.** The key is looked up by its hash, and its record written back in place.
//! * **Writing back.** Every change is written, a denial's settlement too (a read is not), and
//!   a key that is fresh again is forgotten at once.
//! * **The shard's first room** (`room_from`, see [`super::Shard`]): taking from the key that
//!   is full first moves it later, and tokens handed back may move it earlier; either way the
//!   note is dropped, and the table's room hint made stale.
//! * **Room for a new key**: the table's one count of keys, and a sweep of the key's own shard,
//!   then of the others whose lock is free ([`KeyedLimiter::make_room`]).

use std::hash::Hash;
use std::sync::atomic::Ordering;

use hashbrown::Equivalent;

use super::room::Others;
use super::{KeyedLimiter, Shard};
use crate::core::exact::home::{Change, Home, NewKey};
use crate::core::exact::keyed::KeyedDecision;
use crate::core::exact::limiter::Balances;
use crate::core::exact::rate::BandSpec;

/// A key of the in-process table, for one call: its shard (whose lock the caller holds), the
/// other shards, the key and its hash, and the table's time.
pub(super) struct KeyInShard<'v, 'g, K, Q: ?Sized> {
    pub(super) table: &'v KeyedLimiter<K>,
    pub(super) shard: &'v mut Shard<K>,
    /// Where a new key looks for room when the table is full.
    pub(super) others: Others<'v, 'g, K>,
    pub(super) hash: u64,
    pub(super) key: &'v Q,
    /// The caller's time, moved forward to the table's clock.
    pub(super) now: i64,
    /// How far the caller's time is behind the table's clock.
    pub(super) behind: u128,
}

impl<'v, K, Q> Home<'v> for KeyInShard<'v, '_, K, Q>
where
    K: Hash + Eq + Clone,
    Q: Equivalent<K> + ?Sized,
{
    fn specs(&self) -> &'v [BandSpec] {
        &self.table.specs
    }

    fn fresh(&self) -> &'v Balances {
        &self.table.fresh
    }

    fn now(&self) -> i64 {
        self.now
    }

    fn behind(&self) -> u128 {
        self.behind
    }

    #[inline]
    fn update<R>(&mut self, operation: impl FnOnce(&mut Balances) -> (Change, R)) -> Option<R> {
        let (table, now, hash, key) = (self.table, self.now, self.hash, self.key);
        let specs = &table.specs;
        let shard = &mut *self.shard;
        let room_from = shard.room_from;
        let mut stored = shard.entries.find(hash, |known| key.equivalent(known))?;
        let mut balances = stored.balances();
        let (change, answer) = operation(&mut balances);
        match change {
            Change::Read => {}
            Change::Decided { taken } => {
                // Taking from the key that is full first (as the shard's note says, read from
                // the record before it is written) moves the shard's first room later.
                let was_first =
                    taken && room_from.is_some_and(|at| stored.balances().fresh_from(specs) == at);
                stored.store(&balances);
                if was_first {
                    shard.room_from = None;
                    // The table's room hint may name this key's refill too, now later.
                    table.changes.fetch_add(1, Ordering::Release);
                }
                // Settled at the table's clock, unless a reservation settled it further
                // ahead: full there is not fresh yet (nothing accrues before it), so the cheap
                // test comes first and the exact one only for a key that is full. Taking
                // nothing (n = 0) can leave a refilled key just like a fresh one.
                if balances.is_full(specs) && balances.is_fresh_at(specs, now) {
                    table.forget(shard, hash, key);
                }
            }
            Change::HandedBack => {
                stored.store(&balances);
                if balances.is_fresh_at(specs, now) {
                    table.forget(shard, hash, key);
                }
                // The key may now be full sooner than the shard's and the table's notes say.
                shard.room_from = None;
                table.changes.fetch_add(1, Ordering::Release);
            }
        }
        Some(answer)
    }

    fn room_for_new(&mut self) -> Option<u128> {
        let (table, now) = (self.table, self.now);
        table.make_room(self.shard, &mut self.others, now, false, &[])
    }

    fn count(&mut self, decision: KeyedDecision) {
        self.shard.stats.count(decision);
    }
}

impl<'v, K, Q> NewKey<'v> for KeyInShard<'v, '_, K, Q>
where
    K: Hash + Eq + Clone + for<'q> From<&'q Q>,
    Q: Equivalent<K> + ?Sized,
{
    fn store_new(&mut self, balances: &Balances) -> Result<(), u128> {
        let (table, hash, key, now) = (self.table, self.hash, self.key, self.now);
        table.store_new(self.shard, &mut self.others, hash, key, balances, now)
    }
}
