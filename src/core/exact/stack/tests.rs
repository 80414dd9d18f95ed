//! Stacked decisions against a model made of single calls: ask every bucket (`peek` for the sum
//! of its parts), then take every bucket (`check`) only if all allowed.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::*;
use crate::core::exact::config::{BandConfig, Config, Ratio};
use crate::core::exact::keyed::Stats;
use crate::core::exact::rate::{BandSpec, Rate};
use crate::core::exact::shared::THE_KEY;

/// A shared table in memory, as a file's mapping would hold it.
type Words = Box<[AtomicU64]>;

const SECOND: i64 = 1_000_000_000;
const ALLOWED: KeyedDecision = KeyedDecision::Decided(Decision::Allowed);

fn band(per_second: u64, burst: u64) -> BandSpec {
    BandSpec::new(Rate::new(per_second, 1).unwrap(), burst).unwrap()
}

/// A world of limits: two one-limit limiters, two keyed tables (the second small, so that it
/// fills), and two shared tables (one limit, and one per key), made the same way twice, once
/// for the stack and once for the model.
struct World {
    ones: Vec<Mutex<Limiter>>,
    tables: Vec<KeyedLimiter<String>>,
    shared: Vec<Table<Words>>,
}

fn shared(bands: &[(u64, u64)], max_keys: Option<u64>, seed: (u64, u64)) -> Table<Words> {
    let bands = bands
        .iter()
        .map(|&(rate, burst)| {
            BandConfig::new(Ratio::new(rate, 1).unwrap(), Some(burst), None).unwrap()
        })
        .collect();
    let config = Config::new(bands).unwrap();
    let words = (0..Table::<Words>::layout(&config, max_keys).words())
        .map(|_| AtomicU64::new(0))
        .collect();
    Table::create(words, &config, max_keys, seed, 7).unwrap()
}

impl World {
    fn new() -> Self {
        Self {
            ones: vec![
                Mutex::new(Limiter::new(&[band(5, 5)], None, None)),
                Mutex::new(Limiter::new(&[band(1, 3), band(10, 20)], None, None)),
            ],
            tables: vec![
                KeyedLimiter::new(&[band(2, 4)], 100, 4),
                KeyedLimiter::new(&[band(1, 2), band(3, 5)], 3, 2),
            ],
            shared: vec![
                shared(&[(3, 4)], None, (5, 6)),
                shared(&[(1, 2), (4, 6)], Some(1), (1, 2)),
            ],
        }
    }

    /// A key's digest in shared table `index` (the one-key table's is its one key).
    fn digest(&self, index: usize, key: &str) -> Digest {
        if index == 0 {
            THE_KEY
        } else {
            self.shared[index].digest(key.as_bytes())
        }
    }
}

/// A part by numbers: which limit (0-1 one-limit, 2-3 tables, 4-5 shared tables), which key,
/// how many tokens.
#[derive(Clone, Copy, Debug)]
struct Spec {
    limit: usize,
    key: usize,
    n: u64,
}

const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

fn parts<'a>(world: &'a World, specs: &[Spec], now: i64) -> Vec<Part<'a, String, str, Words>> {
    specs
        .iter()
        .map(|spec| {
            let (limit, key) = match spec.limit {
                0 | 1 => (Limit::One(&world.ones[spec.limit]), None),
                2 | 3 => (
                    Limit::Keyed(&world.tables[spec.limit - 2]),
                    Some(KEYS[spec.key]),
                ),
                _ => {
                    let index = spec.limit - 4;
                    let digest = world.digest(index, KEYS[spec.key]);
                    (Limit::Shared(&world.shared[index], digest), None)
                }
            };
            Part {
                limit,
                key,
                n: spec.n,
                now_ns: now,
            }
        })
        .collect()
}

