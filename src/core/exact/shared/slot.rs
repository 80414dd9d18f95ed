//! One key's state in a shared table: its digest and its balances, never torn.
//!
//! A process may be killed between any two of its instructions, including halfway through
//! writing a slot. So a slot keeps **two copies** of its balances and a state word that says
//! which one is current:
//!
//! ```text
//! state    bit 0: the slot holds a key; bit 1: which copy is current
//! digest   two words: the key's seeded 128-bit digest
//! copy 0   the key's balances as a record (see [`record`](crate::core::exact::record)):
//!          per band, units (one word, or low and high words when a band's capacity needs
//!          more than 64 bits), settled at
//! copy 1   the same
//! ```
//!
//! A change is written into the copy that is not current, then committed by one atomic store
//! of the state word that makes it current. Killed before that store, the slot is as it was
//! (the half-written copy is not current); after it, the change is whole. A new key is written
//! the same way: digest and balances first, then the state word that says the slot holds it.
//! Forgetting a key is one store of the state word.
//!
//! Every access happens under the bucket's lock ([`lock`](super::lock)), whose acquire and
//! release order it; the words are atomics only because other processes map them too.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::layout::{Layout, SLOT_HEAD_WORDS};
use crate::core::exact::limiter::Balances;
use crate::core::exact::record::Shape;

const USED: u64 = 1;
const SECOND_COPY: u64 = 2;

/// A key's 128-bit digest.
pub type Digest = (u64, u64);

/// One slot: the words at `start`, for the balances of a table of `layout`.
#[derive(Clone, Copy)]
pub struct Slot<'w> {
    words: &'w [AtomicU64],
    record: Shape,
}

impl<'w> Slot<'w> {
    /// The slot whose words begin at `start` in `words`, in a table of `layout`.
    pub fn at(words: &'w [AtomicU64], start: usize, layout: Layout) -> Self {
        Self {
            words: &words[start..start + layout.slot_words()],
            record: layout.record(),
        }
    }

    fn state(&self) -> u64 {
        self.words[0].load(Relaxed)
    }

    /// Whether the slot holds a key.
    #[must_use]
    pub fn is_used(&self) -> bool {
        self.state() & USED != 0
    }

    /// Whether the slot holds the key of `digest`.
    #[must_use]
    pub fn holds(&self, digest: Digest) -> bool {
        self.is_used()
            && self.words[1].load(Relaxed) == digest.0
            && self.words[2].load(Relaxed) == digest.1
    }

    /// The digest of the key the slot holds (meaningful only if it holds one).
    #[must_use]
    pub fn digest(&self) -> Digest {
        (self.words[1].load(Relaxed), self.words[2].load(Relaxed))
    }

    fn copy(&self, second: bool) -> &'w [AtomicU64] {
        let copy_words = self.record.words();
        let start = SLOT_HEAD_WORDS + usize::from(second) * copy_words;
        &self.words[start..start + copy_words]
    }

    /// The current copy's balances.
    #[must_use]
    pub fn balances(&self) -> Balances {
        self.record
            .read(&self.copy(self.state() & SECOND_COPY != 0))
    }

    fn write_copy(&self, second: bool, balances: &Balances) {
        self.record.write(&mut self.copy(second), balances);
    }

    /// Store `balances` as the key's: written into the spare copy, then made current by one
    /// store.
    pub fn commit(&self, balances: &Balances) {
        let state = self.state();
        let spare = state & SECOND_COPY == 0;
        self.write_copy(spare, balances);
        self.words[0].store(USED | if spare { SECOND_COPY } else { 0 }, Relaxed);
    }

    /// Hold a new key, `digest`, with `balances`: everything written first, then the one store
    /// that says the slot holds it. The slot must be free.
    pub fn fill(&self, digest: Digest, balances: &Balances) {
        debug_assert!(!self.is_used(), "a free slot");
        self.words[1].store(digest.0, Relaxed);
        self.words[2].store(digest.1, Relaxed);
        self.write_copy(false, balances);
        self.words[0].store(USED, Relaxed);
    }

    /// Forget the key: one store.
    pub fn free(&self) {
        self.words[0].store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exact::settle::Balance;

    fn layout(bands: usize, wide: bool) -> Layout {
        Layout::new(bands, 8, 44, wide)
    }

    fn words(count: usize) -> Vec<AtomicU64> {
        (0..count).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_filled_slot_reads_back_and_commits_alternate_copies() {
        let words = words(40);
        let slot = Slot::at(&words, 3, layout(2, true));
        assert!(!slot.is_used());
        let first = Balances::settled(&[u128::MAX - 5, 7], -3);
        slot.fill((1, 2), &first);
        assert!(slot.holds((1, 2)) && !slot.holds((1, 3)));
        assert_eq!(slot.balances(), first);
        let second = Balances::settled(&[1 << 70, 0], 9);
        slot.commit(&second);
        assert_eq!(slot.balances(), second);
        slot.commit(&first);
        assert_eq!(slot.balances(), first);
        slot.free();
        assert!(!slot.is_used() && !slot.holds((1, 2)));
    }

    #[test]
    fn a_write_cut_short_before_its_commit_leaves_the_slot_as_it_was() {
        let words = words(20);
        let slot = Slot::at(&words, 0, layout(1, false));
        let before = Balances::settled(&[5], 1);
        slot.fill((4, 4), &before);
        // Everything a commit writes, except the final store of the state word.
        slot.write_copy(true, &Balances::settled(&[99], 2));
        assert_eq!(slot.balances(), before);
    }

    #[test]
    fn a_balance_never_settled_stays_so() {
        let words = words(20);
        let slot = Slot::at(&words, 0, layout(1, false));
        let fresh: Balances = vec![Balance {
            units: 3,
            settled_at: None,
        }]
        .into();
        slot.fill((0, 0), &fresh);
        assert_eq!(slot.balances(), fresh);
    }
}
