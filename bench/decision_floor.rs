//! What each part of a keyed decision costs, one part added at a time, against governor.
//!
//! Run with `cargo bench --bench decision_floor --features governor-bench`. Every row decides
//! the same 100,000 int keys (never denied, one band, the time moving on by 1 µs a call), taken
//! in turn and then shuffled, median of nine runs, nanoseconds per decision:
//!
//! * **governor**: its keyed limiter (`check_key`), which reads its own clock on every call;
//! * **in-process `KeyedLimiter<Key>`**: the core's table, as the glue holds it;
//! * the stripped-down tables below, built here, each adding one cost to the one above it:
//!   1. a sharded `Mutex<HashTable<(u64, [u64; 2])>>` hashed by an unkeyed multiply (as `FxHash`
//!      does): find the key, read its two words, write them back; and the same with the
//!      multiply's bits mixed (as `MurmurHash3` finishes), which spreads int keys as a keyed
//!      hash does: the two show what the spread costs in the caches, apart from the hash;
//!   2. the same hashed by SipHash-1-3 with a random seed (the hash a table needs when clients
//!      choose the keys, and the one std's `RandomState` and so governor's map use);
//!   3. the same with one clock for the whole table, moved by an atomic `fetch_max`;
//!   4. the same settling the record exactly: read into `Balances`, `acquire`, written back;
//! * and governor's shape, built here: a sharded read-write lock taken for reading, around one
//!   `AtomicU64` per key changed by a compare-and-swap (GCRA), SipHash-1-3 again;
//! * SipHash-1-3 alone, each hash free to overlap the next and each waiting on the one before;
//! * and what reading a clock costs (`Instant::now`), which governor pays inside its call and
//!   the other rows are handed.

// Timings are printed as floats, keys and times are small and positive: the casts lose nothing.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]

use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

use governor::{Quota, RateLimiter};
use hashbrown::HashTable;
use protocol_in_code_qos::core::exact::key::{Key, KeyRef};
use protocol_in_code_qos::core::exact::keyed::{KeyedDecision, KeyedLimiter};
use protocol_in_code_qos::core::exact::limiter::{Balances, Decision};
use protocol_in_code_qos::core::exact::rate::{BandSpec, Rate};
use protocol_in_code_qos::core::exact::record::Shape;
use siphasher::sip::SipHasher13;

const KEYS: u64 = 100_000;
const RUNS: usize = 9;
const SHARDS: usize = 16;
/// A billion tokens a second: never denied at one call a microsecond per key.
const RATE: u32 = 1_000_000_000;

/// One pass of a row: every key decided once, in the order given, the time moving on by 1 µs
/// a call.
type Pass<'a> = Box<dyn FnMut(&[u64], &mut i64) + 'a>;

fn pass<'a>(mut decide: impl FnMut(u64, i64) -> bool + 'a) -> Pass<'a> {
    Box::new(move |order, now| {
        for &key in order {
            *now += 1_000;
            black_box(decide(black_box(key), *now));
        }
    })
}

