//! Changes that a holder killed halfway through leaves undone, not torn.
//!
//! A change to an in-flight table writes several words (a record, its key's line, the
//! counts), and the process writing them may be killed between any two. Every write goes
//! through a [`Change`], which first notes the word's old value in the table's undo log and
//! counts it there, then writes the new value. When the change reaches a consistent point
//! ([`Change::done`]) the log is emptied by one store. A process that takes the table's lock
//! from a dead holder finds the log not empty and writes the old values back, newest first
//! ([`roll_back`]): the table is as it was at the dead holder's last consistent point. (A
//! change cut short by a panic leaves its log as a dead holder's does, and the next taker of
//! the lock undoes it the same way.)
//!
//! A write killed after its note but before its count leaves a note nobody reads (the word was
//! not written yet); one killed after its count but before the word is written has a note
//! whose old value is the word's value still. Either way the roll back is exact.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::layout::{at, LOG_ENTRIES};

/// Writes to a table, each noted in its undo log until [`Change::done`].
pub(super) struct Change<'w> {
    words: &'w [AtomicU64],
    log: usize,
    len: usize,
}

impl<'w> Change<'w> {
    /// A change to `words`, whose undo log starts at word `log`. Only with the table's lock
    /// held, and its log empty.
    pub(super) fn new(words: &'w [AtomicU64], log: usize) -> Self {
        Change { words, log, len: 0 }
    }

    #[inline]
    pub(super) fn get(&self, index: usize) -> u64 {
        self.words[index].load(Relaxed)
    }

    /// Write `value` at `index`, its old value noted first.
    ///
    /// # Panics
    ///
    /// If one step writes more than [`LOG_ENTRIES`] words (no step does: the longest moves a
    /// cluster of keys, a few dozen words at most).
    #[inline]
    pub(super) fn set(&mut self, index: usize, value: u64) {
        let old = self.get(index);
        if old == value {
            return;
        }
        assert!(
            self.len < LOG_ENTRIES,
            "a step wrote more words than its log holds"
        );
        let entry = self.log + 2 * self.len;
        self.words[entry].store(index as u64, Relaxed);
        self.words[entry + 1].store(old, Relaxed);
        self.len += 1;
        self.words[at::LOG_LEN].store(self.len as u64, Relaxed);
        self.words[index].store(value, Relaxed);
    }

    /// Add `by` (which may wrap as a negative) to the word at `index`.
    #[inline]
    pub(super) fn add(&mut self, index: usize, by: u64) {
        self.set(index, self.get(index).wrapping_add(by));
    }

    /// A consistent point: what was written stays, whatever happens next.
    #[inline]
    pub(super) fn done(&mut self) {
        if self.len != 0 {
            self.words[at::LOG_LEN].store(0, Relaxed);
            self.len = 0;
        }
    }
}

/// Undo what a dead holder of the lock left half written (see the module's docs). Only with
/// the table's lock held.
pub(super) fn roll_back(words: &[AtomicU64], log: usize) {
    let len = usize::try_from(words[at::LOG_LEN].load(Relaxed))
        .unwrap_or(0)
        .min(LOG_ENTRIES);
    for entry in (0..len).rev() {
        let index = words[log + 2 * entry].load(Relaxed);
        let old = words[log + 2 * entry + 1].load(Relaxed);
        if let Some(word) = usize::try_from(index).ok().and_then(|i| words.get(i)) {
            word.store(old, Relaxed);
        }
    }
    words[at::LOG_LEN].store(0, Relaxed);
}
