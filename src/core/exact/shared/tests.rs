use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::LayoutError;
use super::{Table, THE_KEY};
use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
use crate::core::exact::config::{BandConfig, Config, Ratio};
use crate::core::exact::key::{encode_item, KeyRef};
use crate::core::exact::keyed::{KeyedDecision, KeyedLimiter, KeyedReservation};
use crate::core::exact::limiter::{Decision, Limiter, Reservation};

fn config(bands: &[(u64, u64, u64)]) -> Config {
    Config::new(
        bands
            .iter()
            .map(|&(rate, per, burst)| {
                BandConfig::new(
                    Ratio::new(rate, 1).unwrap(),
                    Some(burst),
                    Some(Ratio::new(per, 1).unwrap()),
                )
                .unwrap()
            })
            .collect(),
    )
    .unwrap()
}

fn words(config: &Config, max_keys: u64) -> Box<[AtomicU64]> {
    (0..Table::<Box<[AtomicU64]>>::layout(config, Some(max_keys)).words())
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn table(config: &Config, max_keys: u64) -> Table<Box<[AtomicU64]>> {
    Table::create(words(config, max_keys), config, Some(max_keys), (11, 22), 7).unwrap()
}

/// A small deterministic generator (xorshift64*), so a failing trace can be replayed.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }
}

#[test]
fn one_process_decides_exactly_as_the_in_process_table() {
    for (seed, bands) in [
        (1_u64, vec![(5, 1, 3)]),
        (2, vec![(2, 1, 4), (10, 60, 6)]),
        (3, vec![(1, 3600, 1)]),
    ] {
        let config = config(&bands);
        let shared = table(&config, 64);
        let local = KeyedLimiter::<String>::new(&config.specs(), 1000, 4);
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = 0_i64;
        let mut reserved = Vec::new();
        for step in 0..20_000 {
            // Mostly forwards, sometimes a caller behind the table's clock.
            now += i64::try_from(random.below(400_000_000)).unwrap() - 50_000_000;
            let key = random.below(12).to_string();
            let key = key.as_str();
            let digest = shared.digest(key.as_bytes());
            let n = random.below(5);
            match random.below(10) {
                0..=4 => {
                    let theirs = local.check(key, n, now);
                    assert_eq!(shared.check(digest, n, now), theirs, "step {step}");
                }
                5 => assert_eq!(
                    shared.peek(digest, n, now),
                    local.peek(key, n, now),
                    "step {step}"
                ),
                6 => {
                    shared.refund(digest, n, now);
                    local.refund(key, n, now);
                    // Settled at the same time, as much over as under.
                    let actual = random.below(2 * n + 1);
                    shared.settle_cost(digest, n, actual, now);
                    local.settle_cost(key, n, actual, now);
                }
                7 => {
                    let wait = u128::from(random.below(3_000_000_000));
                    let theirs = local.reserve(key, n, now, wait);
                    assert_eq!(shared.reserve(digest, n, now, wait), theirs, "step {step}");
                    if let KeyedReservation::Decided(Reservation::Taken { after_ns }) = theirs {
                        let at = i64::try_from(i128::from(now) + i128::try_from(after_ns).unwrap());
                        reserved.push((key.to_string(), n, at.unwrap()));
                    }
                }
                8 if !reserved.is_empty() => {
                    let index = usize::try_from(random.below(reserved.len() as u64)).unwrap();
                    let (key, n, at) = reserved.swap_remove(index);
                    shared.give_back(shared.digest(key.as_bytes()), n, now, at);
                    local.give_back(key.as_str(), n, now, at);
                }
                _ => assert_eq!(
                    shared.available(digest, now),
                    local.available(key, now),
                    "step {step}"
                ),
            }
        }
        let (ours, theirs) = (shared.stats(), local.stats());
        assert_eq!((ours.allowed, ours.denied), (theirs.allowed, theirs.denied));
        // The traces test something: both answers come up often.
        assert!(theirs.allowed > 2000 && theirs.denied > 2000, "{theirs:?}");
    }
}

