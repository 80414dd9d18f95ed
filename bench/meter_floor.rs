//! What marking a whole trace costs in Rust alone: the floor under `mark_many`.
//!
//! Run with `cargo bench --bench meter_floor`. The trace is the one `bench_meter.py` marks,
//! computed by the same generator (below, and `trace()` there): 100,000 packets of 64, 576 or
//! 1500 bytes, at exponential gaps of 20 us on average, so about 36 MB/s offered to meters
//! of 10 MB/s committed (and 20 MB/s peak or excess): every colour is common, and a packet's
//! colour depends on the levels the packets before it left, which random sizes keep the
//! branch predictor from guessing. Each meter marks the trace fresh with the core's
//! `mark_trace` (a working copy, the time order checked, one colour per packet), with no
//! Python anywhere. Medians of nine runs, nanoseconds per packet; read them against the
//! `mark_many` rows `bench_meter.py` prints. The colour counts printed beside them must equal
//! that script's: they show both marked the same packets the same way.

use std::hint::black_box;
use std::time::Instant;

use protocol_in_code_qos::core::meter::bucket::ByteRate;
use protocol_in_code_qos::core::meter::rfc4115::Rfc4115;
use protocol_in_code_qos::core::meter::srtcm::SrTcm;
use protocol_in_code_qos::core::meter::trace::mark_trace;
use protocol_in_code_qos::core::meter::trtcm::TrTcm;
use protocol_in_code_qos::core::meter::{Color, Meter};

const PACKETS: usize = 100_000;
const RUNS: usize = 9;

/// The trace generator `bench_meter.py` also runs: a 64-bit linear congruential generator
/// (Knuth's MMIX constants) from seed 7. Each packet takes two steps: the first picks its size
/// from the top bits, the second its gap, `-ln(u) * 20,000` ns for `u` in (0, 1] from the top
/// 53 bits, truncated to whole nanoseconds. (Python's `math.log` and Rust's `ln` both call the
/// C library's `log`, so both compute the same gaps.)
fn trace(packets: usize) -> (Vec<u64>, Vec<i64>) {
    let mut state: u64 = 7;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state
    };
    let mut now = 0;
    let mut sizes = Vec::with_capacity(packets);
    let mut times = Vec::with_capacity(packets);
    for _ in 0..packets {
        sizes.push([64, 576, 1500][usize::try_from((next() >> 33) % 3).expect("below 3")]);
        #[allow(clippy::cast_precision_loss)] // 53 bits: exact in an f64
        let u = ((next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        #[allow(clippy::cast_possible_truncation)] // a gap of at most about 735 us
        let gap = (-u.ln() * 20_000.0) as i64;
        now += gap;
        times.push(now);
    }
    (sizes, times)
}

fn rate(bytes_per_second: u64) -> ByteRate {
    ByteRate::new(bytes_per_second, 1).expect("a valid rate")
}

/// Median nanoseconds per packet of marking the trace on a fresh copy of `meter`, with the
/// colour counts (green, yellow, red) of one run.
fn floor<M: Meter + Clone>(meter: &M, sizes: &[u64], times: &[i64]) -> (f64, [usize; 3]) {
    let mut counts = [0; 3];
    let mut samples: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut fresh = meter.clone();
            let start = Instant::now();
            let colors = mark_trace(&mut fresh, black_box(sizes), black_box(times), None)
                .expect("a valid trace");
            let ns = start.elapsed().as_secs_f64() * 1e9;
            counts = [Color::Green, Color::Yellow, Color::Red]
                .map(|color| colors.iter().filter(|&&c| c == color).count());
            black_box(colors);
            #[allow(clippy::cast_precision_loss)] // a packet count
            let per_packet = ns / sizes.len() as f64;
            per_packet
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (samples[RUNS / 2], counts)
}

fn main() {
    let (sizes, times) = trace(PACKETS);
    let srtcm = SrTcm::new(rate(10_000_000), 30_000, 60_000, None).expect("a meter");
    let trtcm =
        TrTcm::new(rate(10_000_000), 30_000, rate(20_000_000), 60_000, None).expect("a meter");
    let rfc4115 =
        Rfc4115::new(rate(10_000_000), 30_000, rate(10_000_000), 60_000, None).expect("a meter");
    let rows = [
        ("srTCM", floor(&srtcm, &sizes, &times)),
        ("trTCM", floor(&trtcm, &sizes, &times)),
        ("RFC 4115", floor(&rfc4115, &sizes, &times)),
    ];

    println!(
        "ns per packet, medians of {RUNS} runs of {PACKETS} packets ({} bytes over {} ns)",
        sizes.iter().sum::<u64>(),
        times.last().copied().unwrap_or(0)
    );
    for (name, (ns, [green, yellow, red])) in rows {
        println!("{name:8} mark_trace {ns:6.1}   green {green} yellow {yellow} red {red}");
    }
}
