//! What a shared table's decision costs in Rust alone, and what its slot costs in bytes.
//!
//! Run with `cargo bench --bench shared_floor`. The table is `core::exact::shared::Table` on
//! plain memory (the same words a mapped file gives; the mapping adds nothing per call), one
//! band, never denied. Rows, nanoseconds per decision, medians of nine runs:
//!
//! * one key, decided again and again (`SharedRateLimiter`'s case: the floor under
//!   `bench_shared.py`'s first row);
//! * 10,000 keys in turn, each given as its digest (the table's work alone), and as the bytes
//!   the glue encodes an int key to (digest included);
//! * the in-process `KeyedLimiter` on the same 10,000 keys, with the glue's key type (each
//!   looked up as a borrowed `KeyRef::Int`), for comparison;
//! * the parts: taking and freeing a bucket's lock (a process-shared robust mutex), and the
//!   key's SipHash-1-3 128-bit digest.
//!
//! Then the bytes each key costs: its slot (state, digest, two copies of the balances) and its
//! share of its bucket's lock and counters.

// Timings and byte counts are printed as floats, and keys are small: the casts lose nothing.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap
)]

use std::hint::black_box;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use protocol_in_code_qos::core::exact::config::{BandConfig, Config, Ratio};
use protocol_in_code_qos::core::exact::key::{Key, KeyRef};
use protocol_in_code_qos::core::exact::keyed::KeyedLimiter;
use protocol_in_code_qos::core::exact::shared::lock::{self, lock, park_here};
use protocol_in_code_qos::core::exact::shared::Table;

const KEYS: u64 = 10_000;
const RUNS: usize = 9;

fn median_ns(per_run: u64, mut run: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_nanos() as f64 / per_run as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn main() {
    let band = BandConfig::new(Ratio::new(1_000_000_000, 1).unwrap(), None, None).unwrap();
    let config = Config::new(vec![band]).unwrap();
    let layout = Table::<Box<[AtomicU64]>>::layout(&config, Some(2 * KEYS));
    let words: Box<[AtomicU64]> = (0..layout.words()).map(|_| AtomicU64::new(0)).collect();
    let table = Table::create(words, &config, Some(2 * KEYS), (1, 2), 0).unwrap();
    let one: Box<[AtomicU64]> = (0..Table::<Box<[AtomicU64]>>::layout(&config, None).words())
        .map(|_| AtomicU64::new(0))
        .collect();
    let single = Table::create(one, &config, None, (1, 2), 0).unwrap();

    let digests: Vec<_> = (0..KEYS).map(|k| table.digest(&encoded(k))).collect();
    let mut now = 0_i64;
    let mut tick = || {
        now += 1000;
        now
    };

    let one_key = median_ns(100_000, || {
        for _ in 0..100_000 {
            black_box(single.check((0, 0), 1, tick()));
        }
    });
    let many_digests = median_ns(KEYS, || {
        for &digest in &digests {
            black_box(table.check(digest, 1, tick()));
        }
    });
    let many_bytes = median_ns(KEYS, || {
        for k in 0..KEYS {
            black_box(table.check(table.digest(&encoded(k)), 1, tick()));
        }
    });
    let local = KeyedLimiter::<Key>::new(&config.specs(), 2 * KEYS as usize, 16);
    let in_process = median_ns(KEYS, || {
        for k in 0..KEYS {
            black_box(local.acquire(&KeyRef::Int(k as i64), 1, tick()));
        }
    });
    let mutex: Box<[AtomicU64]> = (0..lock::WORDS).map(|_| AtomicU64::new(0)).collect();
    lock::init(&mutex);
    let locking = median_ns(100_000, || {
        for _ in 0..100_000 {
            black_box(lock(&mutex, park_here));
        }
    });
    let digesting = median_ns(KEYS, || {
        for k in 0..KEYS {
            black_box(table.digest(&encoded(k)));
        }
    });

    // Two threads on the one key at once, each on its own core (as two processes would be):
    // their combined decisions against one thread's alone, over the same number of calls.
    let alone = median_ns(100_000, || {
        for i in 0..100_000 {
            black_box(single.check((0, 0), 1, i));
        }
    });
    let together = median_ns(200_000, || {
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    for i in 0..100_000 {
                        black_box(single.check((0, 0), 1, i));
                    }
                });
            }
        });
    });

    println!("shared table, one band, ns per decision (median of {RUNS} runs)");
    println!(
        "  one key, two threads at once: {together:.1} ns per decision in all, against \
         {alone:.1} for one thread alone ({:.2}x the decisions per second)",
        alone / together
    );
    println!("  one key, again and again                      {one_key:8.1}");
    println!("  10,000 keys in turn, by digest                {many_digests:8.1}");
    println!("  10,000 keys in turn, from the key's bytes     {many_bytes:8.1}");
    println!("  in-process KeyedLimiter<Key>, 10,000 keys     {in_process:8.1}");
    println!("  parts: a bucket's lock taken and freed        {locking:8.1}");
    println!("         a 9-byte key's SipHash-1-3 digest      {digesting:8.1}");
    let shape = table.shape();
    let slot = shape.slot_words() * 8;
    let head = (lock::WORDS + 5) * 8;
    let per_key = slot as f64 + head as f64 / shape.slots_per_bucket as f64;
    println!(
        "bytes per key: slot {slot} (state 8, digest 16, two copies of {} per band), \
         {per_key:.0} with its share of the bucket's lock and counters",
        8 * shape.band_words
    );
}

/// An int key as the glue encodes it (`key::encode_item` of a plain int: a tag and 8 bytes).
fn encoded(key: u64) -> [u8; 9] {
    let mut bytes = [0; 9];
    bytes[1..].copy_from_slice(&key.to_le_bytes());
    bytes
}
