//! One limit shared by the processes of one host: a keyed table in memory they all map.
//!
//! [`keyed`](super::keyed) keeps one limiter per key in a process's own memory, so four worker
//! processes each enforce the whole limit, and together admit four times it. This table keeps
//! the same [`Balances`] per key, as the same fixed-size record of 64-bit words
//! ([`record`](crate::core::exact::record)), in an array of words that every process maps from
//! one file (the mapping itself is `src/shared_memory.rs`'s business; this module sees only the
//! words). Each decision is the in-process one, run on a slot read from the array:
//! [`Balances::acquire`], [`Balances::reserve`], [`Balances::give_back`] and the rest, so the
//! arithmetic is the same code, and a process's decisions are exactly a `KeyedRateLimiter`'s.
//!
//! What sharing between processes adds, file by file:
//!
//! * [`layout`]: every word's place, and a header that says what the table is, so that a file
//!   of the wrong size, version or configuration is refused before a slot is read.
//! * [`lock`]: a lock per bucket of slots that the kernel frees when its holder dies.
//! * [`slot`]: a key's state in two copies and a state word, so a process killed halfway
//!   through a write never leaves a slot torn.
//! * `decide.rs`: each call on a key's slot, under its buckets' locks: the slot as the home
//!   the one decision runs on ([`home`](crate::core::exact::home), written once for this table
//!   and the in-process one); `held.rs`: the same, with the locks held by a stacked request.
//!
//! **Where a key lives.** A key is stored as its 128-bit digest under a seed chosen at random
//! when the table is made (clients choose keys; they cannot choose collisions without the
//! seed), in one of two buckets of up to eight slots that its digest names ("two choices": the
//! emptier of two random buckets keeps the buckets even, so a table fills to nearly every
//! slot before a new key finds both its buckets full). A table of `max_keys` keys has
//! `max_keys` slots, rounded up to whole buckets, and never grows.
//!
//! **Forgetting and refusing,** as in the in-process table: a key is forgotten only when it is
//! indistinguishable from a new one (every band full, no reservation ahead), and a new key
//! whose two buckets hold only keys that are not is refused, with the time until one of them
//! may be, rather than anyone being evicted.
//!
//! **One clock.** The table keeps the latest time any call has used, and a call made at an
//! earlier time is decided at that latest time (its waits still count from the caller's
//! time), as the in-process table does.
//!
//! **The one-key form** (`max_keys` `None`) is a `Limiter` rather than a keyed table: one slot,
//! holding the key [`THE_KEY`] from the table's making, never forgotten, each call decided at
//! its own time as `Limiter` decides it. So a one-key table answers exactly as `RateLimiter`
//! does, a clock that steps back included.

mod decide;
pub mod held;
pub mod layout;
pub mod lock;
pub mod slot;

use std::hash::Hasher;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};

use siphasher::sip128::{Hasher128, SipHasher13};

use crate::core::exact::config::Config;
use crate::core::exact::key::{encode_item, KeyRef};
use crate::core::exact::keyed::{off_the_clock, KeyedDecision, Stats};
use crate::core::exact::limiter::{Balances, Decision};
use crate::core::exact::rate::BandSpec;
use crate::core::exact::record::Shape;
use layout::{at, Layout, LayoutError};
use lock::{Held, Park};
use slot::{Digest, Slot};

/// What a table's words can be: anything that derefs to them and may be shared by threads (a
/// mapping of a file, or a plain array in tests).
pub trait Words: Deref<Target = [AtomicU64]> + Send + Sync {}

impl<T: Deref<Target = [AtomicU64]> + Send + Sync> Words for T {}

/// A shared keyed table on `words`.
pub struct Table<W> {
    words: W,
    layout: Layout,
    config: Config,
    specs: Box<[BandSpec]>,
    /// A new key's balances: every band full, not yet anchored.
    fresh: Balances,
    seed: (u64, u64),
    /// The one-key form: decided at each call's own time, its one key never forgotten.
    one: bool,
    /// Which table this is, the same in every process that maps it (see [`Table::identity`]).
    identity: (u64, u64),
    /// How a thread waits for a busy lock (see [`lock::Park`]).
    park: Park,
}

/// The 2^63 bias that makes a signed time's unsigned word order as the time does.
const BIAS: u64 = 1 << 63;

#[allow(clippy::cast_sign_loss)] // the bias maps i64 onto u64 in order, on purpose
fn biased(time: i64) -> u64 {
    (time as u64) ^ BIAS
}