/// The model: the same request as single calls, on the model's world (only asked, with
/// `peek`).
fn model(world: &World, specs: &[Spec], now: i64, peek: bool) -> Stacked {
    // Each part's bucket's total (the one-key limits have one bucket each).
    let keyed = |limit: usize| matches!(limit, 2 | 3 | 5);
    let total = |s: &Spec| -> u64 {
        specs
            .iter()
            .filter(|o| o.limit == s.limit && (!keyed(s.limit) || o.key == s.key))
            .map(|o| o.n)
            .sum()
    };
    let ask = |s: &Spec| -> Answer {
        if s.limit < 2 {
            let mut limiter = world.ones[s.limit].lock().unwrap();
            limiter.on_the_clock(now).unwrap();
            let decision = limiter.peek(total(s), now);
            Answer {
                decision: KeyedDecision::Decided(decision),
                remaining: limiter.available_at(now),
            }
        } else if s.limit < 4 {
            world.tables[s.limit - 2].peek(KEYS[s.key], total(s), now)
        } else {
            let index = s.limit - 4;
            world.shared[index].peek(world.digest(index, KEYS[s.key]), total(s), now)
        }
    };
    let asked: Vec<Answer> = specs.iter().map(ask).collect();
    let taken = !peek && asked.iter().all(|a| a.decision == ALLOWED);
    if !taken {
        return Stacked {
            taken,
            answers: asked,
        };
    }
    // Take each bucket once, then read every part's answer from its bucket.
    let mut done: Vec<(usize, usize, Answer)> = Vec::new();
    let mut answers = Vec::new();
    for s in specs {
        let key = if keyed(s.limit) { s.key } else { 0 };
        if let Some(&(_, _, answer)) = done.iter().find(|d| d.0 == s.limit && d.1 == key) {
            answers.push(answer);
            continue;
        }
        let answer = if s.limit < 2 {
            let mut limiter = world.ones[s.limit].lock().unwrap();
            let decision = limiter.acquire(total(s), now);
            Answer {
                decision: KeyedDecision::Decided(decision),
                remaining: limiter.available(),
            }
        } else if s.limit < 4 {
            world.tables[s.limit - 2].check(KEYS[s.key], total(s), now)
        } else {
            let index = s.limit - 4;
            world.shared[index].check(world.digest(index, KEYS[s.key]), total(s), now)
        };
        done.push((s.limit, key, answer));
        answers.push(answer);
    }
    Stacked { taken, answers }
}

/// xorshift64*, so that a failing run can be replayed from its seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn every_stack_answers_as_the_model_of_single_calls() {
    for seed in 1..=40u64 {
        let mut random = Random(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let (stacked, modelled) = (World::new(), World::new());
        let mut now = 0;
        for step in 0..300 {
            now += i64::try_from(random.below(400_000_000)).unwrap();
            let mut specs: Vec<Spec> = (0..=random.below(4))
                .map(|_| Spec {
                    limit: usize::try_from(random.below(6)).unwrap(),
                    key: usize::try_from(random.below(6)).unwrap(),
                    n: random.below(4),
                })
                .collect();
            // One key of the small table per request: the model asks each key alone, so it
            // cannot say how a request's own keys share the table's room (`seams.rs` does).
            // The same for the shared table's keys, whose room is their buckets'.
            for small in [3, 5] {
                if let Some(first) = specs.iter().find(|s| s.limit == small).map(|s| s.key) {
                    for spec in specs.iter_mut().filter(|s| s.limit == small) {
                        spec.key = first;
                    }
                }
            }
            let peek = random.below(5) == 0;
            let got = decide_together(
                &parts(&stacked, &specs, now),
                if peek { Then::Peek } else { Then::Take },
            )
            .unwrap();
            let want = model(&modelled, &specs, now, peek);
            assert_eq!(got, want, "seed {seed}, step {step}: {specs:?}");
        }
        // The state after: every limit and key holds the same.
        for (a, b) in stacked.ones.iter().zip(&modelled.ones) {
            assert_eq!(
                a.lock().unwrap().bands(),
                b.lock().unwrap().bands(),
                "seed {seed}"
            );
        }
        for (index, (a, b)) in stacked.shared.iter().zip(&modelled.shared).enumerate() {
            for key in KEYS {
                let (mine, its) = (stacked.digest(index, key), modelled.digest(index, key));
                assert_eq!(
                    a.levels(mine, now),
                    b.levels(its, now),
                    "seed {seed}, key {key}"
                );
            }
            // A refused stack counts its refusal, where the model only peeked: the takings
            // are the same.
            assert_eq!(a.stats().allowed, b.stats().allowed, "seed {seed}");
        }
        for (a, b) in stacked.tables.iter().zip(&modelled.tables) {
            for key in KEYS {
                assert_eq!(
                    a.levels(key, now),
                    b.levels(key, now),
                    "seed {seed}, key {key}"
                );
            }
            // How many keys each remembers may differ: a key that is fresh again is forgotten
            // when a single call touches it, and kept by a stack's question. Forgetting such a
            // key changes no answer, which the answers above show.
        }
    }
}

