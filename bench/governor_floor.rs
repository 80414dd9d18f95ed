//! A key's state in bytes and a keyed decision in nanoseconds: the shared table's slot, the
//! in-process keyed table, and governor's keyed limiter, in Rust alone.
//!
//! Run with `cargo bench --bench governor_floor --features governor-bench` (the feature only
//! brings governor in). Each limiter holds 100,000 int keys, one band, never denied:
//!
//! * **bytes per key**: what the allocator handed out while the keys were first decided
//!   (counted by a wrapper around the system allocator), divided by the keys; for the shared
//!   table, its words (a fixed array, made before the keys: a table's size never changes);
//! * **ns per decision**: the 100,000 keys decided in turn, median of nine runs.
//!
//! governor's keyed state is one 64-bit "theoretical arrival time" per key in a sharded map:
//! GCRA on a nanosecond clock, of one band, not exact for rates that do not divide a second.
//! The exact tables keep the balance in integer units of every band, with a waiter's
//! reservation and a key forgotten only when full.

// Timings and byte counts are printed as floats, and keys are small: the casts lose nothing.
#![allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_wrap,
    clippy::cast_possible_truncation
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use governor::{Quota, RateLimiter};
use protocol_in_code_qos::core::exact::config::{BandConfig, Config, Ratio};
use protocol_in_code_qos::core::exact::key::{Key, KeyRef};
use protocol_in_code_qos::core::exact::keyed::KeyedLimiter;
use protocol_in_code_qos::core::exact::shared::Table;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only a count is kept.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: u64 = 100_000;
const RUNS: usize = 9;
const RATE: u32 = 1_000_000_000;

fn median_ns(mut run: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_nanos() as f64 / KEYS as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

/// Decisions per second of two threads deciding at once, against one thread alone.
fn alone_and_together(decide: impl Fn() -> bool + Sync) -> f64 {
    const CALLS: u64 = 1_000_000;
    let run = |threads: u64| {
        let mut samples: Vec<f64> = (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(|| {
                            for _ in 0..CALLS {
                                black_box(decide());
                            }
                        });
                    }
                });
                (threads * CALLS) as f64 / started.elapsed().as_secs_f64()
            })
            .collect();
        samples.sort_by(f64::total_cmp);
        samples[RUNS / 2]
    };
    run(2) / run(1)
}

/// Bytes allocated by `fill`, per key.
fn bytes_per_key(fill: impl FnOnce()) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    fill();
    (LIVE.load(Ordering::Relaxed) - before) as f64 / KEYS as f64
}

fn main() {
    let band = BandConfig::new(Ratio::new(u64::from(RATE), 1).unwrap(), None, None).unwrap();
    let config = Config::new(vec![band]).unwrap();
    let mut now = 0_i64;
    let mut tick = || {
        now += 1000;
        now
    };

    // The shared table: its words are the whole of its memory.
    let layout = Table::<Box<[AtomicU64]>>::layout(&config, Some(KEYS));
    let words: Box<[AtomicU64]> = (0..layout.words()).map(|_| AtomicU64::new(0)).collect();
    let shared = Table::create(words, &config, Some(KEYS), (1, 2), 0).unwrap();
    let shared_bytes = (layout.words() * 8) as f64 / KEYS as f64;
    let digests: Vec<_> = (0..KEYS)
        .map(|k| {
            let mut key = [0; 9];
            key[1..].copy_from_slice(&k.to_le_bytes());
            shared.digest(&key)
        })
        .collect();
    let shared_ns = median_ns(|| {
        for &digest in &digests {
            black_box(shared.check(digest, 1, tick()));
        }
    });

    // The in-process table, with the glue's key type.
    let local = KeyedLimiter::<Key>::new(&config.specs(), 2 * KEYS as usize, 16);
    let local_bytes = bytes_per_key(|| {
        for k in 0..KEYS {
            // A key that takes a token is stored (a full one would be forgotten at once).
            black_box(local.acquire(&KeyRef::Int(k as i64), 1, 0));
        }
    });
    let local_ns = median_ns(|| {
        for k in 0..KEYS {
            black_box(local.acquire(&KeyRef::Int(k as i64), 1, tick()));
        }
    });

    // governor, keyed by u64.
    let quota = Quota::per_second(NonZeroU32::new(RATE).unwrap());
    let mut governor = None;
    let governor_bytes = bytes_per_key(|| {
        let limiter = RateLimiter::keyed(quota);
        for k in 0..KEYS {
            black_box(limiter.check_key(&k).is_ok());
        }
        governor = Some(limiter);
    });
    let governor = governor.expect("made above");
    let governor_ns = median_ns(|| {
        for k in 0..KEYS {
            black_box(governor.check_key(&k).is_ok());
        }
    });

    // One key, one thread, against two threads on it at once (each on its own core, as two
    // processes would be): the floor of what sharing one key's state between cores costs,
    // for one word changed by one compare-and-swap (governor) and for the shared table.
    let one = RateLimiter::keyed(quota);
    let words: Box<[AtomicU64]> = (0..Table::<Box<[AtomicU64]>>::layout(&config, None).words())
        .map(|_| AtomicU64::new(0))
        .collect();
    let single = Table::create(words, &config, None, (1, 2), 0).unwrap();
    let governor_ratio = alone_and_together(|| black_box(one.check_key(&7_u64).is_ok()));
    let shared_ratio = alone_and_together(|| {
        black_box(single.check((0, 0), 1, 0));
        true
    });

    println!("100,000 int keys, one band: bytes per key, ns per decision (median of {RUNS})");
    println!("  shared table (its whole file)     {shared_bytes:6.1} B {shared_ns:8.1} ns");
    println!("  in-process KeyedLimiter<Key>      {local_bytes:6.1} B {local_ns:8.1} ns");
    println!("  governor keyed (u64)              {governor_bytes:6.1} B {governor_ns:8.1} ns");
    println!("one key, two threads at once: their decisions per second against one thread's");
    println!("  governor keyed                    {governor_ratio:.2}x");
    println!("  shared table, one-key form        {shared_ratio:.2}x");
}
