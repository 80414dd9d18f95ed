//! Stacked limits: one request under several limits at once, taken from all of them or from
//! none.
//!
//! A service often limits a request three ways together: every client at once (a global
//! limit), the route, and the client. Asked one after another, the limits go wrong where they
//! meet: the global limit takes a token, the client's limit then refuses, and the global token
//! is spent on a request that never ran. Given back afterwards, it was still missing for a
//! moment, and a request that came in that moment was refused for nothing.
//!
//! Here the request is decided by every limit **together**, in two steps:
//!
//! 1. **Ask.** Each limit says what it would answer, taking nothing, as `peek` does.
//! 2. **Take, or not.** Only if every one allowed does every one take its tokens, at the time
//!    it was asked. Otherwise nothing is taken anywhere, and each part's answer is what that
//!    limit alone would have said: so a refusal names every limit that refused, and the
//!    others say what they still hold.
//!
//! No other call may come between the two steps, so every lock the request needs (a
//! limiter's, or a keyed table's shard of the key: every shard, for keys of one table in
//! several) is taken before the first question and held until the last answer. Two stacked
//! requests could each hold one lock and wait for the other's; that cannot happen because every
//! request takes its locks in **one global order**, by the limit's address and then the shard's
//! index, as a database takes its row locks in key order.
//!
//! Parts that name the same bucket (the same limiter, or the same key of one table) draw from
//! it together: the request needs the sum of their tokens there, and each such part answers
//! for that sum. Asked one by one, two halves could each pass where the whole does not.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::Equivalent;

use crate::core::exact::keyed::held::{Asked, HeldShards};
use crate::core::exact::keyed::{Answer, KeyedDecision, KeyedLimiter};
use crate::core::exact::limiter::{Decision, Limiter};

/// One limit a stacked request is under.
pub enum Limit<'a, K> {
    /// A limiter of one limit, behind its lock.
    One(&'a Mutex<Limiter>),
    /// A keyed table, and the key the request is counted under.
    Keyed(&'a KeyedLimiter<K>),
}

/// One part of a stacked request: a limit, the key for a keyed one, the tokens it takes, and
/// the time it is asked at (each limiter has its own clock).
pub struct Part<'a, K, Q: ?Sized> {
    pub limit: Limit<'a, K>,
    pub key: Option<&'a Q>,
    pub n: u64,
    pub now_ns: i64,
}

/// A stacked request, decided: whether its tokens were taken, and every part's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stacked {
    pub taken: bool,
    pub answers: Vec<Answer>,
}

/// The request's answer from its parts' answers: allowed if every part allowed; otherwise the
/// strictest refusal, NEVER (no wait can fix it) before REFUSED (a table had no room) before a
/// wait, with the longest of the refusing parts' waits, after which every part would allow
/// (tokens only accrue). What remains is the least of the parts'. `None` for no parts.
#[must_use]
pub fn combined(answers: &[Answer]) -> Option<Answer> {
    let remaining = answers.iter().map(|answer| answer.remaining).min()?;
    let strictness = |decision: &KeyedDecision| match decision {
        KeyedDecision::Decided(Decision::Allowed) => 0,
        KeyedDecision::Decided(Decision::Wait(_)) => 1,
        KeyedDecision::Refused { .. } => 2,
        KeyedDecision::Decided(Decision::Never) => 3,
    };
    let wait = |decision: &KeyedDecision| match *decision {
        KeyedDecision::Decided(Decision::Wait(ns)) | KeyedDecision::Refused { retry_in: ns } => ns,
        KeyedDecision::Decided(_) => 0,
    };
    let strictest = answers
        .iter()
        .map(|answer| answer.decision)
        .max_by_key(strictness)?;
    let longest = answers.iter().map(|answer| wait(&answer.decision)).max()?;
    let decision = match strictest {
        KeyedDecision::Decided(Decision::Wait(_)) => {
            KeyedDecision::Decided(Decision::Wait(longest))
        }
        KeyedDecision::Refused { .. } => KeyedDecision::Refused { retry_in: longest },
        decided @ KeyedDecision::Decided(_) => decided,
    };
    Some(Answer {
        decision,
        remaining,
    })
}

/// A part's time is too far from its limiter's clock to be a reading of it (see
/// [`super::clock_gap`]): nothing was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockGap {
    /// The part, by its place in the request.
    pub part: usize,
    /// How far its time is from the clock (positive when ahead).
    pub gap: i128,
}

/// A bucket the request draws from: one limiter, or one key of a table, with the tokens of
/// every part that names it.
struct Bucket<'a, K, Q: ?Sized> {
    limit: &'a Limit<'a, K>,
    key: Option<&'a Q>,
    n: u64,
    now_ns: i64,
    /// Its lock, by place in the order.
    lock: usize,
}

