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
//! limiter's; a keyed table's shard of the key, or every shard for keys of one table in
//! several; a shared table's buckets of the key) is taken before the first question and held
//! until the last answer. Two stacked requests could each hold one lock and wait for the
//! other's; that cannot happen, for each kind of lock for its own reason:
//!
//! * **Shared tables' buckets** (which other processes lock too) are taken first, and never
//!   waited for while holding anything: each is tried for a few microseconds, and if one stays
//!   busy the request lets go of every bucket it took, sleeps until that one is free, and
//!   starts again. A table is known by its identity (its file's device and inode, the same in
//!   every process and every object that maps it), so two parts on one bucket lock it once.
//! * **In-process locks** are taken next, in **one global order**, as a database takes its row
//!   locks in key order: by the limit's address and then the shard's index. Nothing else is
//!   waited for while they are held.
//!
//! Parts that name the same bucket (the same limiter, or the same key of one table, through
//! whichever objects map it) draw from it together: the request needs the sum of their tokens
//! there, and each such part answers for that sum. Asked one by one, two halves could each pass where the whole does not.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::Equivalent;

use crate::core::exact::keyed::held::{Asked, HeldShards};
use crate::core::exact::keyed::{Answer, KeyedDecision, KeyedLimiter};
use crate::core::exact::limiter::{Decision, Limiter};
use crate::core::exact::shared::held::{HeldBuckets, SharedAsked};
use crate::core::exact::shared::lock;
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::shared::{Table, Words};

/// One limit a stacked request is under.
pub enum Limit<'a, K, W> {
    /// A limiter of one limit, behind its lock.
    One(&'a Mutex<Limiter>),
    /// A keyed table (the part's key says which of its keys).
    Keyed(&'a KeyedLimiter<K>),
    /// A table the processes of one host share, and the key's digest in it (a one-key table's
    /// is its one key).
    Shared(&'a Table<W>, Digest),
}

/// One part of a stacked request: a limit, the key for a keyed table, the tokens it takes, and
/// the time it is asked at (each limiter has its own clock).
pub struct Part<'a, K, Q: ?Sized, W> {
    pub limit: Limit<'a, K, W>,
    pub key: Option<&'a Q>,
    pub n: u64,
    pub now_ns: i64,
}

/// What a stacked call does once every part has been asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Take every part's tokens if every part allows, else none; the keyed tables count the
    /// request, as a single call counts it.
    Take,
    /// Take nothing, count nothing: what the request would be answered, as `peek` says it.
    Peek,
    /// Take nothing, and count the request as refused: a limit elsewhere (another store's part
    /// of the same request) refused it. Each keyed table counts it as it counts a stacked
    /// refusal: its key's own refusal, or DENIED where the key would have allowed.
    Refuse,
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
struct Bucket<'a, K, Q: ?Sized, W> {
    limit: &'a Limit<'a, K, W>,
    key: Option<&'a Q>,
    n: u64,
    now_ns: i64,
    /// Its lock, by place in the order.
    lock: usize,
}

impl<K, Q: Eq + ?Sized, W: Words> Bucket<'_, K, Q, W> {
    /// Whether `part` draws from this bucket.
    fn holds(&self, part: &Part<'_, K, Q, W>) -> bool {
        match (self.limit, &part.limit) {
            (Limit::Shared(_, mine), Limit::Shared(_, its)) => {
                lock_id(self.limit) == lock_id(&part.limit) && mine == its
            }
            _ => lock_id(self.limit) == lock_id(&part.limit) && self.key == part.key,
        }
    }
}

