//! Many clients at once: one lazily settled limiter per key, in bounded memory.
//!
//! A server limits each client (an IP, an API key) separately, so it keeps one limiter per key:
//! the bands' specs once for the table, and per key only their [`Balances`], stored as the
//! fixed-size record the shared table keeps too ([`record`](crate::core::exact::record)): a
//! 32-byte entry with the key, for one band of 64-bit units. Two things make such a table
//! dangerous, and this one avoids both:
//!
//! * **Unbounded growth.** A flood of distinct keys must not grow the table without limit. The
//!   table holds at most `max_keys` entries.
//! * **Unsafe forgetting.** Evicting by age (LRU) forgets a throttled client and hands it a fresh,
//!   full bucket: an attacker rotates through enough keys and is never limited. Here a key is
//!   forgotten only when its state is *indistinguishable from a fresh key's*: every band full,
//!   settled no later than now. Forgetting it then changes no answer, ever.
//!
//! Forgetting is lazy, the same read-time trick as a DNS cache entry that expires only when
//! someone looks: nothing runs in the background. A key is checked when it is touched, and when
//! a new key finds the table full (`max_keys` keys), the table is swept for keys that have
//! refilled to the top: the new key's own shard first, then the others. If none has, the new key
//! is refused (fail closed, counted in [`Stats::refused`]) rather than anyone being evicted. The
//! trade-off is deliberate: under a flood of distinct keys faster than buckets refill, new
//! clients wait, but no throttled client is ever let off.
//!
//! Three details keep "forgetting changes nothing" exact:
//!
//! * Fresh keys start full, so a full key and a forgotten one are the same thing.
//! * The table has **one clock that never goes backwards**: a call made at a time before the
//!   latest one the table has seen is decided at that latest time (its wait still counts from
//!   the caller's time). Otherwise a key forgotten at noon and asked about "at 11:00" would be
//!   recreated anchored at 11:00 and accrue an hour it never waited.
//! * A waiter's reservation ([`KeyedLimiter::reserve`]) settles its key *ahead* of the table's
//!   clock, at the moment its tokens are there, and nothing accrues to the key before then.
//!   Such a key is not fresh, even if its bands are full there, until the clock has reached
//!   that point: it is kept, and later callers for it queue behind the waiter.
//!
//! The table is split into shards, each behind its own lock, so different keys rarely contend.
//! The shards share **one count of keys** rather than each holding a fixed share of `max_keys`:
//! with shares, random keys fill some shard long before the table is full (16 shares of a
//! 100-key table refused a new key at a median of about 50 keys), while with one count a new key
//! is refused only when the whole table holds `max_keys` keys that cannot be forgotten. The count
//! is an atomic that a new key increments only while it is below `max_keys`, so the bound stays
//! exact under any contention. One thing a shard's lock costs here: a new key holding its own
//! shard's lock sweeps another shard only if that shard's lock is free at once (waiting for it
//! could deadlock two such keys), so under contention a refilled key in a busy shard may be left
//! for the next sweep, and a new key refused meanwhile. The table is full either way.

//!
//! The table lives in eight files: this one (the types, the shards and the seed), `entries.rs`
//! (a shard's keys and their records), `home.rs` (a key's shard as the home the one decision
//! runs on, [`home`](crate::core::exact::home), written once for this table and the shared
//! one), `table.rs` (deciding one request or a trace), `room.rs` (new keys, and the room they
//! need), `reservations.rs` (waiters, and tokens handed back), `restore.rs` (a saved table)
//! and `held.rs` (a key held while other limits decide the same request).

mod entries;
pub mod held;
mod home;
mod reservations;
mod restore;
mod room;
mod table;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::Equivalent;
use siphasher::sip::SipHasher13;

pub use crate::core::exact::answers::{Answer, KeyedDecision, KeyedReservation};
use crate::core::exact::limiter::{Balances, Decision};
use crate::core::exact::rate::BandSpec;
use crate::core::exact::record::Shape;
use entries::{Entries, Stored};
use home::KeyInShard;

pub use crate::core::exact::clock_gap::{off_the_clock, MAX_CLOCK_GAP_NS};
pub use restore::RestoreError;
use room::{Others, RoomHint};

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
            KeyedDecision::Refused { .. } => self.refused += 1,
        }
    }

    /// Add `other`'s counts to these (a table's shards, or a limiter's plans, summed).
    pub fn add(&mut self, other: &Self) {
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.refused += other.refused;
        self.forgotten += other.forgotten;
    }
}

