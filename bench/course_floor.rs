//! What the course's bucket calls cost in Rust alone, and what the lock around them costs.
//!
//! Run with `cargo bench --bench course_floor`. `try_consume` and `offer` from the core, on
//! `IntOrFloat` ints (the numbers `bench_core.py` passes: `now` advancing by one each call, so
//! the refill or leak runs every time), beside an uncontended `std::sync::Mutex` lock and
//! unlock, which every shared bucket takes once per call (a free-threaded Python has no other
//! lock to lean on), and beside one atomic read-modify-write. Medians of nine runs, nanoseconds
//! per call; read them against the per-call times `bench_core.py` prints.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use protocol_in_code_qos::core::int_or_float::IntOrFloat::{self, Int};
use protocol_in_code_qos::core::leaky_bucket::{offer, LeakyBucket};
use protocol_in_code_qos::core::token_bucket::{try_consume, TokenBucket};

const CALLS: i64 = 2_000_000;
const RUNS: usize = 9;

fn median_ns(mut run: impl FnMut() -> u64) -> f64 {
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            black_box(run());
            #[allow(clippy::cast_precision_loss)] // a count of calls, far below 2^52
            let calls = CALLS as f64;
            start.elapsed().as_secs_f64() * 1e9 / calls
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[RUNS / 2]
}

fn main() {
    let one: IntOrFloat = Int(1);
    let consume = median_ns(|| {
        let mut bucket = TokenBucket {
            capacity: Int(1_000_000_000),
            tokens: Int(1_000_000_000),
            rate_per_sec: Int(1),
            last_refill_at: Int(0),
        };
        (1..=CALLS).fold(0, |allowed, now| {
            let result = try_consume(&mut bucket, black_box(&one), &Int(now));
            allowed + u64::from(result.is_ok())
        })
    });
    let offered = median_ns(|| {
        let mut bucket = LeakyBucket {
            capacity: Int(10),
            level: Int(0),
            leak_per_sec: Int(1),
            last_leak_at: Int(0),
        };
        (1..=CALLS).fold(0, |accepted, now| {
            let result = offer(&mut bucket, black_box(&one), &Int(now));
            accepted + u64::from(result.is_ok())
        })
    });
    let mutex = Mutex::new(0_u64);
    let locked = median_ns(|| {
        for call in 0..CALLS {
            let mut count = mutex
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *count = count.wrapping_add(black_box(call).unsigned_abs());
        }
        *mutex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    });
    let atomic = AtomicU64::new(0);
    let added = median_ns(|| {
        for call in 0..CALLS {
            atomic.fetch_add(black_box(call).unsigned_abs(), Ordering::SeqCst);
        }
        atomic.load(Ordering::Relaxed)
    });

    println!("ns per call, medians of {RUNS} runs of {CALLS} calls");
    println!("core try_consume, ints                 {consume:6.1}");
    println!("core offer, ints                       {offered:6.1}");
    println!("Mutex lock and unlock, uncontended     {locked:6.1}");
    println!("one atomic read-modify-write           {added:6.1}");
}
