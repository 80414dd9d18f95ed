//! Deciding for a key of a shared table: each call locks the key's buckets and runs the one
//! decision ([`home`]) on the key's slot, the in-process table's own code, stored back (or the
//! key forgotten, once it is a new key's state again).
//!
//! What the file adds to the decision, as the key's [`Home`]:
//!
//! * **Finding**: the key's slot, by its digest, in its two buckets.
//! * **Writing back**: a change is committed to the slot's spare copy (see [`super::slot`]),
//!   and a key fresh again is forgotten (one store). A denial or a read is not written: what
//!   it settled changes no answer, and a commit is two writes to memory other processes read.
//!   The one-key form writes them too (its first call anchors, as a limiter's does), and
//!   never forgets its key.
//! * **Room for a new key**: a free slot in the key's two buckets, or one whose key is fresh
//!   (forgotten to make room).
//! * **Counts** in the key's first bucket's counters.

use super::{Digest, Locked, Table, Words};
use crate::core::exact::home::{self, Change, Home, NewKey};
use crate::core::exact::keyed::{Answer, KeyedDecision, KeyedReservation};
use crate::core::exact::limiter::{Balances, Level};
use crate::core::exact::rate::BandSpec;

impl<W: Words> Table<W> {
    /// Take `n` tokens for the key of `digest` at `now_ns`, as its own limiter decides.
    pub fn acquire(&self, digest: Digest, n: u64, now_ns: i64) -> KeyedDecision {
        self.take(digest, n, now_ns, false).decision
    }

    /// [`Table::acquire`], also saying what the key holds after (every band's least whole
    /// tokens; 0 if refused).
    pub fn check(&self, digest: Digest, n: u64, now_ns: i64) -> Answer {
        self.take(digest, n, now_ns, true)
    }

    /// Take `n` tokens; what remains is counted only `with_remaining` (a division per band).
    fn take(&self, digest: Digest, n: u64, now_ns: i64, with_remaining: bool) -> Answer {
        self.take_in(&self.locked(digest, now_ns), digest, n, with_remaining)
    }

    /// [`Table::take`] on buckets already locked.
    pub(super) fn take_in(
        &self,
        locked: &Locked<'_>,
        digest: Digest,
        n: u64,
        with_remaining: bool,
    ) -> Answer {
        home::take(&mut self.home(locked, digest), n, with_remaining)
    }

    /// What [`Table::check`] would answer, taking nothing and storing nothing.
    pub fn peek(&self, digest: Digest, n: u64, now_ns: i64) -> Answer {
        home::peek(&mut self.home(&self.locked(digest, now_ns), digest), n)
    }

    /// Give `n` tokens back to the key (each band capped at its burst); a key not stored is
    /// full already.
    pub fn refund(&self, digest: Digest, n: u64, now_ns: i64) {
        home::refund(&mut self.home(&self.locked(digest, now_ns), digest), n);
    }

    /// Settle a cost the key took as `reserved` tokens, now known to be `actual` (see
    /// [`home::settle_cost`]). A key not stored is full: a refund changes nothing, and an
    /// overage stores it in debt if there is room (none when every key held is in use: then
    /// the overage is not recorded).
    pub fn settle_cost(&self, digest: Digest, reserved: u64, actual: u64, now_ns: i64) {
        let locked = self.locked(digest, now_ns);
        home::settle_cost(&mut self.home(&locked, digest), reserved, actual);
    }

    /// Reserve `n` tokens for the key at the moment they will be there, if within
    /// `max_wait_ns` of the caller's time (see [`home::reserve`]); counted as a take.
    pub fn reserve(
        &self,
        digest: Digest,
        n: u64,
        now_ns: i64,
        max_wait_ns: u128,
    ) -> KeyedReservation {
        let locked = self.locked(digest, now_ns);
        home::reserve(&mut self.home(&locked, digest), n, max_wait_ns)
    }

    /// A waiter that stops waiting hands back the `n` tokens it reserved for `reserved_at`
    /// (see [`home::give_back`]): undone if nobody queues behind them, else forfeited.
    pub fn give_back(&self, digest: Digest, n: u64, now_ns: i64, reserved_at: i64) {
        let locked = self.locked(digest, now_ns);
        home::give_back(&mut self.home(&locked, digest), n, reserved_at);
    }

    /// Whole tokens the key holds at `now_ns` (every band's least).
    pub fn available(&self, digest: Digest, now_ns: i64) -> u128 {
        home::available(&mut self.home(&self.locked(digest, now_ns), digest))
    }

    /// Each band's whole tokens for the key at `now_ns`, and the time until it can give one
    /// more (see [`Balances::levels_at`]). The one-key form keeps the anchoring a first call
    /// makes, as a limiter does.
    pub fn levels(&self, digest: Digest, now_ns: i64) -> Vec<Level> {
        home::levels(&mut self.home(&self.locked(digest, now_ns), digest))
    }

    /// The key of `digest`, its buckets locked (`locked`), as the one decision sees it.
    fn home<'v>(&'v self, locked: &'v Locked<'v>, digest: Digest) -> KeyInBuckets<'v, W> {
        KeyInBuckets {
            table: self,
            locked,
            digest,
        }
    }
}

/// A key of the shared table, for one call: its buckets (locked) and its digest.
struct KeyInBuckets<'v, W> {
    table: &'v Table<W>,
    locked: &'v Locked<'v>,
    digest: Digest,
}

impl<'v, W: Words> Home<'v> for KeyInBuckets<'v, W> {
    fn specs(&self) -> &'v [BandSpec] {
        &self.table.specs
    }

    fn fresh(&self) -> &'v Balances {
        &self.table.fresh
    }

    fn now(&self) -> i64 {
        self.locked.now
    }

    fn behind(&self) -> u128 {
        self.locked.behind
    }

    fn clock(&self) -> i64 {
        self.locked.clock
    }

    #[inline]
    fn update<R>(&mut self, operation: impl FnOnce(&mut Balances) -> (Change, R)) -> Option<R> {
        let slot = self.table.find(self.locked, self.digest)?;
        let mut balances = slot.balances();
        let (change, answer) = operation(&mut balances);
        // A denial or a read changes no answer if not written; the one-key form writes it
        // (a first call anchors, as a limiter's does).
        let unchanged = matches!(change, Change::Read | Change::Decided { taken: false });
        if self.table.one || !unchanged {
            self.table.keep(self.locked, slot, &balances);
        }
        Some(answer)
    }

    fn room_for_new(&mut self) -> Option<u128> {
        self.table.would_find_room(self.locked)
    }

    fn count(&mut self, decision: KeyedDecision) {
        self.table.count(self.locked, decision);
    }
}

impl<'v, W: Words> NewKey<'v> for KeyInBuckets<'v, W> {
    fn store_new(&mut self, balances: &Balances) -> Result<(), u128> {
        let slot = self.table.room(self.locked, &[])?;
        slot.fill(self.digest, balances);
        Ok(())
    }
}