/// Each row's median ns per decision over `RUNS` passes. The rows take turns, a pass each, so
/// that a busy moment of a shared machine falls on all of them alike.
fn medians_ns(rows: &mut [(&str, Pass<'_>)], order: &[u64]) -> Vec<f64> {
    let mut now = 0_i64;
    // A first pass, untimed, stores every key.
    for (_, run) in rows.iter_mut() {
        run(order, &mut now);
    }
    let mut samples = vec![Vec::with_capacity(RUNS); rows.len()];
    for _ in 0..RUNS {
        for ((_, run), samples) in rows.iter_mut().zip(&mut samples) {
            let started = Instant::now();
            run(order, &mut now);
            samples.push(started.elapsed().as_secs_f64() * 1e9 / order.len() as f64);
        }
    }
    samples
        .into_iter()
        .map(|mut samples| {
            samples.sort_by(f64::total_cmp);
            samples[RUNS / 2]
        })
        .collect()
}

/// An unkeyed hash of one word: a rotate, an xor and a multiply, as `FxHash` does. Anyone who
/// knows it can choose keys that all fall in one bucket.
#[derive(Clone, Copy, Default)]
struct Multiply;

struct MultiplyHasher(u64);

impl Hasher for MultiplyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl BuildHasher for Multiply {
    type Hasher = MultiplyHasher;

    fn build_hasher(&self) -> MultiplyHasher {
        MultiplyHasher(0)
    }
}

/// The multiply, its bits then mixed by shifts and one more multiply (`MurmurHash3`'s last
/// step): int keys taken in turn land as far apart as under a keyed hash. Still unkeyed.
#[derive(Clone, Copy, Default)]
struct Mixed;

struct MixedHasher(MultiplyHasher);

impl Hasher for MixedHasher {
    fn finish(&self) -> u64 {
        let mut hash = self.0.finish();
        hash ^= hash >> 33;
        hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
        hash ^ (hash >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    fn write_u64(&mut self, word: u64) {
        self.0.write_u64(word);
    }
}

impl BuildHasher for Mixed {
    type Hasher = MixedHasher;

    fn build_hasher(&self) -> MixedHasher {
        MixedHasher(MultiplyHasher(0))
    }
}

/// SipHash-1-3 under a random seed: keys a client chooses cannot be aimed at one bucket.
#[derive(Clone, Copy)]
struct Sip13(u64, u64);

impl Sip13 {
    fn random() -> Self {
        let seed = std::collections::hash_map::RandomState::new();
        Self(seed.hash_one(1_u64), seed.hash_one(2_u64))
    }
}

impl BuildHasher for Sip13 {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.0, self.1)
    }
}

/// A shard by middle bits of the hash, as the core's table picks one: the map inside uses the
/// low bits and the top seven.
fn shard_of(hash: u64) -> usize {
    ((((hash >> 24) & 0xffff_ffff) * SHARDS as u64) >> 32) as usize
}

/// A shard of [`Locked`]: each key with its two words.
type Records = Mutex<HashTable<(u64, [u64; 2])>>;

/// Sharded tables of two words per key behind a mutex each, and one clock for the table.
struct Locked<S> {
    hasher: S,
    shards: Vec<Records>,
    clock: AtomicI64,
}

impl<S: BuildHasher + Copy> Locked<S> {
    fn new(hasher: S) -> Self {
        Self {
            hasher,
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            clock: AtomicI64::new(i64::MIN),
        }
    }

    /// Find (or make) `key`'s record under its shard's lock and hand it to `update` with the
    /// time of the call; `clocked` moves the table's clock first.
    fn decide(
        &self,
        key: u64,
        now: i64,
        clocked: bool,
        update: impl FnOnce(&mut [u64; 2], i64) -> bool,
    ) -> bool {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shards[shard_of(hash)].lock().expect("not poisoned");
        let now = if clocked {
            self.clock.fetch_max(now, Ordering::Relaxed).max(now)
        } else {
            now
        };
        if let Some(entry) = shard.find_mut(hash, |entry| entry.0 == key) {
            return update(&mut entry.1, now);
        }
        let hasher = &self.hasher;
        let entry = shard.insert_unique(hash, (key, [0, 0]), |entry| hasher.hash_one(entry.0));
        update(&mut entry.into_mut().1, now)
    }
}

/// Two words read and written back: the least a stateful decision does.
fn touch(record: &mut [u64; 2], now: i64) -> bool {
    let [units, _] = *record;
    *record = [units.wrapping_add(1), now as u64];
    units != u64::MAX
}

/// governor's shape: sharded maps of one word per key, read-locked, the word changed by a CAS.
struct Cas {
    hasher: Sip13,
    shards: Vec<RwLock<HashTable<(u64, AtomicU64)>>>,
    /// Nanoseconds between two tokens.
    interval: u64,
}

impl Cas {
    fn new(interval: u64) -> Self {
        let hasher = Sip13::random();
        Self {
            hasher,
            shards: (0..SHARDS).map(|_| RwLock::new(HashTable::new())).collect(),
            interval,
        }
    }

    /// GCRA: the key's theoretical arrival time moved on by one interval, if not too far ahead.
    fn decide(&self, key: u64, now: i64) -> bool {
        let now = now as u64;
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[shard_of(hash)];
        let allowed = |word: &AtomicU64| {
            word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |arrival| {
                let next = arrival.max(now) + self.interval;
                (next <= now + self.interval).then_some(next)
            })
            .is_ok()
        };
        if let Some(entry) = shard
            .read()
            .expect("not poisoned")
            .find(hash, |entry| entry.0 == key)
        {
            return allowed(&entry.1);
        }
        let hasher = &self.hasher;
        let mut writing = shard.write().expect("not poisoned");
        let entry = writing
            .entry(
                hash,
                |entry| entry.0 == key,
                |entry| hasher.hash_one(entry.0),
            )
            .or_insert((key, AtomicU64::new(0)));
        allowed(&entry.into_mut().1)
    }
}

/// The same keys in an order no hash can follow: a fixed shuffle (Fisher-Yates, xorshift).
fn shuffled(keys: &[u64]) -> Vec<u64> {
    let mut shuffled = keys.to_vec();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for at in (1..shuffled.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        shuffled.swap(at, (state % (at as u64 + 1)) as usize);
    }
    shuffled
}

fn main() {
    let spec = BandSpec::new(
        Rate::new(u64::from(RATE), 1).expect("a rate"),
        u64::from(RATE),
    )
    .expect("a band");
    let specs = [spec];
    let shape = Shape::of(&specs);
    let keys = usize::try_from(KEYS).expect("fits");

    let quota = Quota::per_second(NonZeroU32::new(RATE).expect("not zero"));
    let governor = RateLimiter::keyed(quota);
    let table = KeyedLimiter::<Key>::new(&specs, 2 * keys, SHARDS);
    let multiply = Locked::new(Multiply);
    let mixed = Locked::new(Mixed);
    let sip = Locked::new(Sip13::random());
    let clocked = Locked::new(Sip13::random());
    let settled = Locked::new(Sip13::random());
    let cas = Cas::new(1_000_000_000 / u64::from(RATE));
    let seed = Sip13::random();
    let mut chained = 0_u64;

    let mut rows: Vec<(&str, Pass<'_>)> = vec![
        (
            "governor keyed (u64), its own clock read",
            pass(|key, _| governor.check_key(&key).is_ok()),
        ),
        (
            "in-process KeyedLimiter<Key>",
            pass(|key, now| {
                table.acquire(&KeyRef::Int(key as i64), 1, now)
                    == KeyedDecision::Decided(Decision::Allowed)
            }),
        ),
        (
            "1. mutex, unkeyed multiply hash, read + write 2 words",
            pass(|key, now| multiply.decide(key, now, false, touch)),
        ),
        (
            "1b. as 1, the multiply's bits mixed (unkeyed)",
            pass(|key, now| mixed.decide(key, now, false, touch)),
        ),
        (
            "2. mutex, SipHash-1-3, read + write 2 words",
            pass(|key, now| sip.decide(key, now, false, touch)),
        ),
        (
            "3. as 2, and the table's clock by fetch_max",
            pass(|key, now| clocked.decide(key, now, true, touch)),
        ),
        (
            "4. as 3, and the record settled exactly (Balances)",
            pass(|key, now| {
                settled.decide(key, now, true, |record, now| {
                    let mut balances = if record[1] == 0 {
                        Balances::new(&specs, None, None)
                    } else {
                        shape.read(&record[..])
                    };
                    let decision = balances.acquire(&specs, 1, now);
                    shape.write(&mut record[..], &balances);
                    decision == Decision::Allowed
                })
            }),
        ),
        (
            "governor's shape: read lock, SipHash-1-3, one CAS",
            pass(|key, now| cas.decide(key, now)),
        ),
        (
            "SipHash-1-3 of the key alone",
            pass(|key, _| seed.hash_one(key) != 0),
        ),
        (
            "SipHash-1-3 of the key, each after the one before",
            pass(|key, _| {
                chained = seed.hash_one(key ^ (chained & 1));
                chained != 0
            }),
        ),
        (
            "a clock read alone (Instant::now)",
            pass(|_, _| {
                black_box(Instant::now());
                true
            }),
        ),
    ];

    let in_turn: Vec<u64> = (0..KEYS).collect();
    let shuffled = shuffled(&in_turn);
    let turn_ns = medians_ns(&mut rows, &in_turn);
    let shuffled_ns = medians_ns(&mut rows, &shuffled);

    println!(
        "100,000 int keys, one band: ns per decision (median of {RUNS}), and against governor"
    );
    println!("{:<54} {:>16} {:>16}", "", "keys in turn", "keys shuffled");
    for (((name, _), turn), shuffled) in rows.iter().zip(&turn_ns).zip(&shuffled_ns) {
        println!(
            "  {name:<52} {turn:6.1} ns {:5.2}x {shuffled:6.1} ns {:5.2}x",
            turn / turn_ns[0],
            shuffled / shuffled_ns[0]
        );
    }
}