#[test]
fn a_refusal_takes_nothing_anywhere_and_names_every_limit_that_refused() {
    let world = World::new();
    // Table 1's key "a" holds 2 (its slower band's burst): ask it for 3 along with the others.
    let specs = [
        Spec {
            limit: 0,
            key: 0,
            n: 3,
        },
        Spec {
            limit: 2,
            key: 0,
            n: 1,
        },
        Spec {
            limit: 3,
            key: 0,
            n: 3,
        },
    ];
    let got = decide_together(&parts(&world, &specs, 0), Then::Take).unwrap();
    assert!(!got.taken);
    assert_eq!(got.answers[0].decision, ALLOWED);
    assert_eq!(got.answers[1].decision, ALLOWED);
    assert_eq!(
        got.answers[2].decision,
        KeyedDecision::Decided(Decision::Never)
    );
    assert_eq!(world.ones[0].lock().unwrap().available_at(0), 5);
    assert!(
        world.tables[0].is_empty(),
        "a key held for the request is let go of"
    );
    assert_eq!(
        world.tables[0].stats(),
        Stats {
            denied: 1,
            ..Stats::default()
        },
        "a key that would have allowed is counted as not taken"
    );
}

#[test]
fn a_request_refused_elsewhere_takes_nothing_and_is_counted_as_refused() {
    let world = World::new();
    // Every part would allow: another store's part refused the request.
    let specs = [
        Spec {
            limit: 0,
            key: 0,
            n: 1,
        },
        Spec {
            limit: 2,
            key: 0,
            n: 1,
        },
    ];
    let got = decide_together(&parts(&world, &specs, 0), Then::Refuse).unwrap();
    assert!(!got.taken);
    assert!(got.answers.iter().all(|answer| answer.decision == ALLOWED));
    assert_eq!(world.ones[0].lock().unwrap().available_at(0), 5);
    assert!(world.tables[0].is_empty(), "nothing taken, nothing kept");
    assert_eq!(
        world.tables[0].stats(),
        Stats {
            denied: 1,
            ..Stats::default()
        },
        "counted as a stacked refusal counts a key that would have allowed"
    );
    let peeked = decide_together(&parts(&world, &specs, 0), Then::Peek).unwrap();
    assert!(!peeked.taken);
    assert_eq!(world.tables[0].stats().denied, 1, "a peek counts nothing");
}

#[test]
fn a_full_table_refuses_the_request_before_anything_is_taken() {
    let world = World::new();
    for key in ["a", "b", "c"] {
        assert_eq!(world.tables[1].acquire(key, 1, 0), ALLOWED);
    }
    let specs = [
        Spec {
            limit: 0,
            key: 0,
            n: 1,
        },
        Spec {
            limit: 3,
            key: 3,
            n: 1,
        },
    ];
    let got = decide_together(&parts(&world, &specs, SECOND / 10), Then::Take).unwrap();
    assert!(!got.taken);
    assert!(matches!(
        got.answers[1].decision,
        KeyedDecision::Refused { .. }
    ));
    assert_eq!(world.ones[0].lock().unwrap().available_at(SECOND / 10), 5);
    assert_eq!(world.tables[1].len(), 3);
}

#[test]
fn parts_on_one_bucket_draw_from_it_together() {
    let world = World::new();
    // Limiter 0's burst is 5: 3 + 3 never passes, though each half alone would.
    let specs = [
        Spec {
            limit: 0,
            key: 0,
            n: 3,
        },
        Spec {
            limit: 0,
            key: 0,
            n: 3,
        },
    ];
    let got = decide_together(&parts(&world, &specs, 0), Then::Take).unwrap();
    assert!(!got.taken);
    assert_eq!(got.answers[0], got.answers[1]);
    assert_eq!(
        got.answers[0].decision,
        KeyedDecision::Decided(Decision::Never)
    );
    // Two keys of one table in one shard are two buckets behind one lock.
    let specs = [
        Spec {
            limit: 2,
            key: 0,
            n: 4,
        },
        Spec {
            limit: 2,
            key: 1,
            n: 4,
        },
    ];
    let got = decide_together(&parts(&world, &specs, 0), Then::Take).unwrap();
    assert!(got.taken);
    assert_eq!(world.tables[0].len(), 2);
}

