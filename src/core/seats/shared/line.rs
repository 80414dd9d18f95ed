//! One key's seats and line in the table's words: the shared home of the seating rules
//! ([`rules`](crate::core::seats::rules)).
//!
//! The limit and the next fencing token are header words, one for the whole table (so a key's
//! tokens grow past every key's, a forgotten key's included); the seats held are the key
//! slot's word, with the header's count over every key kept beside it; the line is a doubly
//! linked list of records, from the key's head to its tail. A waiter leaving the line is told
//! in its record: held with its token, refused, or freed. Every write goes through the
//! change's undo log, and each waiter decided is a consistent point.

use super::layout::{at, key, record, Layout};
use super::undo::Change;
use crate::core::seats::rules::SeatStore;
use crate::core::seats::Grant;

/// The record a link names (a link is an index plus one, 0 for none).
pub(super) fn linked(link: u64) -> Option<usize> {
    usize::try_from(link.checked_sub(1)?).ok()
}

/// The link that names record `index`.
fn link(index: usize) -> u64 {
    index as u64 + 1
}

/// Put record `index` back on the free list, all its words zero but the link.
pub(super) fn free_record(c: &mut Change<'_>, layout: &Layout, index: usize) {
    let at = layout.record(index);
    for word in 0..record::WORDS {
        c.set(at + word, 0);
    }
    c.set(at + record::NEXT, c.get(at::FREE));
    c.set(at::FREE, link(index));
    c.add(at::IN_USE, u64::MAX); // one fewer
}

/// The seats and the line of the key in one slot, read and written through a change.
pub(super) struct KeyLine<'c, 'w> {
    c: &'c mut Change<'w>,
    layout: Layout,
    /// The key slot's first word.
    key: usize,
}

impl<'c, 'w> KeyLine<'c, 'w> {
    pub(super) fn new(c: &'c mut Change<'w>, layout: Layout, slot: usize) -> Self {
        let key = layout.key(slot);
        KeyLine { c, layout, key }
    }

    /// The record a link names, and the seats its waiter asks for.
    fn place(&self, link: u64) -> Option<(usize, u64)> {
        let index = linked(link)?;
        Some((index, self.c.get(self.layout.record(index) + record::N)))
    }

    /// Record `index` holds `grant`.
    pub(super) fn hold(&mut self, index: usize, grant: Grant) {
        let at = self.layout.record(index);
        self.c.set(at + record::STATE, record::HELD);
        self.c.set(at + record::TOKEN, grant.token);
    }

    /// Record `index` waits, at the end of the key's line.
    pub(super) fn join(&mut self, index: usize) {
        let at = self.layout.record(index);
        self.c.set(at + record::STATE, record::WAITING);
        let tail = self.c.get(self.key + key::TAIL);
        self.c.set(at + record::PREV, tail);
        match linked(tail) {
            None => self.c.set(self.key + key::HEAD, link(index)),
            Some(t) => self
                .c
                .set(self.layout.record(t) + record::NEXT, link(index)),
        }
        self.c.set(self.key + key::TAIL, link(index));
        self.c.add(at::WAITING, 1);
    }

    /// Take record `index` out of the key's line.
    fn unlink(&mut self, index: usize) {
        let at = self.layout.record(index);
        let (prev, next) = (self.c.get(at + record::PREV), self.c.get(at + record::NEXT));
        match linked(prev) {
            None => self.c.set(self.key + key::HEAD, next),
            Some(p) => self.c.set(self.layout.record(p) + record::NEXT, next),
        }
        match linked(next) {
            None => self.c.set(self.key + key::TAIL, prev),
            Some(n) => self.c.set(self.layout.record(n) + record::PREV, prev),
        }
        self.c.set(at + record::PREV, 0);
        self.c.set(at + record::NEXT, 0);
        self.c.add(at::WAITING, u64::MAX); // one fewer
    }

    /// Nobody holds a seat of the key, and nobody waits for one: it may be forgotten.
    pub(super) fn idle(&self) -> bool {
        self.c.get(self.key + key::HELD) == 0 && self.c.get(self.key + key::HEAD) == 0
    }
}

impl SeatStore for KeyLine<'_, '_> {
    type Place = usize;

    fn limit(&self) -> u64 {
        self.c.get(at::LIMIT)
    }

    fn set_limit(&mut self, limit: u64) {
        self.c.set(at::LIMIT, limit);
    }

    fn held(&self) -> u64 {
        self.c.get(self.key + key::HELD)
    }

    /// The key's count, and the table's count over every key moved by as much.
    fn set_held(&mut self, held: u64) {
        let by = held.wrapping_sub(self.held());
        self.c.set(self.key + key::HELD, held);
        self.c.add(at::HELD, by);
    }

    fn take_token(&mut self) -> u64 {
        let token = self.c.get(at::NEXT_TOKEN);
        self.c.set(at::NEXT_TOKEN, token + 1);
        token
    }

    fn head(&self) -> Option<(usize, u64)> {
        self.place(self.c.get(self.key + key::HEAD))
    }

    fn behind(&self, index: usize) -> Option<(usize, u64)> {
        self.place(self.c.get(self.layout.record(index) + record::NEXT))
    }

    fn seated(&mut self, index: usize, grant: Grant) {
        self.unlink(index);
        self.hold(index, grant);
        self.c.done();
    }

    /// Its record stays, refused, until its owner looks ([`super::SharedSeats::outcome`]).
    fn refused(&mut self, index: usize) {
        self.unlink(index);
        let at = self.layout.record(index);
        self.c.set(at + record::STATE, record::REFUSED);
        self.c.done();
    }

    fn gave_up(&mut self, index: usize) {
        self.unlink(index);
        free_record(self.c, &self.layout, index);
        self.c.done();
    }
}