struct Shard<K> {
    /// Keys and their balances as records, found by the hash the table computed once per
    /// call; the bands' specs are the table's, kept once. A shard has no share of `max_keys`
    /// of its own: it may grow while the table's count is below it.
    entries: Entries<K>,
    /// When the first remembered key is full again, if known: a sweep learns it, a new key
    /// lowers it to its own time, and whatever else could change it (taking from
    /// that very key, forgetting a key, a refund) forgets it. While it is known, a refusal
    /// needs no sweep of this shard and its hint is exact; a flood of new keys into a full
    /// table costs one sweep of each shard, not one per key.
    room_from: Option<i64>,
    stats: Stats,
}

/// One limiter per key, at most `max_keys` of them, forgotten only when safe.
pub struct KeyedLimiter<K> {
    /// Seeded per table, so nobody can choose keys that all land in one shard.
    hasher: Seed,
    specs: Vec<BandSpec>,
    /// A new key's balances: full, anchored at its first call.
    fresh: Balances,
    shards: Vec<Mutex<Shard<K>>>,
    max_keys: usize,
    /// How many keys the shards hold together: never above `max_keys`. A new key is counted
    /// before it is stored (under its shard's lock), a forgotten one after it is removed.
    keys: AtomicUsize,
    /// When the first key of the whole table may be fresh again, as a sweep of every shard
    /// found it, and the `changes` it was found at: while no change has come since, a new key
    /// that finds the table full before then is refused without looking at the other shards.
    room_hint: Mutex<RoomHint>,
    /// Counts what can bring a key's refill earlier than a sweep found it (a new key stored, a
    /// refund): a hint found at an older count is not used.
    changes: AtomicU64,
    /// The table's clock: the latest time any call has used.
    latest: AtomicI64,
    /// Keys whose forgetting the owner wants to hear about (see [`KeyedLimiter::watching`]).
    watched: fn(&K) -> bool,
    forgotten_watched: Mutex<Vec<K>>,
}

/// A shard, locked, with the key's hash and the table's time for this call.
struct Locked<'a, K> {
    shard: MutexGuard<'a, Shard<K>>,
    /// The shard's index in the table.
    index: usize,
    hash: u64,
    /// The caller's time, moved forward to the table's clock.
    now: i64,
    /// How far the caller's time is behind the table's clock: added to every wait.
    behind: u128,
}

