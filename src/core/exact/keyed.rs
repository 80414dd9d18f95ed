//! Many clients at once: one lazily settled limiter per key, in bounded memory.
//!
//! A server limits each client (an IP, an API key) separately, so it keeps one limiter per key:
//! the bands' specs once for the table, and per key only their [`Balances`] (a 64-byte entry
//! with the key, for one band). Two things make such a table dangerous, and this one avoids
//! both:
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

use std::borrow::Borrow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use hashbrown::{Equivalent, HashTable};
use siphasher::sip::SipHasher13;

use crate::core::exact::limiter::{Balances, Decision, Reservation};
use crate::core::exact::rate::BandSpec;

pub use crate::core::exact::clock_gap::{off_the_clock, MAX_CLOCK_GAP_NS};

/// What a keyed limiter answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedDecision {
    /// The key's own limiter decided.
    Decided(Decision),
    /// The key is new and the table is full of keys that cannot be forgotten: refused, without
    /// evicting anyone. The first of those keys can be forgotten `retry_in` nanoseconds from
    /// the caller's time (a hint: someone else may take the room first, and a shard that was
    /// busy when the table was swept is not counted).
    Refused { retry_in: u128 },
}

/// What [`KeyedLimiter::reserve`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyedReservation {
    /// The key's own limiter decided, its waits counted from the caller's time.
    Decided(Reservation),
    /// The key is new and the table is full: nothing is taken, as for
    /// [`KeyedDecision::Refused`].
    Refused { retry_in: u128 },
}