#[test]
fn a_time_off_a_limiters_clock_is_refused_before_anything_is_decided() {
    let world = World::new();
    let specs = [
        Spec {
            limit: 2,
            key: 0,
            n: 1,
        },
        Spec {
            limit: 0,
            key: 0,
            n: 1,
        },
    ];
    decide_together(&parts(&world, &specs, 0), Then::Take).unwrap();
    let mut far = parts(&world, &specs, 0);
    far[1].now_ns = i64::MAX;
    let error = decide_together(&far, Then::Take).unwrap_err();
    assert_eq!(error.part, 1);
    assert_eq!(
        world.tables[0].levels("a", 0)[0].tokens,
        3,
        "nothing taken by the refused call"
    );
}

#[test]
fn stacks_in_opposite_orders_on_many_threads_never_wait_for_each_other() {
    let world = Arc::new(World::new());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let world = Arc::clone(&world);
            std::thread::spawn(move || {
                let mut taken = 0u64;
                for i in 0..2_000 {
                    let mut specs = vec![
                        Spec {
                            limit: 0,
                            key: 0,
                            n: 1,
                        },
                        Spec {
                            limit: 2,
                            key: i % 6,
                            n: 1,
                        },
                        Spec {
                            limit: 1,
                            key: 0,
                            n: 1,
                        },
                        Spec {
                            limit: 2,
                            key: (i + 3) % 6,
                            n: 1,
                        },
                        Spec {
                            limit: 5,
                            key: i % 6,
                            n: 0,
                        },
                        Spec {
                            limit: 5,
                            key: (i + 1) % 6,
                            n: 0,
                        },
                    ];
                    if t % 2 == 1 {
                        specs.reverse();
                    }
                    let now = i64::try_from(i).unwrap() * 1_000_000;
                    if decide_together(&parts(&world, &specs, now), Then::Take)
                        .unwrap()
                        .taken
                    {
                        taken += 1;
                    }
                }
                taken
            })
        })
        .collect();
    let taken: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // Limiter 0: 5 at once, then 5 a second, for about 2 seconds of calls.
    let end = 2_000 * 1_000_000;
    let left = world.ones[0].lock().unwrap().available_at(end);
    assert!(taken > 0);
    // Every stack took one token of limiter 0, and nothing else did: what it lacks is what the
    // stacks took, less what two seconds refilled.
    assert!(taken <= 5 + 5 * 2, "taken {taken}");
    assert!(left <= 5);
    // All or nothing under contention: the table took for both of its keys exactly when a
    // stack was taken, and never otherwise.
    assert_eq!(world.tables[0].stats().allowed, 2 * taken);
    // The shared table's two keys (taking nothing: its limit is slower than the others')
    // were asked under their buckets' locks by every stack, in both orders.
    assert_eq!(world.shared[1].stats().allowed, 2 * taken);
}

#[test]
fn the_requests_answer_is_the_strictest_refusal_with_the_longest_wait() {
    let answer = |decision, remaining| Answer {
        decision,
        remaining,
    };
    let wait = |ns| KeyedDecision::Decided(Decision::Wait(ns));
    assert_eq!(combined(&[]), None);
    assert_eq!(
        combined(&[answer(ALLOWED, 3), answer(ALLOWED, 1)]),
        Some(answer(ALLOWED, 1))
    );
    assert_eq!(
        combined(&[answer(wait(5), 0), answer(ALLOWED, 2), answer(wait(9), 4)]),
        Some(answer(wait(9), 0))
    );
    let refused = KeyedDecision::Refused { retry_in: 3 };
    assert_eq!(
        combined(&[answer(wait(7), 1), answer(refused, 0)]),
        Some(answer(KeyedDecision::Refused { retry_in: 7 }, 0))
    );
    let never = KeyedDecision::Decided(Decision::Never);
    assert_eq!(
        combined(&[answer(refused, 0), answer(never, 2), answer(wait(7), 1)]),
        Some(answer(never, 0))
    );
}