/// Ten keys in a table of four (one bucket of four slots, so a new key's room is looked for
/// among every key, as in an in-process table of one shard): new keys are refused often, keys
/// are forgotten to make room, and every operation runs on both tables, which must answer each
/// call alike, a refusal's wait included. Both run the one decision (`home.rs`), each on its
/// own home.
#[test]
fn a_full_table_answers_alike_in_the_heap_and_in_the_file() {
    for (seed, bands) in [(5_u64, vec![(1, 1, 3)]), (6, vec![(2, 1, 4), (3, 10, 5)])] {
        let config = config(&bands);
        let file = table(&config, 4);
        let heap = KeyedLimiter::<String>::new(&config.specs(), 4, 1);
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = 0_i64;
        let mut booked = Vec::new();
        for step in 0..20_000 {
            // Mostly forwards, sometimes a caller behind the table's clock.
            now += i64::try_from(random.below(300_000_000)).unwrap() - 40_000_000;
            let key = random.below(10).to_string();
            let digest = file.digest(key.as_bytes());
            let n = random.below(4);
            match random.below(12) {
                0..=4 => assert_eq!(
                    file.check(digest, n, now),
                    heap.check(key.as_str(), n, now),
                    "step {step}"
                ),
                5 => assert_eq!(
                    file.peek(digest, n, now),
                    heap.peek(key.as_str(), n, now),
                    "step {step}"
                ),
                6 => {
                    file.refund(digest, n, now);
                    heap.refund(key.as_str(), n, now);
                }
                7 => {
                    let actual = random.below(2 * n + 2);
                    file.settle_cost(digest, n, actual, now);
                    heap.settle_cost(key.as_str(), n, actual, now);
                }
                8 => {
                    let wait = u128::from(random.below(4_000_000_000));
                    let answer = heap.reserve(key.as_str(), n, now, wait);
                    assert_eq!(file.reserve(digest, n, now, wait), answer, "step {step}");
                    if let KeyedReservation::Decided(Reservation::Taken { after_ns }) = answer {
                        let at = i128::from(now) + i128::try_from(after_ns).unwrap();
                        booked.push((key, n, i64::try_from(at).unwrap()));
                    }
                }
                9 if !booked.is_empty() => {
                    let index = usize::try_from(random.below(booked.len() as u64)).unwrap();
                    let (key, n, at) = booked.swap_remove(index);
                    file.give_back(file.digest(key.as_bytes()), n, now, at);
                    heap.give_back(key.as_str(), n, now, at);
                }
                10 => assert_eq!(
                    file.levels(digest, now),
                    heap.levels(key.as_str(), now),
                    "step {step}"
                ),
                _ => assert_eq!(
                    file.available(digest, now),
                    heap.available(key.as_str(), now),
                    "step {step}"
                ),
            }
        }
        let (ours, theirs) = (file.stats(), heap.stats());
        assert_eq!(
            (ours.allowed, ours.denied, ours.refused),
            (theirs.allowed, theirs.denied, theirs.refused)
        );
        // The trace tests something: every kind of answer comes up often.
        let often = |count: u64| count > 500;
        assert!(
            often(theirs.allowed) && often(theirs.denied) && often(theirs.refused),
            "{theirs:?}"
        );
    }
}

#[test]
fn a_full_table_refuses_new_keys_and_lets_nobody_off() {
    let config = config(&[(1, 3600, 1)]);
    let shared = table(&config, 16);
    let capacity = shared.shape().capacity();
    let mut stored = Vec::new();
    for key in 0..10_000_u64 {
        let digest = shared.digest(&key.to_le_bytes());
        match shared.check(digest, 1, 0).decision {
            KeyedDecision::Decided(Decision::Allowed) => stored.push(digest),
            KeyedDecision::Refused { retry_in } => assert_eq!(retry_in, 3_600_000_000_000),
            KeyedDecision::Decided(other) => panic!("{other:?}"),
        }
    }
    // Two choices of eight: every slot taken before keys are refused for good.
    assert_eq!(stored.len(), capacity);
    for digest in stored {
        assert_eq!(
            shared.check(digest, 1, 1).decision,
            KeyedDecision::Decided(Decision::Wait(3_600_000_000_000 - 1))
        );
    }
    // An hour on, every key is full again: forgotten as new keys need room.
    let digest = shared.digest(b"newcomer");
    assert_eq!(
        shared.check(digest, 1, 3_600_000_000_000).decision,
        KeyedDecision::Decided(Decision::Allowed)
    );
}

#[test]
fn threads_take_exactly_the_burst_and_what_accrues() {
    let config = config(&[(1000, 1, 50)]);
    let shared = table(&config, 8);
    let digest = shared.digest(b"one");
    let clock = AtomicU64::new(0);
    let allowed: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut allowed = 0;
                    for _ in 0..20_000 {
                        // Each call a microsecond on: 1000/s accrues 1 token per millisecond.
                        let now = i64::try_from(clock.fetch_add(1000, Ordering::Relaxed)).unwrap();
                        if shared.check(digest, 1, now).decision
                            == KeyedDecision::Decided(Decision::Allowed)
                        {
                            allowed += 1;
                        }
                    }
                    allowed
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .sum()
    });
    let elapsed_ms = clock.load(Ordering::Relaxed) / 1_000_000;
    // Calls at times handed out in order, decided in another order by up to a few
    // microseconds: the table's clock decides each at the latest time seen.
    assert!(allowed <= 50 + elapsed_ms, "{allowed} > 50 + {elapsed_ms}");
    assert!(
        allowed + 4 >= 50 + elapsed_ms - 1,
        "{allowed} far below the limit"
    );
}

