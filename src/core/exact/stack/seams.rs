//! Where a stacked request meets the rest of a keyed table: the room the request's own keys
//! need, when the table has too little for all of them.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use super::*;
use crate::core::exact::keyed::Stats;
use crate::core::exact::rate::{BandSpec, Rate};

const SECOND: i64 = 1_000_000_000;

/// A shared table's words (no shared table here: the parts' type names one).
type Words = Box<[AtomicU64]>;

fn band(per_second: u64, burst: u64) -> BandSpec {
    BandSpec::new(Rate::new(per_second, 1).unwrap(), burst).unwrap()
}

fn one(limiter: &Mutex<Limiter>, n: u64, now_ns: i64) -> Part<'_, String, str, Words> {
    Part {
        limit: Limit::One(limiter),
        key: None,
        n,
        now_ns,
    }
}

fn keyed<'a>(
    table: &'a KeyedLimiter<String>,
    key: &'a str,
    n: u64,
    now_ns: i64,
) -> Part<'a, String, str, Words> {
    Part {
        limit: Limit::Keyed(table),
        key: Some(key),
        n,
        now_ns,
    }
}

fn refused(stacked: &Stacked) -> bool {
    matches!(
        combined(&stacked.answers).unwrap().decision,
        KeyedDecision::Refused { .. }
    )
}

/// Two new keys of one table with room for one: the request cannot be taken whole, so it is
/// refused, and nothing is taken anywhere. (The room the first key's place holder held was
/// swept away for the second key as if it were a fresh key of someone else's.)
#[test]
fn two_new_keys_in_a_table_with_room_for_one_are_refused_taking_nothing() {
    let everyone = Mutex::new(Limiter::new(&[band(1, 10)], None, Some(0)));
    let table = KeyedLimiter::new(&[band(1, 2)], 1, 1);
    let parts = [
        one(&everyone, 1, 0),
        keyed(&table, "a", 1, 0),
        keyed(&table, "b", 1, 0),
    ];
    let stacked = decide_together(&parts, Then::Take).unwrap();
    assert!(!stacked.taken, "{stacked:?}");
    assert!(refused(&stacked), "{stacked:?}");
    assert_eq!(everyone.lock().unwrap().available_at(0), 10);
    assert_eq!(table.len(), 0);
    assert_eq!(table.available("a", 0), 2);
}

/// The same in a table of several shards: the request holds every shard, and its first key's
/// place must not be swept from one shard to make room for its second key in another.
#[test]
fn new_keys_in_several_shards_keep_the_places_they_were_given() {
    let everyone = Mutex::new(Limiter::new(&[band(1, 10)], None, Some(0)));
    let table = KeyedLimiter::new(&[band(1, 2)], 2, 2);
    // Keys in both shards, one more than the table holds.
    let mut by_shard: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    for i in 0..64 {
        let key = format!("k{i}");
        by_shard[table.shard_for(key.as_str())].push(key);
    }
    let keys = [&by_shard[0][0], &by_shard[1][0], &by_shard[0][1]];
    let parts = [
        one(&everyone, 1, 0),
        keyed(&table, keys[0], 1, 0),
        keyed(&table, keys[1], 1, 0),
        keyed(&table, keys[2], 1, 0),
    ];
    let stacked = decide_together(&parts, Then::Take).unwrap();
    assert!(!stacked.taken && refused(&stacked), "{stacked:?}");
    assert_eq!(everyone.lock().unwrap().available_at(0), 10);
    assert_eq!(table.len(), 0);
}

/// A key the table holds, full again (so it could be forgotten), and a new key, in a table
/// that is full: a single call for either would leave no room for the other, so the request
/// is refused, whichever comes first; the first key must not be forgotten to make the second
/// key's room and then found missing when it is taken.
#[test]
fn a_refilled_key_of_the_request_is_not_forgotten_for_its_other_key() {
    for order in [["a", "b"], ["b", "a"]] {
        let everyone = Mutex::new(Limiter::new(&[band(1, 10)], None, Some(0)));
        let table = KeyedLimiter::new(&[band(1, 2)], 1, 1);
        assert_eq!(
            table.acquire("a", 1, 0),
            KeyedDecision::Decided(Decision::Allowed)
        );
        let now = 5 * SECOND; // "a" is full again: indistinguishable from a fresh key
        let parts = [
            one(&everyone, 1, now),
            keyed(&table, order[0], 1, now),
            keyed(&table, order[1], 1, now),
        ];
        let stacked = decide_together(&parts, Then::Take).unwrap();
        assert!(
            !stacked.taken && refused(&stacked),
            "{order:?}: {stacked:?}"
        );
        assert_eq!(everyone.lock().unwrap().available_at(now), 10);
        assert_eq!(table.available("a", now), 2);
        assert_eq!(table.available("b", now), 2);
        assert!(table.len() <= 1);
    }
}

/// The refusal is counted as a single call's would be, and the place holder is let go of:
/// the table has room for the next request that fits.
#[test]
fn after_the_refusal_the_table_has_its_room_back() {
    let table = KeyedLimiter::new(&[band(1, 2)], 1, 1);
    let parts = [keyed(&table, "a", 1, 0), keyed(&table, "b", 1, 0)];
    let stacked = decide_together(&parts, Then::Take).unwrap();
    assert!(!stacked.taken);
    let Stats {
        allowed, refused, ..
    } = table.stats();
    assert_eq!((allowed, refused), (0, 1));
    assert_eq!(table.len(), 0);
    let alone = [keyed(&table, "b", 1, 0)];
    assert!(decide_together(&alone, Then::Take).unwrap().taken);
    assert_eq!(table.len(), 1);
}

