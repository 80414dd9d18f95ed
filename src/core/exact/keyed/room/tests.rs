//! Room for new keys: the bound, sweeps across shards, and the refusal hint.

use super::*;
use crate::core::exact::keyed::{KeyedDecision, RestoreError, Stats};
use crate::core::exact::limiter::Decision;
use crate::core::exact::rate::BandSpec;
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