#[test]
fn a_lock_left_by_a_dead_holder_is_taken_over_and_its_slot_is_whole() {
    let config = config(&[(1, 1, 5)]);
    let shared = table(&config, 1);
    let digest = shared.digest(b"k");
    assert_eq!(shared.check(digest, 2, 0).remaining, 3);
    // A holder dies holding the bucket's lock, halfway through writing the slot: its spare
    // copy holds garbage, its state word was never stored. (A thread that ends holding the
    // lock is, to the kernel, a holder that died.)
    std::thread::scope(|scope| {
        scope
            .spawn(|| std::mem::forget(shared.lock_bucket(0)))
            .join()
            .unwrap();
    });
    let slot = shared.shape().slot(0, 0);
    // One band of narrow units: state, digest (2), copy 0 (2), copy 1 (2), the spare.
    assert_eq!(shared.shape().slot_words(), 7);
    for word in &shared.words[slot + 5..slot + 7] {
        word.store(u64::MAX, Ordering::Relaxed);
    }
    assert!(shared.lock_bucket(0).taken_over());
    let answer = shared.check(digest, 1, 0);
    assert_eq!(answer.decision, KeyedDecision::Decided(Decision::Allowed));
    assert_eq!(answer.remaining, 2);
}

#[test]
fn a_table_full_of_keys_in_debt_to_the_clock_s_end_tells_a_new_key_that_wait() {
    // Every slot holds a key whose debt is held until the clock's last nanosecond: a new key
    // is told so, by a take and by a peek alike, and not to come back in a nanosecond.
    let config = config(&[(1, 3600, 1)]);
    let shared = table(&config, 16);
    let mut key = 0_u64;
    while shared.len() < shared.shape().capacity() {
        shared.settle_cost(shared.digest(&key.to_le_bytes()), 0, u64::MAX, 0);
        key += 1;
    }
    let newcomer = shared.digest(b"newcomer");
    let wait = KeyedDecision::Refused {
        retry_in: i64::MAX.unsigned_abs().into(),
    };
    assert_eq!(shared.check(newcomer, 1, 0).decision, wait);
    assert_eq!(shared.peek(newcomer, 1, 0).decision, wait);
}

#[test]
fn a_table_of_another_configuration_or_size_is_refused() {
    let ours = config(&[(10, 1, 20)]);
    let theirs = config(&[(10, 1, 21)]);
    let words = words(&ours, 10);
    let made = Table::create(words, &ours, Some(10), (1, 2), 3).unwrap();
    let words = made.words;
    assert!(matches!(
        Table::open(&words[..], &theirs, Some(10)).err(),
        Some(LayoutError::Other)
    ));
    assert!(matches!(
        Table::open(&words[..], &ours, Some(11)).err(),
        Some(LayoutError::Other)
    ));
    assert!(Table::open(&words[..], &ours, Some(10)).is_ok());
}

#[test]
fn a_band_whose_capacity_needs_more_than_64_bits_is_stored_wide_and_exact() {
    // 2^40 tokens a second in units of a nanosecond's share: a burst of 2^40 tokens is about
    // 2^70 units, beyond one word.
    let config = config(&[(1 << 40, 1, 1 << 40)]);
    let shared = table(&config, 8);
    assert_eq!(shared.shape().band_words, 3);
    let local = KeyedLimiter::<String>::new(&config.specs(), 8, 1);
    let digest = shared.digest(b"k");
    for (n, now) in [
        (1 << 39, 0),
        (1 << 39, 0),
        (1, 0),
        (5, 10),
        (1 << 20, 1 << 30),
    ] {
        assert_eq!(shared.check(digest, n, now), local.check("k", n, now));
    }
}

#[test]
fn re_anchoring_keeps_what_each_key_was_owed() {
    let config = config(&[(1, 1, 5)]);
    let shared = table(&config, 4);
    let digest = shared.digest(b"k");
    shared.check(digest, 5, 1_000_000_000_000);
    shared.check(shared.digest(b"other"), 1, 1_000_000_000_000);
    // The clock restarted at 0: the key still needs its five seconds, counted from now.
    let moved = shared
        .moved_into(words(&config, 4), -1_000_000_000_000, 8)
        .unwrap();
    assert_eq!(moved.boot(), 8);
    assert_eq!(moved.latest(), Some(0));
    assert_eq!(moved.available(digest, 2_000_000_000), 2);
    assert_eq!(moved.stats(), shared.stats());
    assert_eq!(moved.len(), 2);
    // The original is untouched: a copy cut short leaves it as it was.
    assert_eq!(shared.boot(), 7);
    assert_eq!(shared.available(digest, 1_000_000_000_000), 0);
}