/// xorshift64*, so that a failing run can be replayed from its seed.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Random requests with several keys of small tables, which fill: whatever the room, a request
/// is taken whole (every part allowed, every bucket `n` lower) or not at all (every key and
/// limiter holds what it held), and no table ever holds more keys than it may.
#[test]
fn keys_of_one_request_share_the_room_and_the_request_is_all_or_nothing() {
    const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
    for seed in 1..=60u64 {
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let everyone = Mutex::new(Limiter::new(&[band(5, 8)], None, Some(0)));
        let tables = [
            KeyedLimiter::new(&[band(1, 2)], 2, 2),
            KeyedLimiter::new(&[band(1, 2), band(3, 4)], 3, 1),
        ];
        let mut now = 0;
        for step in 0..200 {
            now += i64::try_from(random.below(3)).unwrap() * SECOND / 2;
            let specs: Vec<(usize, &str, u64)> = (0..=random.below(4))
                .map(|_| {
                    let limit = usize::try_from(random.below(3)).unwrap();
                    let key = KEYS[usize::try_from(random.below(5)).unwrap()];
                    (limit, key, random.below(3))
                })
                .collect();
            let parts: Vec<Part<'_, String, str, Words>> = specs
                .iter()
                .map(|&(limit, key, n)| match limit {
                    0 => one(&everyone, n, now),
                    _ => keyed(&tables[limit - 1], key, n, now),
                })
                .collect();
            let levels = || {
                let ones = everyone.lock().unwrap().available_at(now);
                let keyed: Vec<u128> = tables
                    .iter()
                    .flat_map(|table| KEYS.iter().map(|key| table.available(*key, now)))
                    .collect();
                (ones, keyed)
            };
            let before = levels();
            let peek = random.below(6) == 0;
            let stacked =
                decide_together(&parts, if peek { Then::Peek } else { Then::Take }).unwrap();
            let after = levels();
            let context = format!("seed {seed}, step {step}: {specs:?}, {stacked:?}");
            let all_allowed = stacked
                .answers
                .iter()
                .all(|answer| answer.decision == KeyedDecision::Decided(Decision::Allowed));
            assert_eq!(stacked.taken, all_allowed && !peek, "{context}");
            if stacked.taken {
                // Each bucket is `n` lower: the sum of its parts' tokens.
                let mut want = before.clone();
                for &(limit, key, n) in &specs {
                    let n = u128::from(n);
                    if limit == 0 {
                        want.0 -= n;
                    } else {
                        let place = (limit - 1) * KEYS.len();
                        let key = KEYS.iter().position(|k| *k == key).unwrap();
                        want.1[place + key] -= n;
                    }
                }
                assert_eq!(after, want, "{context}");
            } else {
                assert_eq!(after, before, "{context}");
            }
            for table in &tables {
                assert!(table.len() <= table.max_keys(), "{context}");
            }
        }
    }
}

/// A shared table of at most `max_keys` keys, one band of 1 token a second and a burst of 2.
fn shared_table(max_keys: u64) -> Table<Words> {
    use crate::core::exact::config::{BandConfig, Config, Ratio};
    let band = BandConfig::new(Ratio::new(1, 1).unwrap(), Some(2), None).unwrap();
    let config = Config::new(vec![band]).unwrap();
    let words = (0..Table::<Words>::layout(&config, Some(max_keys)).words())
        .map(|_| AtomicU64::new(0))
        .collect();
    Table::create(words, &config, Some(max_keys), (3, 4), 7).unwrap()
}

#[test]
fn a_shared_tables_keys_of_one_request_share_their_buckets_room_all_or_nothing() {
    let table = shared_table(1);
    let global = Mutex::new(Limiter::new(&[band(10, 10)], None, None));
    // Fill the table's one place with a key that is not fresh: it has spent a token.
    let old = table.digest(b"old");
    assert_eq!(
        table.check(old, 1, 0).decision,
        KeyedDecision::Decided(Decision::Allowed)
    );
    assert!(matches!(
        table.check(table.digest(b"other"), 1, 0).decision,
        KeyedDecision::Refused { .. }
    ));
    let part = |key: &str, now_ns| Part {
        limit: Limit::Shared(&table, table.digest(key.as_bytes())),
        key: None,
        n: 1,
        now_ns,
    };
    // No room now; and once the old key has refilled (1 s), room for one new key, not two:
    // the second never takes the first's place, and nothing is taken.
    for now in [0, 2 * SECOND] {
        let parts = [one(&global, 1, now), part("new-a", now), part("new-b", now)];
        let stacked = decide_together(&parts, Then::Take).unwrap();
        assert!(!stacked.taken, "at {now}: {stacked:?}");
        assert!(matches!(
            stacked.answers[2].decision,
            KeyedDecision::Refused { .. }
        ));
        assert_eq!(
            global.lock().unwrap().available_at(now),
            10,
            "nothing taken"
        );
        assert!(
            !table.contains(table.digest(b"new-a")),
            "the held place is let go"
        );
    }
    // One new key fits.
    let parts = [one(&global, 1, 2 * SECOND), part("new-a", 2 * SECOND)];
    assert!(decide_together(&parts, Then::Take).unwrap().taken);
    assert!(table.contains(table.digest(b"new-a")));
}
