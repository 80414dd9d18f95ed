//! What a whole-trace keyed decision costs in Rust alone, and what its parts cost at the least.
//!
//! Run with `cargo bench --bench keyed_floor`. The same trace as `bench_keyed.py` (100,000
//! requests over 10,000 int keys, never denied) is decided by the core's
//! `KeyedLimiter::acquire_many`, with no Python anywhere, on the table the glue uses: keys of
//! the core's mixed [`Key`] type (24 bytes, any int, float, text, bytes or object number),
//! each int looked up as a borrowed `KeyRef::Int`, as `try_acquire_many` does. That row is the
//! floor for `try_acquire_many` called back to back. The row under it is the same with the
//! caches emptied before each run, as `bench_keyed.py` leaves them (its other cases run
//! between two runs of its trace, and push the table out): its interleaved figure is read
//! against that one. Beside them, what the same table costs keyed by a bare `u64` (the price
//! of the mixed key type), and the two steps no exact keyed table can skip: hashing a
//! client-chosen key with a keyed hash (SipHash-1-3, as the table does) and finding and
//! updating an entry in a table of that many 64-byte entries.
//! Medians of nine runs, nanoseconds per request.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::time::Instant;

use hashbrown::HashTable;
use protocol_in_code_qos::core::exact::key::{Key, KeyRef};
use protocol_in_code_qos::core::exact::keyed::{KeyedDecision, KeyedLimiter};
use protocol_in_code_qos::core::exact::limiter::Decision;
use protocol_in_code_qos::core::exact::rate::{BandSpec, Rate};
use siphasher::sip::SipHasher13;

const CLIENTS: u32 = 10_000;
const TRACE: u32 = 100_000;
const RUNS: usize = 9;

/// A client number as a table key: hashed and compared as the number it borrows.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Client(u64);

impl Borrow<u64> for Client {
    fn borrow(&self) -> &u64 {
        &self.0
    }
}

impl From<&u64> for Client {
    fn from(number: &u64) -> Self {
        Self(*number)
    }
}

fn median_ns(run: impl FnMut() -> u64) -> f64 {
    median_after_ns(|| (), run)
}

/// As [`median_ns`], running `before` (untimed) before each run.
fn median_after_ns(mut before: impl FnMut(), mut run: impl FnMut() -> u64) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            before();
            let start = Instant::now();
            black_box(run());
            start.elapsed().as_secs_f64() * 1e9 / f64::from(TRACE)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn main() {
    let keys: Vec<u64> = (0..TRACE)
        .map(|i| u64::from(i) * 7919 % u64::from(CLIENTS))
        .collect();
    let times: Vec<i64> = (0..TRACE).map(|i| i64::from(i) * 1_000).collect();

    let huge = 1_000_000_000_000;
    let spec = BandSpec::new(Rate::new(huge, 1).expect("a valid rate"), huge).expect("a band");
    let max_keys = 2 * usize::try_from(CLIENTS).expect("fits");
    let allowed = |decision| u64::from(decision == KeyedDecision::Decided(Decision::Allowed));

    // As `KeyedRateLimiter(HUGE, max_keys=2 * CLIENTS)` holds it: 16 shards, `Key`s.
    let table: KeyedLimiter<Key> = KeyedLimiter::new(&[spec], max_keys, 16);
    let ints: Vec<i64> = keys
        .iter()
        .map(|&key| i64::try_from(key).expect("fits"))
        .collect();
    let mut decide = || {
        let mut count = 0;
        table.acquire_many::<KeyRef<'_>, _>(
            ints.iter()
                .zip(&times)
                .map(|(&key, &now)| (KeyRef::Int(key), 1, now)),
            |decision| count += allowed(decision),
        );
        count
    };
    let trace = median_ns(&mut decide);
    // `bench_keyed.py` runs its other cases between two runs of the trace: whatever they
    // touch pushes the table out of the caches. Writing 64 MiB does the same here.
    let mut flush = vec![0_u64; 8 << 20];
    let cold = median_after_ns(
        || {
            for (i, word) in flush.iter_mut().enumerate() {
                *word = word.wrapping_add(i as u64);
            }
            black_box(&flush);
        },
        &mut decide,
    );

    let bare: KeyedLimiter<Client> = KeyedLimiter::new(&[spec], max_keys, 16);
    let bare_trace = median_ns(|| {
        let mut count = 0;
        bare.acquire_many::<u64, _>(
            keys.iter().zip(&times).map(|(key, &now)| (key, 1, now)),
            |decision| count += allowed(decision),
        );
        count
    });

    let sip = median_ns(|| {
        keys.iter().fold(0, |acc, key| {
            let mut hasher = SipHasher13::new_with_keys(0x0123_4567, 0x89ab_cdef);
            hasher.write_u64(*key);
            acc ^ hasher.finish()
        })
    });

    let random = std::collections::hash_map::RandomState::new();
    let mut entries: HashTable<(u64, [u64; 7])> = HashTable::new();
    for key in 0..u64::from(CLIENTS) {
        entries.insert_unique(random.hash_one(key), (key, [0; 7]), |entry| {
            random.hash_one(entry.0)
        });
    }
    let hashes: Vec<u64> = keys.iter().map(|key| random.hash_one(key)).collect();
    let probe = median_ns(|| {
        let mut sum = 0;
        for (hash, key) in hashes.iter().zip(&keys) {
            if let Some(entry) = entries.find_mut(*hash, |entry| entry.0 == *key) {
                entry.1[0] += 1;
                sum += entry.1[0];
            }
        }
        sum
    });

    println!("ns per request, medians of {RUNS} runs of {TRACE} requests over {CLIENTS} keys");
    println!("KeyedLimiter::acquire_many, Key (as the glue)    {trace:6.1}");
    println!("  the same, the caches emptied before each run   {cold:6.1}");
    println!("KeyedLimiter::acquire_many, a bare u64 key       {bare_trace:6.1}");
    println!("SipHash-1-3 of one 64-bit key                    {sip:6.1}");
    println!("find and update a 64-byte entry of {CLIENTS} keys {probe:6.1}");
}