impl<K> Locked<'_, K> {
    /// `key`'s home for one call: this shard, the others (tried, not waited for) where a new
    /// key may find room, the key's hash, and the table's time.
    fn home<'v, Q: ?Sized>(
        &'v mut self,
        table: &'v KeyedLimiter<K>,
        key: &'v Q,
    ) -> KeyInShard<'v, 'v, K, Q> {
        KeyInShard {
            table,
            shard: &mut self.shard,
            others: Others::Unlocked {
                shards: &table.shards,
                own: self.index,
            },
            hash: self.hash,
            key,
            now: self.now,
            behind: self.behind,
        }
    }
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A table of at most `max_keys` keys (at least 1), each limited by `specs`, split into
    /// `shards` shards (at least one, at most `max_keys`) that hold any number of those keys
    /// each. A new key is refused only when the table holds `max_keys` keys, none of which can
    /// be forgotten.
    #[must_use]
    pub fn new(specs: &[BandSpec], max_keys: usize, shards: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = shards.clamp(1, max_keys);
        let shape = Shape::of(specs);
        Self {
            hasher: Seed::random(),
            specs: specs.to_vec(),
            fresh: Balances::new(specs, None, None),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: Entries::new(shape),
                        room_from: None,
                        stats: Stats::default(),
                    })
                })
                .collect(),
            max_keys,
            keys: AtomicUsize::new(0),
            room_hint: Mutex::new(RoomHint::NONE),
            changes: AtomicU64::new(0),
            latest: AtomicI64::new(i64::MIN),
            watched: |_| false,
            forgotten_watched: Mutex::new(Vec::new()),
        }
    }

    /// Keep every forgotten key for which `watched` says yes, for
    /// [`KeyedLimiter::take_forgotten`]: an owner that keeps something of its own per key
    /// (the Python glue keeps the key objects) learns when to let it go.
    #[must_use]
    pub fn watching(mut self, watched: fn(&K) -> bool) -> Self {
        self.watched = watched;
        self
    }

    /// The watched keys forgotten since the last call.
    pub fn take_forgotten(&self) -> Vec<K> {
        std::mem::take(&mut *lock(&self.forgotten_watched))
    }

    /// The bands every key is limited by.
    #[must_use]
    pub fn specs(&self) -> &[BandSpec] {
        &self.specs
    }

    /// The most keys this table remembers.
    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The number of shards.
    #[must_use]
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The key's hash, and its shard. The shard is picked by middle bits of the hash: the
    /// table inside a shard uses the low bits for its buckets and the top seven as tags, so
    /// neither may be the same for every key of a shard.
    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, &Mutex<Shard<K>>) {
        let (hash, index) = self.shard_index(key);
        (hash, &self.shards[index])
    }

    fn shard_index<Q: Hash + ?Sized>(&self, key: &Q) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        #[allow(clippy::cast_possible_truncation)] // bits 24..56 of the hash, then the high half
        let index = ((u64::from((hash >> 24) as u32) * self.shards.len() as u64) >> 32) as usize;
        (hash, index)
    }

    fn find<'s, Q>(shard: &'s mut Shard<K>, hash: u64, key: &Q) -> Option<Stored<'s>>
    where
        Q: Equivalent<K> + ?Sized,
    {
        shard.entries.find(hash, |known| key.equivalent(known))
    }

    /// Lock the shard of `key` and read the table's clock at `now_ns`. The clock moves under
    /// the shard's lock, so calls on one shard see it in the order they hold the lock.
    fn locked<Q: Hash + ?Sized>(&self, key: &Q, now_ns: i64) -> Locked<'_, K> {
        let (hash, index) = self.shard_index(key);
        let shard = lock(&self.shards[index]);
        let now = self.latest.fetch_max(now_ns, Ordering::Relaxed).max(now_ns);
        let behind = (i128::from(now) - i128::from(now_ns)).unsigned_abs();
        Locked {
            shard,
            index,
            hash,
            now,
            behind,
        }
    }

    /// Whether `key` is remembered.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let (hash, shard) = self.shard_of(key);
        Self::find(&mut lock(shard), hash, key).is_some()
    }

    /// How many keys are remembered (a key being stored at this instant may be counted).
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
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
            total.add(&lock(shard).stats);
        }
        total
    }

    /// The remembered keys (a snapshot, shard by shard).
    #[must_use]
    pub fn keys(&self) -> Vec<K> {
        self.entries().into_iter().map(|(key, _)| key).collect()
    }

    /// How far `now_ns` is from the table's clock (positive when ahead), if farther than
    /// [`MAX_CLOCK_GAP_NS`] either way: a time read on another clock, which a caller should
    /// refuse rather than decide at. `None` for any time while the table has no clock yet.
    #[must_use]
    pub fn off_the_clock(&self, now_ns: i64) -> Option<i128> {
        off_the_clock(self.latest()?, now_ns)
    }

    /// The table's clock: the latest time any call has used (`None` before the first).
    #[must_use]
    pub fn latest(&self) -> Option<i64> {
        Some(self.latest.load(Ordering::Relaxed)).filter(|&at| at != i64::MIN)
    }

    /// The table's hash seed: saved with the table, so that its keys come back in the same
    /// shards.
    #[must_use]
    pub fn seed(&self) -> (u64, u64) {
        self.hasher.keys()
    }
}

/// Two random words for a table's key seed: std's `RandomState` draws its keys from the OS,
/// and hashing two constants with it gives two random words. Clients choose keys; without the
/// seed they cannot choose ones that collide.
#[must_use]
pub fn random_seed() -> (u64, u64) {
    let random = RandomState::new();
    (random.hash_one(0_u8), random.hash_one(1_u8))
}

/// A SipHash-1-3 seed, random per table unless restored. Atomic only so that a restore can set
/// it through a shared reference; it never changes while the table is in use.
struct Seed {
    k0: AtomicU64,
    k1: AtomicU64,
}

impl Seed {
    fn random() -> Self {
        let (k0, k1) = random_seed();
        Self {
            k0: AtomicU64::new(k0),
            k1: AtomicU64::new(k1),
        }
    }

    fn keys(&self) -> (u64, u64) {
        (
            self.k0.load(Ordering::Relaxed),
            self.k1.load(Ordering::Relaxed),
        )
    }

    fn set(&self, (k0, k1): (u64, u64)) {
        self.k0.store(k0, Ordering::Relaxed);
        self.k1.store(k1, Ordering::Relaxed);
    }
}

impl BuildHasher for Seed {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        let (k0, k1) = self.keys();
        SipHasher13::new_with_keys(k0, k1)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A shard's every change is a single insert, removal or counter step: a poisoned lock
    // still guards a consistent map.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