#[test]
fn the_one_key_form_decides_exactly_as_a_limiter_even_when_the_clock_steps_back() {
    for (seed, bands) in [(7_u64, vec![(1, 1, 1)]), (8, vec![(3, 1, 5), (20, 60, 9)])] {
        let config = config(&bands);
        let words: Box<[AtomicU64]> = (0..Table::<Box<[AtomicU64]>>::layout(&config, None).words())
            .map(|_| AtomicU64::new(0))
            .collect();
        let shared = Table::create(words, &config, None, (1, 2), 0).unwrap();
        let mut limiter = Limiter::new(&config.specs(), None, None);
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut now = 5_000_000_000_i64;
        let mut reserved = Vec::new();
        for step in 0..20_000 {
            now += i64::try_from(random.below(700_000_000)).unwrap() - 200_000_000;
            limiter.on_the_clock(now).unwrap();
            let n = random.below(6);
            match random.below(7) {
                0..=2 => {
                    let theirs = limiter.acquire(n, now);
                    let ours = shared.check(THE_KEY, n, now);
                    assert_eq!(ours.decision, KeyedDecision::Decided(theirs), "step {step}");
                    assert_eq!(ours.remaining, limiter.available(), "step {step}");
                }
                3 => assert_eq!(
                    shared.peek(THE_KEY, n, now).decision,
                    KeyedDecision::Decided(limiter.peek(n, now)),
                    "step {step}"
                ),
                4 => {
                    shared.refund(THE_KEY, n, now);
                    limiter.refund(n, now);
                    let actual = random.below(2 * n + 1);
                    shared.settle_cost(THE_KEY, n, actual, now);
                    limiter.settle_cost(n, actual, now);
                }
                5 => {
                    let wait = u128::from(random.below(2_000_000_000));
                    let theirs = limiter.reserve(n, now, wait);
                    let ours = shared.reserve(THE_KEY, n, now, wait);
                    assert_eq!(ours, KeyedReservation::Decided(theirs), "step {step}");
                    if let Reservation::Taken { after_ns } = theirs {
                        let at = i128::from(now) + i128::try_from(after_ns).unwrap();
                        reserved.push((n, i64::try_from(at).unwrap()));
                    }
                }
                _ => {
                    if let Some((n, at)) = reserved.pop() {
                        shared.give_back(THE_KEY, n, now, at);
                        limiter.give_back(n, now, at);
                    }
                    assert_eq!(shared.available(THE_KEY, now), limiter.available_at(now));
                }
            }
        }
    }
}

#[test]
fn a_key_is_digested_from_its_encoding_and_a_time_years_away_is_off_the_clock() {
    let config = config(&[(1, 1, 2)]);
    let table = table(&config, 8);
    // A key's digest is that of its canonical encoding, so "k" and b"k" are two keys, and a
    // tuple of one item is not the item.
    let mut encoded = Vec::new();
    encode_item(KeyRef::Str("k"), &mut encoded);
    assert_eq!(table.digest_of(KeyRef::Str("k")), table.digest(&encoded));
    assert_ne!(
        table.digest_of(KeyRef::Str("k")),
        table.digest_of(KeyRef::Bytes(b"k"))
    );
    assert_ne!(
        table.digest_of(KeyRef::Tuple(&encoded)),
        table.digest(&encoded)
    );
    // No clock before the first call; after it, a time more than ten years away is off it.
    assert_eq!(table.off_the_clock(i64::MAX), None);
    table.acquire(table.digest_of(KeyRef::Int(1)), 1, 0);
    assert_eq!(table.off_the_clock(MAX_CLOCK_GAP_NS), None);
    assert_eq!(
        table.off_the_clock(-MAX_CLOCK_GAP_NS - 1),
        Some(-i128::from(MAX_CLOCK_GAP_NS) - 1)
    );
    // Two tables' counts summed, as a limiter of two plans reports them.
    let other = super::Table::create(words(&config, 8), &config, Some(8), (3, 4), 7).unwrap();
    other.acquire(other.digest_of(KeyRef::Int(1)), 3, 0);
    let mut sum = table.stats();
    sum.add(&other.stats());
    assert_eq!((sum.allowed, sum.denied), (1, 1));
}
