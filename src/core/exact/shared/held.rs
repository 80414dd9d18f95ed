//! Keys of a shared table held for a stacked decision (see [`crate::core::exact::stack`]):
//! their buckets stay locked while the request's other limits answer, and each key answers in
//! two steps, first what it would say, then, only if every limit said yes, the taking.
//!
//! Two things differ from an in-process table ([`crate::core::exact::keyed::held`]):
//!
//! * **The order of the locks.** Other processes lock these buckets too, and each has the
//!   table mapped at an address of its own, so an address cannot order them, nor tell two
//!   mappings of one file apart from two tables. A table is known and ordered by its
//!   [identity](Table::identity) (its file's device and inode, the same in every process that
//!   maps it), then its buckets by index: every process of the host takes them in one order,
//!   so none can wait for another that waits for it, and two objects that map one table lock
//!   its bucket once.
//! * **Room.** A new key's room is in its own two buckets, which the request holds: when the
//!   key is asked, a fresh, full entry is stored in a free (or forgettable) slot to hold the
//!   place, since a second new key of the request may be due in the same bucket; it is freed
//!   if the request is refused. Nobody else sees it: it is written and freed under the lock.
//!   Every key the request asks is pinned until it is settled, as in-process: a later key of
//!   the request never makes its room by forgetting it (the place holder is fresh by design,
//!   and a key the table holds may have refilled).

use super::lock::Held;
use super::{Digest, Table, Words};
use crate::core::exact::keyed::{Answer, KeyedDecision};
use crate::core::exact::limiter::Decision;

/// Buckets of one table, locked for a stacked decision, in index order, and the keys the
/// request has asked so far (pinned: no room is made by forgetting them).
pub struct HeldBuckets<'t> {
    _held: Vec<Held<'t>>,
    pinned: Vec<Digest>,
}

/// What [`Table::ask_held`] found, for the steps after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedAsked {
    /// The key's answer, taking nothing.
    pub answer: Answer,
    /// The table's time the key was asked at, which the taking uses too.
    now: i64,
    behind: u128,
    clock: i64,
    /// Whether a fresh entry was stored to hold the key's place.
    stored: bool,
}

impl<W: Words> Table<W> {
    /// Where this table's locks come in the global order of stacked decisions: its identity,
    /// the same in every process and every object that maps the table.
    #[must_use]
    pub fn lock_order(&self) -> (u64, u64) {
        self.identity
    }

    /// The buckets whose locks a stacked decision on `digest` needs.
    #[must_use]
    pub fn buckets_of_key(&self, digest: Digest) -> [usize; 2] {
        self.buckets_for(digest)
    }

    /// Lock `buckets` (sorted, each once), in order, each if it is free within a few
    /// microseconds of trying; else let go of those taken, and say which stayed busy (the
    /// caller lets go of every other lock too, waits for it, [`Table::wait_free`], and tries
    /// again: a thread never waits holding a lock).
    ///
    /// # Errors
    ///
    /// The bucket that stayed busy.
    pub fn try_hold(&self, buckets: &[usize]) -> Result<HeldBuckets<'_>, usize> {
        let mut held = Vec::with_capacity(buckets.len());
        for &bucket in buckets {
            held.push(self.try_bucket(bucket).ok_or(bucket)?);
        }
        Ok(HeldBuckets {
            _held: held,
            pinned: Vec::new(),
        })
    }

    /// What taking `n` tokens for the key of `digest` at `now_ns` would answer, taking nothing;
    /// a new key that the taking would store gets its place now, or the refusal. Either way
    /// the key is pinned for the rest of the request.
    pub fn ask_held(
        &self,
        held: &mut HeldBuckets<'_>,
        digest: Digest,
        n: u64,
        now_ns: i64,
    ) -> SharedAsked {
        held.pinned.push(digest);
        let locked = self.timed([None, None], self.buckets_for(digest), now_ns);
        let (now, behind, clock) = (locked.now, locked.behind, locked.clock);
        let asked = |decision: KeyedDecision, remaining, stored| SharedAsked {
            answer: Answer {
                decision: decision.from_caller(behind),
                remaining,
            },
            now,
            behind,
            clock,
            stored,
        };
        let specs = &self.specs;
        if let Some(slot) = self.find(&locked, digest) {
            let mut balances = slot.balances();
            let decision = balances.peek(specs, n, now);
            if self.one {
                slot.commit(&balances); // a first call anchors, as a limiter's does
            }
            return asked(
                KeyedDecision::Decided(decision),
                balances.available_at(specs, now),
                false,
            );
        }
        let remaining = self.fresh.clone().available_at(specs, now);
        let mut taken = self.fresh.clone();
        let decision = taken.acquire(specs, n, now);
        if decision != Decision::Allowed || taken.is_full(specs) {
            // Refused even when full (n beyond a burst), or allowed taking nothing: the taking
            // stores nothing, so it needs no room.
            return asked(KeyedDecision::Decided(decision), remaining, false);
        }
        match self.room(&locked, &held.pinned) {
            Err(retry_in) => asked(KeyedDecision::Refused { retry_in }, 0, false),
            Ok(slot) => {
                let mut fresh = self.fresh.clone();
                fresh.acquire(specs, 0, now); // full, anchored at now: a new key's state
                slot.fill(digest, &fresh);
                asked(KeyedDecision::Decided(decision), remaining, true)
            }
        }
    }

    /// Take the `n` tokens [`Table::ask_held`] allowed for the key of `digest`, at the same
    /// time.
    pub fn take_held(
        &self,
        _held: &HeldBuckets<'_>,
        digest: Digest,
        n: u64,
        asked: &SharedAsked,
    ) -> Answer {
        let mut locked = self.timed([None, None], self.buckets_for(digest), asked.now);
        (locked.now, locked.behind, locked.clock) = (asked.now, asked.behind, asked.clock);
        self.take_in(&locked, digest, n, true)
    }

    /// Nothing is taken for the key of `digest`: the request was refused elsewhere, or only
    /// asked about (`counted` false). Its held place, if any, is freed; a refused request is
    /// counted as the key said, its own refusal, or DENIED where the key would have allowed.
    pub fn let_go_held(
        &self,
        _held: &HeldBuckets<'_>,
        digest: Digest,
        asked: &SharedAsked,
        counted: bool,
    ) {
        let locked = self.timed([None, None], self.buckets_for(digest), asked.now);
        if asked.stored {
            if let Some(slot) = self.find(&locked, digest) {
                slot.free();
            }
        }
        if counted {
            self.count(
                &locked,
                match asked.answer.decision {
                    KeyedDecision::Decided(Decision::Allowed) => {
                        KeyedDecision::Decided(Decision::Wait(0))
                    }
                    refused => refused,
                },
            );
        }
    }
}