/// The locks held for the request: one entry per limit.
enum Held<'a, K> {
    One(MutexGuard<'a, Limiter>),
    Keyed(HeldShards<'a, K>),
    Shared(HeldBuckets<'a>),
}

/// What a bucket said when asked.
enum Said {
    One(Answer),
    Keyed(Asked),
    Shared(SharedAsked),
}

impl Said {
    fn answer(&self) -> Answer {
        match self {
            Self::One(answer) => *answer,
            Self::Keyed(asked) => asked.answer,
            Self::Shared(asked) => asked.answer,
        }
    }
}

/// Decide `parts` together: take every part's tokens if every part allows, else none; or, as
/// `then` says, only say what would be ([`Then::Peek`]), or count a request refused elsewhere
/// ([`Then::Refuse`]).
///
/// # Errors
///
/// [`ClockGap`] for the first part of a one-limit limiter whose time is off its clock, before
/// anything is decided. (A keyed table's gap is checked by the caller, as for a single call.)
pub fn decide_together<K, Q, W>(
    parts: &[Part<'_, K, Q, W>],
    then: Then,
) -> Result<Stacked, ClockGap>
where
    K: Hash + Eq + Clone,
    Q: Hash + Eq + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
    W: Words,
{
    let (buckets, of_part, locks) = buckets(parts);
    // Every lock before any question.
    let mut held = hold_all(&locks);
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
    let taken = then == Then::Take
        && said
            .iter()
            .all(|said| said.answer().decision == KeyedDecision::Decided(Decision::Allowed));
    let counted = then != Then::Peek;
    let answers: Vec<Answer> = buckets
        .iter()
        .zip(&said)
        .map(|(bucket, said)| settle(bucket, said, taken, counted, &mut held[bucket.lock]))
        .collect();
    Ok(Stacked {
        taken,
        answers: of_part.iter().map(|&bucket| answers[bucket]).collect(),
    })
}

/// Every lock of a request, one entry per limit in the order of `locks`. First the shared
/// tables' buckets, each tried for a few microseconds: if one stays busy, every bucket taken so
/// far is let go, the thread waits until that one is free, and starts again, so it never waits
/// holding a lock (see `shared::lock`). Then the in-process locks, in order: they are only
/// ever held by a thread that holds Python's interpreter too (or in a detached section that
/// takes no other lock), so taking them never waits on a thread that waits on anything else.
fn hold_all<'a, K, W>(locks: &'a Locks<'a, K, W>) -> Vec<Held<'a, K>>
where
    K: Hash + Eq + Clone,
    W: Words,
{
    let tables = locks.values().filter_map(|(limit, places)| match limit {
        Limit::Shared(table, _) => Some((*table, places)),
        _ => None,
    });
    let mut shared = lock::all_of(
        || {
            tables
                .clone()
                .map(|(table, places)| table.try_hold(places).map_err(|busy| (table, busy)))
                .collect::<Result<Vec<_>, _>>()
        },
        |(table, busy)| table.wait_free(busy),
    )
    .into_iter();
    locks
        .values()
        .map(|(limit, places)| match limit {
            Limit::One(mutex) => Held::One(mutex.lock().unwrap_or_else(PoisonError::into_inner)),
            Limit::Keyed(table) => Held::Keyed(table.hold(places)),
            Limit::Shared(..) => Held::Shared(shared.next().expect("one per shared table")),
        })
        .collect()
}

/// Where a limit's locks come in the order they are listed: in-process limits first (0), by
/// address; then shared tables (1), by identity (their file's, the same in every process and
/// every object that maps it: two objects of one table are one limit, whose buckets are locked
/// once).
type LockId = (u8, u128, usize);

fn lock_id<K, W: Words>(limit: &Limit<'_, K, W>) -> LockId {
    match limit {
        Limit::One(mutex) => (0, 0, std::ptr::from_ref(*mutex) as usize),
        Limit::Keyed(table) => (0, 0, std::ptr::from_ref(*table) as usize),
        Limit::Shared(table, _) => {
            let (high, low) = table.lock_order();
            (1, u128::from(high) << 64 | u128::from(low), 0)
        }
    }
}

/// The locks of a request in the global order, each limit with the places it needs locked
/// in order (a keyed table's shards, a shared table's buckets; none for a one-limit limiter).
type Locks<'a, K, W> = BTreeMap<LockId, (&'a Limit<'a, K, W>, Vec<usize>)>;

/// The request's buckets, each part's bucket, and its locks (a bucket's `lock` is its limit's
/// place among them).
#[allow(clippy::type_complexity)] // three views of one grouping, made together
fn buckets<'a, K, Q, W>(
    parts: &'a [Part<'a, K, Q, W>],
) -> (Vec<Bucket<'a, K, Q, W>>, Vec<usize>, Locks<'a, K, W>)
where
    K: Hash + Eq + Clone,
    Q: Hash + Eq + ?Sized,
    W: Words,
{
    let mut buckets: Vec<Bucket<'a, K, Q, W>> = Vec::new();
    let mut of_part = Vec::with_capacity(parts.len());
    let mut locks = Locks::new();
    for part in parts {
        let key = match &part.limit {
            Limit::Keyed(_) => Some(part.key.expect("a keyed part has a key")),
            Limit::One(_) | Limit::Shared(..) => None,
        };
        if let Some(same) = buckets.iter().position(|bucket| bucket.holds(part)) {
            buckets[same].n = buckets[same].n.saturating_add(part.n);
            of_part.push(same);
            continue;
        }
        let (_, places) = locks
            .entry(lock_id(&part.limit))
            .or_insert((&part.limit, Vec::new()));
        let needed = match (&part.limit, key) {
            (Limit::Keyed(table), Some(key)) => vec![table.shard_for(key)],
            (Limit::Shared(table, digest), _) => table.buckets_of_key(*digest).to_vec(),
            _ => Vec::new(),
        };
        for place in needed {
            if let Err(at) = places.binary_search(&place) {
                places.insert(at, place);
            }
        }
        buckets.push(Bucket {
            limit: &part.limit,
            key,
            n: part.n,
            now_ns: part.now_ns,
            lock: 0,
        });
        of_part.push(buckets.len() - 1);
    }
    for bucket in &mut buckets {
        bucket.lock = locks.range(..lock_id(bucket.limit)).count();
    }
    (buckets, of_part, locks)
}

/// Step 1 for one bucket: what it would answer, taking nothing.
fn ask<K, Q, W>(bucket: &Bucket<'_, K, Q, W>, held: &mut Held<'_, K>) -> Said
where
    K: Hash + Eq + Clone,
    Q: Hash + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
    W: Words,
{
    match (held, bucket.limit, bucket.key) {
        (Held::One(limiter), _, _) => {
            let decision = limiter.peek(bucket.n, bucket.now_ns);
            Said::One(Answer {
                decision: KeyedDecision::Decided(decision),
                remaining: limiter.available_at(bucket.now_ns),
            })
        }
        (Held::Keyed(shards), Limit::Keyed(table), Some(key)) => {
            Said::Keyed(table.ask_held(shards, key, bucket.n, bucket.now_ns))
        }
        (Held::Shared(buckets), Limit::Shared(table, digest), _) => {
            Said::Shared(table.ask_held(buckets, *digest, bucket.n, bucket.now_ns))
        }
        _ => unreachable!("a bucket's lock is of its limit's kind"),
    }
}

/// Step 2 for one bucket: take its tokens if the request is `taken`, else let go of anything
/// held for it (and count the refusal, if `counted`: it was not only a question); its answer
/// either way.
fn settle<K, Q, W>(
    bucket: &Bucket<'_, K, Q, W>,
    said: &Said,
    taken: bool,
    counted: bool,
    held: &mut Held<'_, K>,
) -> Answer
where
    K: Hash + Eq + Clone,
    Q: Hash + Equivalent<K> + ?Sized,
    K: for<'q> From<&'q Q>,
    W: Words,
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
        (Held::Keyed(shards), Said::Keyed(asked), Limit::Keyed(table), Some(key)) => {
            if taken {
                table.take_held(shards, key, bucket.n, asked)
            } else {
                table.let_go_held(shards, key, asked, counted);
                asked.answer
            }
        }
        (Held::Shared(buckets), Said::Shared(asked), Limit::Shared(table, digest), _) => {
            if taken {
                table.take_held(buckets, *digest, bucket.n, asked)
            } else {
                table.let_go_held(buckets, *digest, asked, counted);
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