/// A lock held for the request.
enum Held<'a, K> {
    One(MutexGuard<'a, Limiter>),
    Keyed(HeldShards<'a, K>),
}

/// What a bucket said when asked.
enum Said {
    One(Answer),
    Keyed(Asked),
}

impl Said {
    fn answer(&self) -> Answer {
        match self {
            Self::One(answer) => *answer,
            Self::Keyed(asked) => asked.answer,
        }
    }
}

/// Decide `parts` together: take every part's tokens if every part allows, else none. With
/// `peek`, take none either way: what the request would be answered, as `peek` says it.
///
/// # Errors
///
/// [`ClockGap`] for the first part of a one-limit limiter whose time is off its clock, before
/// anything is decided. (A keyed table's gap is checked by the caller, as for a single call.)
pub fn decide_together<K, Q>(parts: &[Part<'_, K, Q>], peek: bool) -> Result<Stacked, ClockGap>
where
    K: Hash + Eq + Clone,
    Q: Hash + Eq + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
{
    let (buckets, of_part, locks) = buckets(parts);
    // Every lock, in the global order, before any question.
    let mut held: Vec<Held<'_, K>> = locks
        .values()
        .map(|(limit, shards)| match limit {
            Limit::One(mutex) => Held::One(mutex.lock().unwrap_or_else(PoisonError::into_inner)),
            Limit::Keyed(table) => Held::Keyed(table.hold(shards)),
        })
        .collect();
    for (index, part) in parts.iter().enumerate() {
        if let Held::One(limiter) = &mut held[buckets[of_part[index]].lock] {
            limiter
                .on_the_clock(part.now_ns)
                .map_err(|gap| ClockGap { part: index, gap })?;
        }
    }
    let said: Vec<Said> = buckets
        .iter()
        .map(|bucket| ask(bucket, &mut held[bucket.lock]))
        .collect();
    let taken = !peek
        && said
            .iter()
            .all(|said| said.answer().decision == KeyedDecision::Decided(Decision::Allowed));
    let answers: Vec<Answer> = buckets
        .iter()
        .zip(&said)
        .map(|(bucket, said)| settle(bucket, said, taken, !peek, &mut held[bucket.lock]))
        .collect();
    Ok(Stacked {
        taken,
        answers: of_part.iter().map(|&bucket| answers[bucket]).collect(),
    })
}

/// The locks of a request in the global order: by the limit's address, each limit with the
/// shards it needs (none for a one-limit limiter), in order.
type Locks<'a, K> = BTreeMap<usize, (&'a Limit<'a, K>, Vec<usize>)>;

/// The request's buckets, each part's bucket, and its locks (a bucket's `lock` is its limit's
/// place among them).
fn buckets<'a, K, Q>(
    parts: &'a [Part<'a, K, Q>],
) -> (Vec<Bucket<'a, K, Q>>, Vec<usize>, Locks<'a, K>)
where
    K: Hash + Eq + Clone,
    Q: Hash + Eq + ?Sized,
{
    let mut buckets: Vec<Bucket<'a, K, Q>> = Vec::new();
    let mut of_part = Vec::with_capacity(parts.len());
    let mut locks = Locks::new();
    for part in parts {
        let address = address_of(&part.limit);
        let key = match &part.limit {
            Limit::One(_) => None,
            Limit::Keyed(_) => Some(part.key.expect("a keyed part has a key")),
        };
        let same = buckets
            .iter()
            .position(|b| address_of(b.limit) == address && b.key == key);
        let bucket = if let Some(same) = same {
            buckets[same].n = buckets[same].n.saturating_add(part.n);
            same
        } else {
            let (_, shards) = locks.entry(address).or_insert((&part.limit, Vec::new()));
            if let (Limit::Keyed(table), Some(key)) = (&part.limit, key) {
                let shard = table.shard_for(key);
                if let Err(place) = shards.binary_search(&shard) {
                    shards.insert(place, shard);
                }
            }
            buckets.push(Bucket {
                limit: &part.limit,
                key,
                n: part.n,
                now_ns: part.now_ns,
                lock: 0,
            });
            buckets.len() - 1
        };
        of_part.push(bucket);
    }
    for bucket in &mut buckets {
        bucket.lock = locks.range(..address_of(bucket.limit)).count();
    }
    (buckets, of_part, locks)
}

fn address_of<K>(limit: &Limit<'_, K>) -> usize {
    match limit {
        Limit::One(mutex) => std::ptr::from_ref(*mutex) as usize,
        Limit::Keyed(table) => std::ptr::from_ref(*table) as usize,
    }
}

/// Step 1 for one bucket: what it would answer, taking nothing.
fn ask<K, Q>(bucket: &Bucket<'_, K, Q>, held: &mut Held<'_, K>) -> Said
where
    K: Hash + Eq + Clone,
    Q: Hash + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
{
    match (held, bucket.key) {
        (Held::One(limiter), _) => {
            let decision = limiter.peek(bucket.n, bucket.now_ns);
            Said::One(Answer {
                decision: KeyedDecision::Decided(decision),
                remaining: limiter.available_at(bucket.now_ns),
            })
        }
        (Held::Keyed(shard), Some(key)) => {
            let Limit::Keyed(table) = bucket.limit else {
                unreachable!("a held shard is a keyed limit's")
            };
            Said::Keyed(table.ask_held(shard, key, bucket.n, bucket.now_ns))
        }
        (Held::Keyed(_), None) => unreachable!("a keyed part has a key"),
    }
}

/// Step 2 for one bucket: take its tokens if the request is `taken`, else let go of anything
/// held for it (and count the refusal, if `counted`: it was not only a question); its answer
/// either way.
fn settle<K, Q>(
    bucket: &Bucket<'_, K, Q>,
    said: &Said,
    taken: bool,
    counted: bool,
    held: &mut Held<'_, K>,
) -> Answer
where
    K: Hash + Eq + Clone,
    Q: Hash + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
{
    match (held, said, bucket.limit, bucket.key) {
        (Held::One(limiter), Said::One(answer), _, _) => {
            if !taken {
                return *answer;
            }
            let decision = limiter.acquire(bucket.n, bucket.now_ns);
            debug_assert_eq!(decision, Decision::Allowed, "asked under the same lock");
            Answer {
                decision: KeyedDecision::Decided(decision),
                remaining: limiter.available(),
            }
        }
        (Held::Keyed(shard), Said::Keyed(asked), Limit::Keyed(table), Some(key)) => {
            if taken {
                table.take_held(shard, key, bucket.n, asked)
            } else {
                table.let_go_held(shard, key, asked, counted);
                asked.answer
            }
        }
        _ => unreachable!("a bucket's lock and answer are of its limit's kind"),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod seams;