/// A decision, and the whole tokens the key holds after it (every band's least).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Answer {
    pub decision: KeyedDecision,
    pub remaining: u128,
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
            KeyedDecision::Refused { .. } => self.refused += 1,
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
    /// Keys and their balances, found by the hash the table computed once per call; the
    /// bands' specs are the table's, kept once. A shard has no share of `max_keys` of its own:
    /// it may grow while the table's count is below it.
    entries: HashTable<(K, Balances)>,
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

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// A table of at most `max_keys` keys (at least 1), each limited by `specs`, split into
    /// `shards` shards (at least one, at most `max_keys`) that hold any number of those keys
    /// each. A new key is refused only when the table holds `max_keys` keys, none of which can
    /// be forgotten.
    #[must_use]
    pub fn new(specs: &[BandSpec], max_keys: usize, shards: usize) -> Self {
        let max_keys = max_keys.max(1);
        let shards = shards.clamp(1, max_keys);
        Self {
            hasher: Seed::random(),
            specs: specs.to_vec(),
            fresh: Balances::new(specs, None, None),
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashTable::new(),
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

    fn find<'s, Q>(shard: &'s mut Shard<K>, hash: u64, key: &Q) -> Option<&'s mut Balances>
    where
        Q: Equivalent<K> + ?Sized,
    {
        shard
            .entries
            .find_mut(hash, |(known, _)| key.equivalent(known))
            .map(|(_, limiter)| limiter)
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
        let Locked {
            mut shard,
            index,
            hash,
            now,
            behind,
        } = self.locked(key, now_ns);
        let mut others = Others::Unlocked {
            shards: &self.shards,
            own: index,
        };
        self.acquire_in(
            &mut shard,
            &mut others,
            hash,
            key,
            n,
            now,
            behind,
            with_remaining,
        )
    }

    #[allow(clippy::too_many_arguments)] // one decision's every input, in one place
    fn acquire_in<Q>(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        hash: u64,
        key: &Q,
        n: u64,
        now: i64,
        behind: u128,
        with_remaining: bool,
    ) -> (KeyedDecision, u128)
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let room_from = shard.room_from;
        let (decision, remaining) = if let Some(limiter) = Self::find(shard, hash, key) {
            // Taking from the key that is full first moves the shard's first room later.
            let specs = &self.specs;
            let was_first = room_from.is_some_and(|at| limiter.fresh_from(specs) == at);
            let decision = limiter.acquire(specs, n, now);
            let remaining = remaining_if(with_remaining, specs, limiter);
            // Settled at the table's clock, unless a reservation settled it further ahead:
            // full there is not fresh yet (nothing accrues before it), so the cheap test
            // comes first and the exact one only for a key that is full.
            let full = limiter.is_full(specs) && limiter.is_fresh_at(specs, now);
            if was_first && decision == Decision::Allowed {
                shard.room_from = None;
                // The table's room hint may name this key's refill too, now later than it says.
                self.changes.fetch_add(1, Ordering::Release);
            }
            if full {
                // Taking nothing (n = 0) can leave a refilled key just like a fresh one.
                self.forget(shard, hash, key);
            }
            (KeyedDecision::Decided(decision), remaining)
        } else {
            self.acquire_new(shard, others, hash, key, n, now, with_remaining)
        };
        let decision = Self::waits_from_caller(decision, behind);
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
                let (decision, _) =
                    self.acquire_in(shard, &mut others, hash, key, n, latest, behind, false);
                answer(decision);
            }
            self.latest.fetch_max(latest, Ordering::Relaxed);
        }
    }

    /// A key not in the table is a fresh, full limiter: answer as one, and store it only if
    /// the answer changed it. Also returns what the key holds after the decision (0 if
    /// refused), if asked.
    #[allow(clippy::too_many_arguments)] // one decision's every input, in one place
    fn acquire_new<Q>(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        hash: u64,
        key: &Q,
        n: u64,
        now: i64,
        with_remaining: bool,
    ) -> (KeyedDecision, u128)
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let specs = &self.specs;
        let mut limiter = self.fresh.clone();
        let decision = limiter.acquire(specs, n, now);
        let remaining = remaining_if(with_remaining, specs, &limiter);
        if decision != Decision::Allowed || limiter.is_full(specs) {
            // Refused by a fresh limiter (n beyond a burst), or allowed taking nothing: the
            // key's state is still a fresh one, so there is nothing to remember.
            return (KeyedDecision::Decided(decision), remaining);
        }
        if let Some(retry_in) = self.make_room(shard, others, now, true) {
            return (KeyedDecision::Refused { retry_in }, 0);
        }
        // A new key may be full again before any the last sweep saw.
        let fresh_from = limiter.fresh_from(specs);
        shard.room_from = shard.room_from.map(|at| at.min(fresh_from));
        shard
            .entries
            .insert_unique(hash, (K::from(key), limiter), |(key, _)| {
                self.hasher.hash_one(key)
            });
        self.changes.fetch_add(1, Ordering::Release);
        (KeyedDecision::Decided(decision), remaining)
    }

    /// Room for one more key at `now`: `None` if there is, else how long until there may be.
    /// With `reserve`, the room is taken at once (the table's count includes the key the
    /// caller is about to store in `shard`, whose lock it holds).
    ///
    /// While the table holds fewer than `max_keys` keys there is room, in whatever shard. When
    /// it is full, keys that are fresh again are forgotten to make some: in `shard` first, then
    /// in the `others`, stopping at the first shard that gives room. Each shard's `room_from`
    /// spares a sweep that would find nothing, and the table's `room_hint` spares looking at
    /// the other shards at all while no key of any can be due, so a flood of new keys into a
    /// full table costs one pass over the shards, not one per key.
    fn make_room(
        &self,
        shard: &mut Shard<K>,
        others: &mut Others<'_, '_, K>,
        now: i64,
        reserve: bool,
    ) -> Option<u128> {
        if self.has_room(reserve) {
            return None;
        }
        if self.sweep(shard, now) > 0 && self.has_room(reserve) {
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
            let found = self.sweep(other, now) > 0 && self.has_room(reserve);
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

    /// Forget the keys of `shard` that are fresh at `now`, and learn when the first of the
    /// others will be; returns how many were forgotten. Skipped (0) while the shard's
    /// `room_from` says that no key is fresh yet.
    fn sweep(&self, shard: &mut Shard<K>, now: i64) -> usize {
        if shard.room_from.is_some_and(|at| now < at) {
            return 0;
        }
        let before = shard.entries.len();
        let mut gone = Vec::new();
        let mut first_room = None;
        shard.entries.retain(|(key, limiter)| {
            let keep = !limiter.is_fresh_at(&self.specs, now);
            if keep {
                first_room = earliest(first_room, Some(limiter.fresh_from(&self.specs)));
            } else if (self.watched)(key) {
                gone.push(key.clone());
            }
            keep
        });
        let forgotten = before - shard.entries.len();
        shard.stats.forgotten += forgotten as u64;
        shard.room_from = first_room;
        self.keys.fetch_sub(forgotten, Ordering::Relaxed);
        self.note_forgotten(gone);
        forgotten
    }

    fn forget<Q>(&self, shard: &mut Shard<K>, hash: u64, key: &Q)
    where
        Q: Equivalent<K> + ?Sized,
    {
        if let Ok(entry) = shard
            .entries
            .find_entry(hash, |(known, _)| key.equivalent(known))
        {
            let ((key, _), _) = entry.remove();
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

    /// A wait decided at the table's time, counted from the caller's (earlier) time.
    fn waits_from_caller(decision: KeyedDecision, behind: u128) -> KeyedDecision {
        match decision {
            KeyedDecision::Decided(Decision::Wait(ns)) => {
                KeyedDecision::Decided(Decision::Wait(ns.saturating_add(behind)))
            }
            KeyedDecision::Refused { retry_in } => KeyedDecision::Refused {
                retry_in: retry_in.saturating_add(behind),
            },
            decided @ KeyedDecision::Decided(_) => decided,
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
        let (decision, remaining) = if let Some(limiter) = Self::find(&mut shard, hash, key) {
            let mut limiter = limiter.clone();
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
                .then(|| self.make_room(&mut shard, &mut others, now, false))
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
            decision: Self::waits_from_caller(decision, behind),
            remaining,
        }
    }

    /// Whole tokens `key` holds at `now_ns` (a key not remembered is full).
    pub fn available<Q>(&self, key: &Q, now_ns: i64) -> u128
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let Locked {
            mut shard,
            hash,
            now,
            ..
        } = self.locked(key, now_ns);
        Self::find(&mut shard, hash, key)
            .map_or_else(|| self.fresh.clone(), |limiter| limiter.clone())
            .available_at(&self.specs, now)
    }

    /// Give `n` tokens back to `key` (capped at each burst); a key that is then full is
    /// forgotten at once, and an unknown key is already full.
    pub fn refund<Q>(&self, key: &Q, n: u64, now_ns: i64)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.hand_back(key, now_ns, |limiter, specs, now| {
            limiter.refund(specs, n, now);
        });
    }

    /// Tokens handed back to `key` by `hand` (a refund, or a reservation given back): a key
    /// then fresh is forgotten at once, an unknown key is already full, and the shard's and
    /// the table's notes of when room appears are dropped, since the key may now be full
    /// sooner than they say.
    fn hand_back<Q>(&self, key: &Q, now_ns: i64, hand: impl FnOnce(&mut Balances, &[BandSpec], i64))
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let Locked {
            mut shard,
            hash,
            now,
            ..
        } = self.locked(key, now_ns);
        let Some(limiter) = Self::find(&mut shard, hash, key) else {
            return;
        };
        hand(limiter, &self.specs, now);
        if limiter.is_fresh_at(&self.specs, now) {
            self.forget(&mut shard, hash, key);
        }
        shard.room_from = None;
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// Take `n` tokens for `key` at the first moment its every band holds them, if that is at
    /// most `max_wait_ns` from the caller's time `now_ns`: see [`Balances::reserve`]. Decided
    /// at the table's clock, as [`KeyedLimiter::acquire`] is, with the wait counted from
    /// `now_ns`. Later callers for the same key queue behind the reservation; a waiter that
    /// stops waiting hands the tokens back with [`KeyedLimiter::give_back`].
    ///
    /// A key not remembered is full, so its reservation is an [`KeyedLimiter::acquire`]: taken
    /// at once, or refused when the table is full (the caller then retries after `retry_in`).
    /// Counted as `acquire` counts: taken is allowed, too late or never is denied.
    ///
    /// A reservation settles the key ahead of the table's clock. Such a key is not fresh
    /// ([`Balances::is_fresh_at`] needs its settlement point to have come), so it is never
    /// forgotten while a waiter counts on it, and its first room ([`Balances::fresh_from`])
    /// counts from that point.
    pub fn reserve<Q>(&self, key: &Q, n: u64, now_ns: i64, max_wait_ns: u128) -> KeyedReservation
    where
        Q: Hash + Equivalent<K> + ?Sized,
        K: for<'q> From<&'q Q>,
    {
        let Locked {
            mut shard,
            index,
            hash,
            now,
            behind,
        } = self.locked(key, now_ns);
        let shard = &mut *shard;
        let room_from = shard.room_from;
        let specs = &self.specs;
        let (reservation, counted) = if let Some(limiter) = Self::find(shard, hash, key) {
            let was_first = room_from.is_some_and(|at| limiter.fresh_from(specs) == at);
            // The caller waits `behind` more than the table's clock says: a wait beyond what
            // is left of `max_wait_ns` is too late, and none is left once `behind` exceeds it.
            let reservation = limiter.reserve(specs, n, now, max_wait_ns.saturating_sub(behind));
            let full = limiter.is_full(specs) && limiter.is_fresh_at(specs, now);
            let taken = matches!(reservation, Reservation::Taken { .. });
            if was_first && taken {
                // As for a take by `acquire`: the shard's first room is now later.
                shard.room_from = None;
                self.changes.fetch_add(1, Ordering::Release);
            }
            if full {
                self.forget(shard, hash, key);
            }
            let counted = if taken {
                Decision::Allowed
            } else {
                Decision::Never
            };
            let reservation = match reservation {
                Reservation::Taken { after_ns: 0 } => Reservation::Taken { after_ns: 0 },
                Reservation::Taken { after_ns } => Reservation::Taken {
                    after_ns: after_ns.saturating_add(behind),
                },
                Reservation::TooLate(wait) => Reservation::TooLate(wait.saturating_add(behind)),
                Reservation::Never => Reservation::Never,
            };
            (
                KeyedReservation::Decided(reservation),
                KeyedDecision::Decided(counted),
            )
        } else {
            let mut others = Others::Unlocked {
                shards: &self.shards,
                own: index,
            };
            let (decision, _) = self.acquire_new(shard, &mut others, hash, key, n, now, false);
            let reservation = match Self::waits_from_caller(decision, behind) {
                KeyedDecision::Decided(Decision::Allowed) => {
                    KeyedReservation::Decided(Reservation::Taken { after_ns: 0 })
                }
                // A fresh limiter is full: it allows `n`, or `n` exceeds a burst.
                KeyedDecision::Decided(Decision::Never | Decision::Wait(_)) => {
                    KeyedReservation::Decided(Reservation::Never)
                }
                KeyedDecision::Refused { retry_in } => KeyedReservation::Refused { retry_in },
            };
            (reservation, decision)
        };
        shard.stats.count(counted);
        reservation
    }

    /// A waiter that stops waiting hands back the `n` tokens it reserved for `key` with
    /// [`KeyedLimiter::reserve`], booked for `reserved_at` on the table's clock (the caller's
    /// time plus the wait it was told). As [`Balances::give_back`] does: undone as time if it
    /// was the key's last reservation, so nobody gets them before their turn would have come;
    /// forfeited if other waiters queue behind it. A key not remembered is full: nothing to
    /// give back.
    pub fn give_back<Q>(&self, key: &Q, n: u64, now_ns: i64, reserved_at: i64)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.hand_back(key, now_ns, |limiter, specs, now| {
            limiter.give_back(specs, n, now, reserved_at);
        });
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
            let problem = if shard
                .entries
                .find(hash, |(known, _)| *known == key)
                .is_some()
            {
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
                .insert_unique(hash, (key, limiter), |(key, _)| self.hasher.hash_one(key));
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
        self.shards
            .iter()
            .flat_map(|shard| lock(shard).entries.iter().cloned().collect::<Vec<_>>())
            .collect()
    }
}

/// The whole tokens `limiter` holds if `wanted`, else 0: it costs a division, and only
/// `check` asks for it.
fn remaining_if(wanted: bool, specs: &[BandSpec], limiter: &Balances) -> u128 {
    if wanted {
        limiter.available(specs)
    } else {
        0
    }
}

/// Why a saved state could not be restored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreError {
    /// A key appears twice.
    Duplicate,
    /// More keys than `max_keys`.
    Overfull,
}

/// A SipHash-1-3 seed, random per table unless restored. Atomic only so that a restore can set
/// it through a shared reference; it never changes while the table is in use.
struct Seed {
    k0: AtomicU64,
    k1: AtomicU64,
}

impl Seed {
    fn random() -> Self {
        // std's RandomState draws its keys from the OS; hashing two constants with it gives
        // two random words.
        let random = RandomState::new();
        Self {
            k0: AtomicU64::new(random.hash_one(0_u8)),
            k1: AtomicU64::new(random.hash_one(1_u8)),
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
struct RoomHint {
    changes: u64,
    from: i64,
}

impl RoomHint {
    /// No hint: no count of changes ever matches it.
    const NONE: Self = Self {
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
enum Others<'a, 'g, K> {
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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A shard's every change is a single insert, removal or counter step: a poisoned lock
    // still guards a consistent map.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A time more than [`MAX_CLOCK_GAP_NS`] from the table's clock is off it.
#[cfg(test)]
mod clock_gap {
    use super::*;
    use crate::core::exact::rate::Rate;

    #[test]
    fn ten_years_either_way_is_the_bound_and_a_new_table_takes_any_time() {
        assert_eq!(MAX_CLOCK_GAP_NS, 315_576_000_000_000_000);
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 1).unwrap();
        let table: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 2);
        assert_eq!(table.off_the_clock(i64::MAX), None, "no clock yet");
        let day = 86_400_000_000_000;
        table.acquire("a", 1, day);
        assert_eq!(table.off_the_clock(day + MAX_CLOCK_GAP_NS), None);
        assert_eq!(table.off_the_clock(day - MAX_CLOCK_GAP_NS), None);
        assert_eq!(
            table.off_the_clock(day + MAX_CLOCK_GAP_NS + 1),
            Some(i128::from(MAX_CLOCK_GAP_NS) + 1)
        );
        assert_eq!(
            table.off_the_clock(i64::MIN),
            Some(i128::from(i64::MIN) - i128::from(day))
        );
    }
}

/// The table's room is `max_keys`, whichever shards the keys land in.
#[cfg(test)]
mod room {
    use super::*;
    use crate::core::exact::rate::Rate;

    /// 1 token per second, burst 1: every key that takes its token is throttled for a second.
    fn throttling_table(max_keys: usize, shards: usize) -> KeyedLimiter<String> {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 1).unwrap();
        KeyedLimiter::new(&[spec], max_keys, shards)
    }

    /// A xorshift stream of random keys, one stream per seed.
    fn keys(seed: u64) -> impl Iterator<Item = String> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        std::iter::from_fn(move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            Some(format!("client-{state:016x}"))
        })
    }

    #[test]
    fn throttled_random_keys_fill_the_whole_table_before_one_is_refused() {
        for max_keys in [10, 100, 1000] {
            for seed in 0..50 {
                // Each table draws its own hash seed, so the keys spread over the shards anew.
                let table = throttling_table(max_keys, max_keys.min(16));
                let first_refusal = keys(seed)
                    .take(max_keys + 1)
                    .position(|key| {
                        matches!(
                            table.acquire(key.as_str(), 1, 0),
                            KeyedDecision::Refused { .. }
                        )
                    })
                    .expect("a full table refuses a new key");
                assert_eq!(first_refusal, max_keys, "max_keys {max_keys}, seed {seed}");
                assert_eq!(table.len(), max_keys);
                assert_eq!(table.keys().len(), max_keys);
            }
        }
    }

    #[test]
    fn a_full_table_forgets_a_refilled_key_in_another_shard() {
        let second = 1_000_000_000;
        for seed in 0..50 {
            let table = throttling_table(16, 16);
            let mut keys = keys(seed);
            let early = keys.next().unwrap();
            assert_eq!(
                table.acquire(early.as_str(), 1, 0),
                KeyedDecision::Decided(Decision::Allowed)
            );
            let later: Vec<String> = keys.by_ref().take(15).collect();
            for key in &later {
                table.acquire(key.as_str(), 1, second / 2);
            }
            let newcomer = keys.next().unwrap();
            assert_eq!(
                table.acquire(newcomer.as_str(), 1, second * 9 / 10),
                KeyedDecision::Refused {
                    retry_in: 100_000_000
                },
                "seed {seed}: the table's first key is full at 1 s"
            );
            assert_eq!(
                table.acquire(newcomer.as_str(), 1, second),
                KeyedDecision::Decided(Decision::Allowed),
                "seed {seed}"
            );
            assert!(!table.contains(early.as_str()));
            assert!(later.iter().all(|key| table.contains(key.as_str())));
            assert_eq!(table.len(), 16);
            assert_eq!(table.stats().forgotten, 1);
        }
    }

    #[test]
    fn a_refund_in_a_full_table_makes_room_as_soon_as_its_key_is_full() {
        // Every key is empty at 0 and full at 2 s; a refusal at 0.5 s learns that. A refund of
        // one token at 0.5 s brings one key's refill to 1.5 s, wherever it sits, and a new key
        // at 1.6 s must find it.
        let second = 1_000_000_000;
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        for seed in 0..20 {
            let table: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 16, 16);
            let clients: Vec<String> = keys(seed).take(16).collect();
            for client in &clients {
                table.acquire(client.as_str(), 2, 0);
            }
            let mut newcomers = keys(seed + 1_000);
            assert_eq!(
                table.acquire(newcomers.next().unwrap().as_str(), 1, second / 2),
                KeyedDecision::Refused {
                    retry_in: 1_500_000_000
                }
            );
            table.refund(
                clients[usize::try_from(seed).unwrap() % 16].as_str(),
                1,
                second / 2,
            );
            assert_eq!(
                table.acquire(newcomers.next().unwrap().as_str(), 1, second * 16 / 10),
                KeyedDecision::Decided(Decision::Allowed),
                "seed {seed}"
            );
            assert_eq!(table.len(), 16);
        }
    }

    /// Random keys that land in `shard` of `table`, among the first thousand (a table of a
    /// few shards has many in each).
    fn keys_in(table: &KeyedLimiter<String>, shard: usize) -> impl Iterator<Item = String> + '_ {
        keys(7)
            .take(1_000)
            .filter(move |key| table.shard_index(key.as_str()).1 == shard)
    }

    /// A table of two keys in two shards, full: `early` in shard 0 is full again at 1 s,
    /// `late` in shard 1 at 2 s. A newcomer in shard 1, refused at 0, has swept both shards
    /// and learnt that the table's first room is at 1 s.
    fn a_full_table_of_two_shards() -> (KeyedLimiter<String>, String, String, String) {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let table: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 2, 2);
        let early = keys_in(&table, 0).next().unwrap();
        let [late, newcomer]: [String; 2] = keys_in(&table, 1)
            .take(2)
            .collect::<Vec<_>>()
            .try_into()
            .unwrap();
        assert_eq!(
            table.acquire(early.as_str(), 1, 0),
            KeyedDecision::Decided(Decision::Allowed)
        );
        assert_eq!(
            table.acquire(late.as_str(), 2, 0),
            KeyedDecision::Decided(Decision::Allowed)
        );
        assert_eq!(
            table.acquire(newcomer.as_str(), 1, 0),
            KeyedDecision::Refused {
                retry_in: 1_000_000_000
            }
        );
        (table, early, late, newcomer)
    }

    #[test]
    fn a_refusal_still_says_when_a_busy_shard_s_first_key_is_due() {
        // Shard 0, which holds the table's first room, is busy (its lock held, as by another
        // call): the room hint learnt at 0 answers for it, nothing having changed since.
        let (table, early, late, newcomer) = a_full_table_of_two_shards();
        let busy = lock(&table.shards[0]);
        assert_eq!(
            table.acquire(newcomer.as_str(), 1, 500_000_000),
            KeyedDecision::Refused {
                retry_in: 500_000_000
            },
            "not 1.5 s, when the key in shard 1 is due"
        );
        drop(busy);
        assert_eq!(
            table.acquire(newcomer.as_str(), 1, 1_000_000_000),
            KeyedDecision::Decided(Decision::Allowed)
        );
        assert!(!table.contains(early.as_str()));
        assert!(table.contains(late.as_str()));
    }

    #[test]
    fn a_take_from_the_first_key_due_moves_the_refusal_hint_later() {
        // The hint learnt at 0 says 1 s, when the key in shard 0 is full again. It takes one
        // more token at 0: full only at 2 s, as the key in shard 1 is.
        let (table, early, _late, newcomer) = a_full_table_of_two_shards();
        assert_eq!(
            table.acquire(early.as_str(), 1, 0),
            KeyedDecision::Decided(Decision::Allowed)
        );
        assert_eq!(
            table.acquire(newcomer.as_str(), 1, 500_000_000),
            KeyedDecision::Refused {
                retry_in: 1_500_000_000
            },
            "not 0.5 s: no key is full again before 2 s"
        );
    }

    #[test]
    fn a_room_hint_that_has_passed_sends_a_new_key_to_the_other_shards() {
        // At 1.5 s the hint (1 s) is past: the key in shard 0 is full again and is forgotten,
        // though the newcomer's own shard has nothing to give until 2 s.
        let (table, early, late, newcomer) = a_full_table_of_two_shards();
        assert_eq!(
            table.acquire(newcomer.as_str(), 1, 1_500_000_000),
            KeyedDecision::Decided(Decision::Allowed)
        );
        assert!(!table.contains(early.as_str()));
        assert!(table.contains(late.as_str()));
        assert_eq!(table.len(), 2);
        assert_eq!(table.stats().forgotten, 1);
    }

    #[test]
    fn a_trace_finds_room_in_the_other_shards_as_the_calls_one_by_one_do() {
        // More keys than room, in a few shards: new keys often find their own shard full of
        // throttled keys and room in another. Both tables share one seed, so one hash.
        let spec = BandSpec::new(Rate::new(2, 1).unwrap(), 3).unwrap();
        for shards in [2, 3, 4] {
            let one_by_one: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, shards);
            let traced: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 6, shards);
            traced
                .restore(one_by_one.seed(), Vec::new(), None, Stats::default())
                .unwrap();
            let requests: Vec<(String, u64, i64)> = (0..5_000_i64)
                .map(|i| {
                    (
                        format!("k{}", i * 7 % 13),
                        1 + (i % 3).unsigned_abs(),
                        i * 50_000_000,
                    )
                })
                .collect();
            let expected: Vec<_> = requests
                .iter()
                .map(|(key, n, now)| one_by_one.acquire(key.as_str(), *n, *now))
                .collect();
            let mut answers = Vec::new();
            traced.acquire_many::<str, _>(
                requests
                    .iter()
                    .map(|(key, n, now)| (key.as_str(), *n, *now)),
                |decision| answers.push(decision),
            );
            assert_eq!(answers, expected, "{shards} shards");
            assert_eq!(traced.stats(), one_by_one.stats(), "{shards} shards");
            assert!(one_by_one.stats().forgotten > 0 && one_by_one.stats().refused > 0);
        }
    }

    #[test]
    fn a_trace_admits_exactly_max_keys_and_restores_into_the_same_bound() {
        let table = throttling_table(100, 16);
        let mut answers = Vec::new();
        table.acquire_many::<str, _>(keys(7).take(150).map(|key| (key, 1, 0)), |decision| {
            answers.push(decision);
        });
        assert!(answers[..100]
            .iter()
            .all(|decision| *decision == KeyedDecision::Decided(Decision::Allowed)));
        assert!(answers[100..]
            .iter()
            .all(|decision| matches!(decision, KeyedDecision::Refused { .. })));
        assert_eq!(table.len(), 100);

        let copy = throttling_table(100, 16);
        copy.restore(table.seed(), table.entries(), table.latest(), table.stats())
            .unwrap();
        assert_eq!(copy.len(), 100);
        assert!(matches!(
            copy.acquire("someone new", 1, 0),
            KeyedDecision::Refused { .. }
        ));
        let smaller = throttling_table(99, 16);
        assert_eq!(
            smaller.restore(table.seed(), table.entries(), table.latest(), table.stats()),
            Err(RestoreError::Overfull)
        );
        assert!(smaller.is_empty());
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
        assert_eq!(
            limiter.peek("k0", 2, SECOND).decision,
            KeyedDecision::Refused {
                retry_in: 1_000_000_000
            },
            "no room for k0 until k4..k7 are full"
        );
        assert_eq!(limiter.available("k0", SECOND), 2);
        // Taking from it needs room, and k4..k7 are not full until a second later.
        assert_eq!(
            limiter.acquire("k0", 2, SECOND),
            KeyedDecision::Refused {
                retry_in: 1_000_000_000
            }
        );
        assert_eq!(limiter.acquire("k0", 2, 2 * SECOND), ALLOWED);
        assert_eq!(
            limiter.peek("k0", 1, 2 * SECOND).decision,
            KeyedDecision::Decided(Decision::Wait(1_000_000_000))
        );
    }

    #[test]
    fn forgetting_changes_no_answer() {
        // The same random workload through a tiny table and through one that never forgets.
        let spec = BandSpec::new(Rate::new(3, 2).unwrap(), 3).unwrap();
        let small: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 2, 1);
        let large: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 1_000_000, 2);
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
            if !matches!(small_said, KeyedDecision::Refused { .. }) {
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
        assert_eq!(limiter.peek("nobody", 2, 0).decision, ALLOWED);
        assert_eq!(
            limiter.acquire("nobody", 3, 0),
            KeyedDecision::Decided(Decision::Never)
        );
        assert!(limiter.is_empty());
        assert_eq!(limiter.acquire("someone", 1, 0), ALLOWED);
        limiter.refund("someone", 1, 0);
        assert!(limiter.is_empty(), "full again, so forgotten at once");
    }

    #[test]
    fn forgetting_stays_exact_when_a_caller_s_clock_goes_back() {
        // Forgotten at 10 s, asked about "at 1 s": the table's clock says 10 s, as it would
        // for a key that had been kept (full since 1 s); the wait still counts from 1 s.
        let limiter = table(1);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(
            limiter.acquire("b", 1, 10 * SECOND),
            ALLOWED,
            "a is full: forgotten"
        );
        assert!(!limiter.contains("a"));
        assert_eq!(limiter.acquire("b", 1, SECOND), ALLOWED);
        assert_eq!(
            limiter.acquire("b", 1, SECOND),
            KeyedDecision::Decided(Decision::Wait(10 * 1_000_000_000))
        );
    }

    #[test]
    fn a_trace_decides_exactly_as_the_calls_one_by_one() {
        let spec = BandSpec::new(Rate::new(2, 1).unwrap(), 3).unwrap();
        // One shard each: two tables' random seeds would spread keys over shards differently.
        let one_by_one: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 1);
        let traced: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 1);
        let requests: Vec<(String, u64, i64)> = (0..10_000_i64)
            .map(|i| {
                (
                    format!("k{}", i * 7 % 11),
                    (i % 3).unsigned_abs(),
                    i * 97_000_000 % (5 * SECOND) + i * 1_000,
                )
            })
            .collect();
        let expected: Vec<_> = requests
            .iter()
            .map(|(key, n, now)| one_by_one.acquire(key.as_str(), *n, *now))
            .collect();
        let mut answers = Vec::new();
        traced.acquire_many::<str, _>(
            requests
                .iter()
                .map(|(key, n, now)| (key.as_str(), *n, *now)),
            |decision| answers.push(decision),
        );
        assert_eq!(answers, expected);
        assert_eq!(traced.stats().allowed, one_by_one.stats().allowed);
        assert_eq!(traced.stats().refused, one_by_one.stats().refused);
    }

    #[test]
    fn a_throttled_key_is_still_throttled_after_a_denial() {
        let limiter = table(8);
        assert_eq!(limiter.acquire("a", 2, 0), ALLOWED);
        for now in [0, SECOND / 2] {
            let left = u128::from((SECOND - now).unsigned_abs());
            for _ in 0..3 {
                assert_eq!(
                    limiter.acquire("a", 1, now),
                    KeyedDecision::Decided(Decision::Wait(left))
                );
                assert!(limiter.contains("a"), "a denial forgot the key");
            }
        }
        assert_eq!(limiter.acquire("a", 1, SECOND), ALLOWED);
        assert_eq!(limiter.keys(), ["a"]);
    }

    #[test]
    fn the_counts_are_exact_and_summed_over_shards() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let limiter: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 2);
        assert_eq!(
            (limiter.specs(), limiter.max_keys(), limiter.shard_count()),
            (&[spec][..], 4, 2)
        );
        assert!(limiter.is_empty());
        let mut taken = Vec::new();
        for i in 0..100 {
            let key = format!("k{i}");
            if limiter.acquire(key.as_str(), 2, 0) == ALLOWED {
                taken.push(key);
            }
        }
        // Both shards full of empty keys: every other key was refused.
        assert_eq!(taken.len(), 4);
        assert_eq!(limiter.len(), 4);
        assert!(!limiter.is_empty());
        for key in &taken {
            assert!(limiter.contains(key.as_str()));
            limiter.acquire(key.as_str(), 1, 0); // denied
            limiter.acquire(key.as_str(), 3, 0); // never
        }
        let mut keys = limiter.keys();
        keys.sort();
        taken.sort();
        assert_eq!(keys, taken);
        assert_eq!(
            limiter.stats(),
            Stats {
                allowed: 4,
                denied: 8,
                refused: 96,
                forgotten: 0,
            }
        );
        // Two seconds on, all four are full again: each, touched, is forgotten.
        for key in &taken {
            assert_eq!(limiter.acquire(key.as_str(), 0, 2 * SECOND), ALLOWED);
        }
        assert!(limiter.is_empty());
        assert_eq!(limiter.stats().forgotten, 4);
        assert_eq!(limiter.stats().allowed, 8);
    }

    #[test]
    fn a_check_says_what_the_key_holds_after_it() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 3).unwrap();
        let limiter: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 4, 1);
        let check = |n| {
            let answer = limiter.check("a", n, 0);
            (answer.decision, answer.remaining)
        };
        assert_eq!(check(1), (ALLOWED, 2));
        assert_eq!(check(2), (ALLOWED, 0));
        assert_eq!(
            check(1),
            (KeyedDecision::Decided(Decision::Wait(1_000_000_000)), 0)
        );
        assert_eq!(limiter.available("a", 2 * SECOND), 2);
        assert_eq!(limiter.available("b", 0), 3);
    }

    #[test]
    fn a_request_that_takes_nothing_stores_nothing_and_needs_no_room() {
        let limiter = table(1);
        assert_eq!(limiter.acquire("a", 0, 0), ALLOWED);
        assert!(limiter.is_empty());
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        // The table is full of a key that is not fresh: a request for nothing is still
        // allowed, as it would be for a key that is remembered.
        assert_eq!(limiter.peek("b", 0, 0).decision, ALLOWED);
        assert_eq!(limiter.acquire("b", 0, 0), ALLOWED);
        assert_eq!(
            limiter.peek("b", 1, 0).decision,
            KeyedDecision::Refused {
                retry_in: 1_000_000_000
            }
        );
        assert_eq!(limiter.keys(), ["a"]);
    }

    #[test]
    fn a_table_with_room_sweeps_nothing() {
        let limiter = table(4);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(limiter.acquire("b", 1, 10 * SECOND), ALLOWED);
        // "a" is full again, but nobody needed its room nor touched it.
        assert!(limiter.contains("a"));
        assert_eq!(limiter.len(), 2);
        assert_eq!(limiter.stats().forgotten, 0);
    }

    #[test]
    fn a_refusal_hint_follows_the_latest_take_from_the_first_key() {
        // Room for one key; "a" takes 1 (full again at 1 s), then 1 more (at 2 s).
        let limiter = table(1);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        let refused = |retry_in| KeyedDecision::Refused { retry_in };
        assert_eq!(limiter.acquire("b", 1, 0), refused(1_000_000_000));
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(limiter.acquire("b", 1, 0), refused(2_000_000_000));
        assert_eq!(limiter.acquire("b", 1, SECOND), refused(1_000_000_000));
        assert_eq!(limiter.acquire("b", 1, 2 * SECOND), ALLOWED);
    }

    #[test]
    fn a_key_that_refilled_well_before_a_new_key_comes_is_forgotten_for_it() {
        // A refusal learns that "a" is full again at 1 s; a new key at 3 s, long after, must
        // still find it, not only one that comes at 1 s exactly.
        let limiter = table(1);
        assert_eq!(limiter.acquire("a", 1, 0), ALLOWED);
        assert_eq!(
            limiter.acquire("b", 1, 0),
            KeyedDecision::Refused {
                retry_in: 1_000_000_000
            }
        );
        assert_eq!(limiter.acquire("b", 1, 3 * SECOND), ALLOWED);
        assert_eq!(limiter.keys(), ["b"]);
        assert_eq!(limiter.stats().forgotten, 1);
    }

    #[test]
    fn watched_keys_are_handed_over_once_forgotten() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let limiter: KeyedLimiter<String> =
            KeyedLimiter::new(&[spec], 2, 1).watching(|key| key.starts_with('w'));
        assert!(limiter.take_forgotten().is_empty());
        for key in ["w1", "x1"] {
            assert_eq!(limiter.acquire(key, 1, 0), ALLOWED);
        }
        // Both full again at 1 s: a new key sweeps them both.
        assert_eq!(limiter.acquire("w2", 1, SECOND), ALLOWED);
        assert_eq!(limiter.stats().forgotten, 2);
        assert_eq!(limiter.take_forgotten(), ["w1"]);
        assert!(limiter.take_forgotten().is_empty(), "handed over once");
        // Forgotten when touched, full again.
        assert_eq!(limiter.acquire("w2", 0, 2 * SECOND), ALLOWED);
        assert_eq!(limiter.take_forgotten(), ["w2"]);
        assert_eq!(limiter.stats().forgotten, 3);
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

    #[test]
    fn keys_spread_over_every_shard_and_the_table_fills_to_max_keys() {
        let spec = BandSpec::new(Rate::new(1, 1).unwrap(), 2).unwrap();
        let limiter: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 10, 4);
        for i in 0..10_000 {
            limiter.acquire(format!("k{i}").as_str(), 1, 0);
        }
        assert_eq!(limiter.len(), 10, "the table fills to max_keys");
        // More shards than a byte of the hash can tell apart: every one is still reached.
        let limiter: KeyedLimiter<String> = KeyedLimiter::new(&[spec], 1024, 512);
        let shards: std::collections::HashSet<usize> = (0..20_000)
            .map(|i| limiter.shard_index(format!("k{i}").as_str()).1)
            .collect();
        assert_eq!(shards.len(), 512, "every one of 512 shards is reached");
    }
}

/// Waiting in turn, per key: reservations and giving them back.
#[cfg(test)]
mod reservations {
    use super::*;
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
        // Refunded in full: full again, but only from 1 s, where the reservation settled it.
        limiter.refund("a", 2, 0);
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("a", 0, SECOND / 2), ALLOWED);
        assert!(
            limiter.contains("a"),
            "full ahead of the clock is not fresh"
        );
        assert_eq!(
            limiter.acquire("b", 1, SECOND / 2),
            KeyedDecision::Refused {
                retry_in: 500_000_000
            }
        );
        assert!(limiter.contains("a"));
        assert_eq!(limiter.acquire("b", 1, SECOND), ALLOWED);
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
}
