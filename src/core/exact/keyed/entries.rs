//! A shard's keys, each beside its balances as a fixed-size record (see
//! [`record`](crate::core::exact::record)): the one per-key state the in-process table keeps.
//!
//! The record is the shared table's, in the heap instead of a mapped file. Its length is the
//! table's, known when the table is made, so the usual table (one band whose capacity fits 64
//! bits) keeps its two words inline beside the key, and allocates nothing per key; any other
//! keeps them in a box of their own. Both forms answer through [`Stored`], which reads the
//! record as [`Balances`] for the settlement and writes the balances back.

use hashbrown::HashTable;

use crate::core::exact::limiter::Balances;
use crate::core::exact::record::Shape;

/// The keys of one shard and their records, found by the hash the table computed.
pub(super) struct Entries<K> {
    shape: Shape,
    records: Records<K>,
}

enum Records<K> {
    /// One band of 64-bit units: the record's two words inline.
    Inline(HashTable<(K, [u64; 2])>),
    /// Any other shape: the record in a box.
    Boxed(HashTable<(K, Box<[u64]>)>),
}

/// A key's record, found in its shard, to read and write back.
pub(super) struct Stored<'a> {
    shape: Shape,
    words: &'a mut [u64],
}

impl Stored<'_> {
    /// The key's balances.
    pub(super) fn balances(&self) -> Balances {
        self.shape.read(&*self.words)
    }

    /// Store `balances` as the key's.
    pub(super) fn store(&mut self, balances: &Balances) {
        self.shape.write(self.words, balances);
    }
}

impl<K> Entries<K> {
    /// No keys yet, for records of `shape`.
    pub(super) fn new(shape: Shape) -> Self {
        let records = if shape.words() == 2 {
            Records::Inline(HashTable::new())
        } else {
            Records::Boxed(HashTable::new())
        };
        Self { shape, records }
    }

    /// How many keys there are.
    pub(super) fn len(&self) -> usize {
        match &self.records {
            Records::Inline(table) => table.len(),
            Records::Boxed(table) => table.len(),
        }
    }

    /// The record of the key of `hash` for which `is` says yes, if there is one.
    pub(super) fn find(&mut self, hash: u64, is: impl Fn(&K) -> bool) -> Option<Stored<'_>> {
        let words: &mut [u64] = match &mut self.records {
            Records::Inline(table) => &mut table.find_mut(hash, |(key, _)| is(key))?.1,
            Records::Boxed(table) => &mut table.find_mut(hash, |(key, _)| is(key))?.1,
        };
        Some(Stored {
            shape: self.shape,
            words,
        })
    }

    /// Store a key that is not there yet, of `hash`, with `balances`; `hash_of` rehashes the
    /// others if the table grows.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        key: K,
        balances: &Balances,
        hash_of: impl Fn(&K) -> u64,
    ) {
        match &mut self.records {
            Records::Inline(table) => {
                let mut words = [0; 2];
                self.shape.write(&mut words[..], balances);
                table.insert_unique(hash, (key, words), |(key, _)| hash_of(key));
            }
            Records::Boxed(table) => {
                let words = self.shape.record(balances);
                table.insert_unique(hash, (key, words), |(key, _)| hash_of(key));
            }
        }
    }

    /// Remove the key of `hash` for which `is` says yes, and give it back.
    pub(super) fn remove(&mut self, hash: u64, is: impl Fn(&K) -> bool) -> Option<K> {
        let key = match &mut self.records {
            Records::Inline(table) => {
                table
                    .find_entry(hash, |(key, _)| is(key))
                    .ok()?
                    .remove()
                    .0
                     .0
            }
            Records::Boxed(table) => {
                table
                    .find_entry(hash, |(key, _)| is(key))
                    .ok()?
                    .remove()
                    .0
                     .0
            }
        };
        Some(key)
    }

    /// Keep only the keys for which `keep` says yes, given each key's balances.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, &Balances) -> bool) {
        let shape = self.shape;
        match &mut self.records {
            Records::Inline(table) => {
                table.retain(|(key, words)| keep(key, &shape.read(&words[..])));
            }
            Records::Boxed(table) => {
                table.retain(|(key, words)| keep(key, &shape.read(&words[..])));
            }
        }
    }

    /// Every key with its balances, in the table's order.
    pub(super) fn each(&self, mut visit: impl FnMut(&K, Balances)) {
        match &self.records {
            Records::Inline(table) => {
                for (key, words) in table {
                    visit(key, self.shape.read(&words[..]));
                }
            }
            Records::Boxed(table) => {
                for (key, words) in table {
                    visit(key, self.shape.read(&words[..]));
                }
            }
        }
    }

    /// Forget every key.
    pub(super) fn clear(&mut self) {
        match &mut self.records {
            Records::Inline(table) => table.clear(),
            Records::Boxed(table) => table.clear(),
        }
    }
}