#[allow(clippy::cast_possible_wrap)]
fn unbiased(word: u64) -> i64 {
    (word ^ BIAS) as i64
}

/// Where a new key finds room in its buckets: a free slot, or one whose key is fresh again
/// (in that bucket), to be forgotten for it.
enum Room<'t> {
    Free(Slot<'t>),
    Forgettable(usize, Slot<'t>),
}

/// The buckets `locked` holds: one, or two in index order.
fn buckets_of(locked: &Locked<'_>) -> impl Iterator<Item = usize> {
    let [low, high] = locked.buckets;
    std::iter::once(low).chain((high != low).then_some(high))
}

/// The key of a one-key table's one slot.
pub const THE_KEY: Digest = (0, 0);

/// The buckets a key's lock covers, in the order they are locked.
struct Locked<'t> {
    /// The locks, held until the call is done; none where a stacked decision holds them
    /// (see `held.rs`).
    _held: [Option<Held<'t>>; 2],
    buckets: [usize; 2],
    /// The time this call is decided at, and how far the caller's time is behind it.
    now: i64,
    behind: u128,
    /// The table's clock: the latest time any call has used, this one's included.
    clock: i64,
}

impl<W: Words> Table<W> {
    /// Write a new table into `words` (all zero, [`Layout::words`] long, see [`Table::layout`])
    /// and open it. `max_keys` `None` is the one-key form (see the module's docs).
    ///
    /// # Errors
    ///
    /// Never for a layout made by [`Table::layout`]; the error is [`Table::open`]'s.
    pub fn create(
        words: W,
        config: &Config,
        max_keys: Option<u64>,
        seed: (u64, u64),
        boot: u128,
    ) -> Result<Self, LayoutError> {
        let encoding = config.encode();
        let layout = Self::layout(config, max_keys);
        layout.write_header(&words, &encoding, seed, boot);
        for bucket in 0..layout.buckets {
            let start = layout.bucket(bucket);
            lock::init(&words[start..]);
        }
        let table = Self::open(words, config, max_keys)?;
        if table.one {
            // The one key, not yet anchored: its first call anchors it, as a limiter's does.
            let slot = Slot::at(&table.words, layout.slot(0, 0), layout);
            slot.fill(THE_KEY, &table.fresh);
        }
        Ok(table)
    }

    /// The layout of a table of `config` and `max_keys` (`None`: the one-key form).
    #[must_use]
    pub fn layout(config: &Config, max_keys: Option<u64>) -> Layout {
        let wide = Shape::of(&config.specs()).is_wide();
        let keys = max_keys.unwrap_or(1);
        Layout::new(config.bands().len(), keys, config.encode().len(), wide)
    }

    /// Open the table in `words`, which must be one of `config` and `max_keys` (`None`: the
    /// one-key form; the file's name tells the forms apart).
    ///
    /// # Errors
    ///
    /// If the words are not a table of this version, of the size their header says
    /// ([`LayoutError`]), or are a table of another configuration or size
    /// ([`LayoutError::Other`]).
    pub fn open(words: W, config: &Config, max_keys: Option<u64>) -> Result<Self, LayoutError> {
        let (layout, encoding) = Layout::read(&words)?;
        if encoding != config.encode() || layout != Self::layout(config, max_keys) {
            return Err(LayoutError::Other);
        }
        let specs: Box<[BandSpec]> = config.specs().into();
        let seed = (
            words[at::SEED].load(Ordering::Relaxed),
            words[at::SEED + 1].load(Ordering::Relaxed),
        );
        Ok(Self {
            fresh: Balances::new(&specs, None, None),
            specs,
            words,
            layout,
            config: config.clone(),
            seed,
            one: max_keys.is_none(),
            identity: seed,
            park: lock::park_here,
        })
    }

    /// Say which table this is: `identity` must be the same in every process that maps these
    /// words, and differ for every other table of the host (the file's device and inode).
    /// Until told, a table is known by its seed.
    #[must_use]
    pub fn with_identity(mut self, identity: (u64, u64)) -> Self {
        self.identity = identity;
        self
    }

    /// Wait for busy locks through `park` (the Python glue lets go of the interpreter there).
    #[must_use]
    pub fn with_park(mut self, park: Park) -> Self {
        self.park = park;
        self
    }

    /// Which table this is: two tables of one identity are one table, mapped twice (two
    /// objects that name it, in one process or several).
    #[must_use]
    pub fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// The most keys, `None` for the one-key form.
    #[must_use]
    pub fn max_keys(&self) -> Option<u64> {
        (!self.one).then_some(self.layout.max_keys)
    }

    /// The words the table lives in.
    #[must_use]
    pub fn words(&self) -> &W {
        &self.words
    }

    /// The table's configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The bands' specs.
    #[must_use]
    pub fn specs(&self) -> &[BandSpec] {
        &self.specs
    }

    /// The table's shape.
    #[must_use]
    pub fn shape(&self) -> Layout {
        self.layout
    }

    /// The boot the table's times belong to, as written at its making (see
    /// [`Table::re_anchor`]).
    #[must_use]
    pub fn boot(&self) -> u128 {
        (u128::from(self.words[at::BOOT].load(Ordering::Relaxed)) << 64)
            | u128::from(self.words[at::BOOT + 1].load(Ordering::Relaxed))
    }

    /// The latest time a call has used, if any.
    #[must_use]
    pub fn latest(&self) -> Option<i64> {
        match self.clock_word().load(Ordering::Relaxed) {
            0 => None,
            word => Some(unbiased(word)),
        }
    }

    /// `key`'s digest under the table's seed.
    #[must_use]
    pub fn digest(&self, key: &[u8]) -> Digest {
        let mut hasher = SipHasher13::new_with_keys(self.seed.0, self.seed.1);
        hasher.write(key);
        let hash = hasher.finish128();
        (hash.h1, hash.h2)
    }

    /// The digest of a key of the in-process table's kinds: its canonical encoding (the one a
    /// tuple's items have, [`encode_item`]), hashed with the table's seed. Every process reads
    /// the same key to the same digest, so only keys whose value says what they are can be
    /// shared: an object's number (`KeyRef::Object`) means nothing in another process.
    #[must_use]
    pub fn digest_of(&self, key: KeyRef<'_>) -> Digest {
        let mut encoded = Vec::with_capacity(32);
        encode_item(key, &mut encoded);
        self.digest(&encoded)
    }

    /// How far `now_ns` is from the table's clock (positive when ahead), if farther than
    /// [`MAX_CLOCK_GAP_NS`](crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS) either way: a time
    /// read on another clock, which a caller should refuse rather than decide at (as
    /// `KeyedLimiter::off_the_clock`). `None` for any time while no call has set the clock.
    #[must_use]
    pub fn off_the_clock(&self, now_ns: i64) -> Option<i128> {
        off_the_clock(self.latest()?, now_ns)
    }

    /// Lock the buckets of `digest` (in index order, once if they are one), and read the
    /// table's time for a call at `now_ns`. If the second stays busy, the first is let go
    /// while waiting for it (a thread never waits holding a lock, see [`lock`]).
    #[inline]
    fn locked(&self, digest: Digest, now_ns: i64) -> Locked<'_> {
        let [low, high] = self.buckets_for(digest);
        let held = lock::all_of(
            || {
                let first = self.try_bucket(low).ok_or(low)?;
                let second = if high == low {
                    None
                } else {
                    Some(self.try_bucket(high).ok_or(high)?)
                };
                Ok([Some(first), second])
            },
            |busy| self.wait_free(busy),
        );
        self.timed(held, [low, high], now_ns)
    }

    /// The buckets the key of `digest` lives in, the lower first: the two its lock covers.
    fn buckets_for(&self, digest: Digest) -> [usize; 2] {
        // A 64-bit digest word scaled to the bucket count (the high word of their product):
        // as even as a remainder, without a division.
        let buckets = self.layout.buckets as u128;
        #[allow(clippy::cast_possible_truncation)] // below the bucket count, a usize
        let scaled = |word: u64| ((u128::from(word) * buckets) >> 64) as usize;
        let (a, b) = (scaled(digest.0), scaled(digest.1));
        [a.min(b), a.max(b)]
    }

    /// Take the lock of `bucket` (holding no other).
    fn lock_bucket(&self, bucket: usize) -> Held<'_> {
        lock::lock(&self.words[self.layout.bucket(bucket)..], self.park)
    }

    /// Take the lock of `bucket` if it is free within a few microseconds of trying.
    #[inline]
    fn try_bucket(&self, bucket: usize) -> Option<Held<'_>> {
        lock::try_lock(&self.words[self.layout.bucket(bucket)..])
    }

    /// Wait, holding no lock, until `bucket`'s lock is free.
    pub fn wait_free(&self, bucket: usize) {
        lock::wait_free(&self.words[self.layout.bucket(bucket)..], self.park);
    }

    /// A call on `buckets` (their locks held, here or by the caller), at the table's time for
    /// `now_ns`.
    #[inline]
    fn timed<'t>(
        &'t self,
        held: [Option<Held<'t>>; 2],
        [low, high]: [usize; 2],
        now_ns: i64,
    ) -> Locked<'t> {
        let word = self.clock_word();
        let latest = if self.one {
            // The one-key form's clock is its bucket's, written only under its lock (held here
            // or by the caller): a load and a store suffice.
            let latest = word.load(Ordering::Relaxed);
            word.store(latest.max(biased(now_ns)), Ordering::Relaxed);
            latest
        } else {
            word.fetch_max(biased(now_ns), Ordering::Relaxed)
        };
        let clock = if latest == 0 {
            now_ns
        } else {
            unbiased(latest).max(now_ns)
        };
        // A keyed table decides at its clock (a key forgotten later must not come back
        // anchored earlier); the one-key form at the caller's time, as a limiter does.
        let now = if self.one { now_ns } else { clock };
        Locked {
            _held: held,
            buckets: [low, high],
            now,
            behind: (i128::from(now) - i128::from(now_ns)).unsigned_abs(),
            clock,
        }
    }

    /// The word that holds the table's clock: the header's, which every bucket's keys share;
    /// in the one-key form, its one bucket's own, on the cache line its lock is on, so that
    /// processes deciding on the one key at once take turns at one line, not two.
    fn clock_word(&self) -> &AtomicU64 {
        if self.one {
            &self.words[self.layout.bucket(0) + layout::BUCKET_CLOCK]
        } else {
            &self.words[at::LATEST]
        }
    }

    fn slots(&self, bucket: usize) -> impl Iterator<Item = Slot<'_>> {
        (0..self.layout.slots_per_bucket)
            .map(move |slot| Slot::at(&self.words, self.layout.slot(bucket, slot), self.layout))
    }

    #[inline]
    fn find(&self, locked: &Locked<'_>, digest: Digest) -> Option<Slot<'_>> {
        for bucket in buckets_of(locked) {
            if let Some(slot) = self.slots(bucket).find(|slot| slot.holds(digest)) {
                return Some(slot);
            }
        }
        None
    }

    fn count(&self, locked: &Locked<'_>, decision: KeyedDecision) {
        let field = match decision {
            KeyedDecision::Decided(Decision::Allowed) => 1,
            KeyedDecision::Decided(Decision::Wait(_) | Decision::Never) => 2,
            KeyedDecision::Refused { .. } => 3,
        };
        self.add(locked.buckets[0], field, 1);
    }

    /// Add to counter `field` of `bucket` (1 allowed, 2 denied, 3 refused, 4 forgotten; under
    /// its lock: a load and a store suffice).
    fn add(&self, bucket: usize, field: usize, by: u64) {
        let word = &self.words[self.layout.bucket(bucket) + layout::BUCKET_COUNTERS + field - 1];
        word.store(
            word.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    }

    /// A slot for a new key: a free one in the key's buckets, or one whose key is fresh at
    /// `now` (forgotten to make room); else the nanoseconds until the first may be, at least 1.
    /// Keys in `pinned` (a stacked request's own, see `held.rs`) are never forgotten for it.
    fn room(&self, locked: &Locked<'_>, pinned: &[Digest]) -> Result<Slot<'_>, u128> {
        let room = self.look_for_room(locked, pinned)?;
        if let Room::Forgettable(bucket, slot) = room {
            slot.free();
            self.add(bucket, 4, 1);
        }
        Ok(match room {
            Room::Free(slot) | Room::Forgettable(_, slot) => slot,
        })
    }

    /// `None` if a new key would find room now, else the wait until it may (see
    /// [`Table::room`]), changing nothing.
    fn would_find_room(&self, locked: &Locked<'_>) -> Option<u128> {
        self.look_for_room(locked, &[]).err()
    }

    /// Where [`Table::room`] finds room, forgetting nobody yet: a free slot first, else the
    /// first whose key (not in `pinned`) is fresh; else the wait until the first such key may
    /// be, or 1 ns if every slot holds a key of `pinned` (room comes when that request is
    /// decided).
    fn look_for_room(&self, locked: &Locked<'_>, pinned: &[Digest]) -> Result<Room<'_>, u128> {
        let mut first_fresh = None;
        let mut forgettable = None;
        for bucket in buckets_of(locked) {
            for slot in self.slots(bucket) {
                if !slot.is_used() {
                    return Ok(Room::Free(slot));
                }
                if forgettable.is_some() || pinned.iter().any(|&digest| slot.holds(digest)) {
                    continue;
                }
                let balances = slot.balances();
                if balances.is_fresh_at(&self.specs, locked.now) {
                    forgettable = Some(Room::Forgettable(bucket, slot));
                } else {
                    let from = balances.fresh_from(&self.specs);
                    first_fresh = Some(first_fresh.map_or(from, |first: i64| first.min(from)));
                }
            }
        }
        if let Some(room) = forgettable {
            return Ok(room);
        }
        let Some(first_fresh) = first_fresh else {
            return Err(1);
        };
        Err((i128::from(first_fresh) - i128::from(locked.now))
            .max(1)
            .unsigned_abs())
    }

    /// Store `balances` in `slot`, or forget the key if they are now a new key's.
    fn keep(&self, locked: &Locked<'_>, slot: Slot<'_>, balances: &Balances) {
        let fresh = !self.one
            && balances.is_full(&self.specs)
            && balances.is_fresh_at(&self.specs, locked.now);
        if fresh {
            slot.free();
            self.add(locked.buckets[0], 4, 1);
        } else {
            slot.commit(balances);
        }
    }

    /// Whether the key of `digest` is stored.
    pub fn contains(&self, digest: Digest) -> bool {
        let locked = self.locked(digest, i64::MIN);
        self.find(&locked, digest).is_some()
    }

    /// How many keys are stored (each bucket counted under its lock, one after another).
    pub fn len(&self) -> usize {
        (0..self.layout.buckets)
            .map(|bucket| {
                let _held = self.lock_bucket(bucket);
                self.slots(bucket).filter(Slot::is_used).count()
            })
            .sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What every process has decided on this table since it was made.
    pub fn stats(&self) -> Stats {
        let mut stats = Stats::default();
        for bucket in 0..self.layout.buckets {
            let start = self.layout.bucket(bucket) + layout::BUCKET_COUNTERS;
            let field = |at: usize| self.words[start + at - 1].load(Ordering::Relaxed);
            stats.allowed += field(1);
            stats.denied += field(2);
            stats.refused += field(3);
            stats.forgotten += field(4);
        }
        stats
    }

    /// Every slot's balances, each bucket read under its lock: for checking a table's
    /// consistency (tests, tooling).
    pub fn entries(&self) -> Vec<(Digest, Balances)> {
        let mut entries = Vec::new();
        for bucket in 0..self.layout.buckets {
            let _held = self.lock_bucket(bucket);
            for slot in self.slots(bucket).filter(Slot::is_used) {
                entries.push((slot.digest(), slot.balances()));
            }
        }
        entries
    }

    /// This table with every stored time moved by `by` nanoseconds and recorded as of `boot`,
    /// written into `words` (all zero, [`Layout::words`] long): a table made in an earlier boot,
    /// whose times were read on a monotonic clock that has since restarted, carried over to
    /// this boot's clock. Each key keeps its slot, its digest and what it is owed; each bucket
    /// its counters. The caller makes sure nobody decides on this table meanwhile (the file's
    /// exclusive lock), and puts the copy in its place in one step (a rename): a copy cut short
    /// is never used, so carrying over is done whole or not at all.
    ///
    /// # Errors
    ///
    /// Never for words of the right length; the error is [`Table::create`]'s.
    pub fn moved_into<V: Words>(
        &self,
        words: V,
        by: i64,
        boot: u128,
    ) -> Result<Table<V>, LayoutError> {
        let copy = Table::create(words, &self.config, self.max_keys(), self.seed, boot)?;
        for bucket in 0..self.layout.buckets {
            let (from, to) = (self.layout.bucket(bucket), copy.layout.bucket(bucket));
            for counter in layout::BUCKET_COUNTERS..layout::BUCKET_CLOCK {
                let count = self.words[from + counter].load(Ordering::Relaxed);
                copy.words[to + counter].store(count, Ordering::Relaxed);
            }
            for (old, new) in self.slots(bucket).zip(copy.slots(bucket)) {
                if new.is_used() {
                    new.free(); // the one-key form's key, made fresh: the old one's replaces it
                }
                if old.is_used() {
                    let mut balances = old.balances();
                    balances.shift(by);
                    new.fill(old.digest(), &balances);
                }
            }
        }
        if let Some(latest) = self.latest() {
            let moved = biased(latest.saturating_add(by));
            copy.clock_word().store(moved, Ordering::Relaxed);
        }
        Ok(copy)
    }
}

#[cfg(test)]
mod tests;
