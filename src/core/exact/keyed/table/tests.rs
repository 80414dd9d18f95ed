//! The table's decisions, its bound, forgetting, counts and clock.

use super::*;
use crate::core::exact::keyed::{Stats, MAX_CLOCK_GAP_NS};
use crate::core::exact::limiter::Decision;
use crate::core::exact::rate::BandSpec;
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
