//! Where everything lives in an in-flight table: one array of 64-bit words, read and written
//! as atomics by every process that maps the table's file.
//!
//! ```text
//! header   magic, version, shape (max_keys, key slots, records), the kind of lock, the key
//!          seed, then the live counts: the limit, the next fencing token, the seats held and
//!          the callers waiting over every key, the keys in use, the head of the free records
//! lock     one process-shared robust mutex for the whole table (see `undo.rs` for what a
//!          holder that dies leaves behind)
//! log      the undo log of the change in progress: (word, old value) pairs
//! owners   one word per process that may use the table: 1 while its byte of the file is
//!          locked by a live process (see `owner_lock.rs`), 0 when free
//! keys     open addressing, linear probing: per key its digest, seats held, and the first and
//!          last record of its line
//! records  one per lease held or caller waiting: state, owner, key digest, seats, token, and
//!          the links of its key's line (a free record's `next` links the free list)
//! ```
//!
//! A record or a line's end is written as its index plus one, so that 0 means none.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::core::exact::shared::layout::LayoutError;
use crate::core::exact::shared::lock;
use crate::process_mutex;

/// The first word of every in-flight table: "QOSSEATS" on a little-endian host.
pub const MAGIC: u64 = u64::from_le_bytes(*b"QOSSEATS");

/// The layout's version.
pub const VERSION: u64 = 1;

/// How many processes may have one table open at once.
pub const OWNERS: usize = 1024;

/// How many words one change may write between two consistent points.
pub const LOG_ENTRIES: usize = 4096;

/// Header words, by index.
pub(super) mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const MAX_KEYS: usize = 2;
    pub const KEY_SLOTS: usize = 3;
    pub const RECORDS: usize = 4;
    pub const LOCK_KIND: usize = 5;
    /// Two words.
    pub const SEED: usize = 6;
    pub const LIMIT: usize = 8;
    pub const NEXT_TOKEN: usize = 9;
    pub const HELD: usize = 10;
    pub const WAITING: usize = 11;
    pub const KEYS: usize = 12;
    pub const FREE: usize = 13;
    pub const LOG_LEN: usize = 14;
    /// Records in use: leases, waiters, and refusals not yet told.
    pub const IN_USE: usize = 15;
    pub const LOCK: usize = 16;
}

/// A key slot's words.
pub(super) mod key {
    pub const USED: usize = 0;
    pub const D0: usize = 1;
    pub const D1: usize = 2;
    pub const HELD: usize = 3;
    pub const HEAD: usize = 4;
    pub const TAIL: usize = 5;
    pub const WORDS: usize = 6;
}

/// A record's words.
pub(super) mod record {
    pub const STATE: usize = 0;
    pub const OWNER: usize = 1;
    pub const D0: usize = 2;
    pub const D1: usize = 3;
    pub const N: usize = 4;
    pub const TOKEN: usize = 5;
    pub const PREV: usize = 6;
    pub const NEXT: usize = 7;
    pub const WORDS: usize = 8;

    /// A record's states (a free record's is 0).
    pub const HELD: u64 = 1;
    pub const WAITING: u64 = 2;
    /// Refused by a smaller limit, not yet told.
    pub const REFUSED: u64 = 3;
}

/// Where the undo log starts: after the lock.
pub(super) const LOG: usize = at::LOCK + lock::WORDS.next_multiple_of(2);

/// Where the owner slots start: after the log.
pub(super) const OWNERS_AT: usize = LOG + 2 * LOG_ENTRIES;

/// Where the key slots start: after the owner slots.
pub(super) const KEYS_AT: usize = OWNERS_AT + OWNERS;

/// An in-flight table's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub max_keys: u64,
    pub key_slots: usize,
    pub records: usize,
}

impl Layout {
    /// Room for `max_keys` keys (at most half the key slots are ever used, so a probe stays
    /// short) and `records` leases and waiters at once.
    ///
    /// # Panics
    ///
    /// If the counts do not fit this machine's memory.
    #[must_use]
    pub fn new(max_keys: u64, records: u64) -> Self {
        let slots = max_keys.max(1).saturating_mul(2).next_power_of_two();
        Layout {
            max_keys: max_keys.max(1),
            key_slots: usize::try_from(slots).expect("key slots fit memory"),
            records: usize::try_from(records.max(1)).expect("records fit memory"),
        }
    }

    pub(super) fn records(&self) -> usize {
        KEYS_AT + self.key_slots * key::WORDS
    }

    /// The index of key slot `slot`'s first word.
    #[allow(clippy::unused_self)] // asked of the shape, beside `record`, which needs it
    pub(super) fn key(&self, slot: usize) -> usize {
        KEYS_AT + slot * key::WORDS
    }

    /// The index of record `index`'s first word.
    pub(super) fn record(&self, index: usize) -> usize {
        self.records() + index * record::WORDS
    }

    /// The table's size in words.
    #[must_use]
    pub fn words(&self) -> usize {
        self.records() + self.records * record::WORDS
    }

    /// Write a new table into `words` (all zero): its header, its lock, every record free.
    pub(super) fn write(&self, words: &[AtomicU64], limit: u64, seed: (u64, u64)) {
        let header = [
            (at::MAGIC, MAGIC),
            (at::VERSION, VERSION),
            (at::MAX_KEYS, self.max_keys),
            (at::KEY_SLOTS, self.key_slots as u64),
            (at::RECORDS, self.records as u64),
            (at::LOCK_KIND, process_mutex::KIND),
            (at::SEED, seed.0),
            (at::SEED + 1, seed.1),
            (at::LIMIT, limit),
            (at::NEXT_TOKEN, 1),
            (at::FREE, 1),
        ];
        for (index, value) in header {
            words[index].store(value, Relaxed);
        }
        lock::init(&words[at::LOCK..]);
        for index in 0..self.records {
            let next = if index + 1 < self.records {
                index + 2
            } else {
                0
            };
            words[self.record(index) + record::NEXT].store(next as u64, Relaxed);
        }
    }

    /// Check that `words` is a table of this shape, before anything else is read.
    ///
    /// # Errors
    ///
    /// What is wrong with it.
    pub(super) fn check(&self, words: &[AtomicU64]) -> Result<(), LayoutError> {
        let word = |index: usize| words.get(index).map(|word| word.load(Relaxed));
        let short = LayoutError::Size {
            words: words.len(),
            expected: None,
        };
        match word(at::MAGIC) {
            Some(MAGIC) => {}
            Some(other) => return Err(LayoutError::Magic(other)),
            None => return Err(short),
        }
        match word(at::VERSION) {
            Some(VERSION) => {}
            Some(other) => return Err(LayoutError::Version(other)),
            None => return Err(short),
        }
        let kind = word(at::LOCK_KIND).ok_or(short)?;
        if kind != process_mutex::KIND {
            return Err(LayoutError::Lock(kind));
        }
        for (index, what, expected) in [
            (at::MAX_KEYS, "max_keys", self.max_keys),
            (at::KEY_SLOTS, "key slots", self.key_slots as u64),
            (at::RECORDS, "records", self.records as u64),
        ] {
            let found = word(index).unwrap_or(0);
            if found != expected {
                return Err(LayoutError::Shape(what, found));
            }
        }
        if words.len() != self.words() {
            return Err(LayoutError::Size {
                words: words.len(),
                expected: Some(self.words()),
            });
        }
        Ok(())
    }
}
