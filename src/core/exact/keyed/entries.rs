//! A shard's keys, each beside its balances as a fixed-size record (see
//! [`record`](crate::core::exact::record)): the one per-key state the in-process table keeps.
//!
//! The record is the shared table's, in the heap instead of a mapped file. Its length is the
//! table's, known when the table is made, so the usual tables (one band, of 64-bit units or
//! wider) keep their two or three words inline beside the key, and allocate nothing per key;
//! any other keeps them in a box of its own. Every form answers through [`Stored`], which
//! reads the record as [`Balances`] for the settlement and writes the balances back.

use hashbrown::HashTable;

use crate::core::exact::limiter::Balances;
use crate::core::exact::record::Shape;

/// The keys of one shard and their records, found by the hash the table computed.
pub(super) struct Entries<K> {
    shape: Shape,
    records: Records<K>,
}

/// A shard's table, for records of one length: inline arrays, or boxes.
enum Records<K> {
    /// One band of 64-bit units.
    Two(HashTable<(K, [u64; 2])>),
    /// One band of wider units.
    Three(HashTable<(K, [u64; 3])>),
    /// Several bands.
    Boxed(HashTable<(K, Box<[u64]>)>),
}

/// What a record's words are kept in.
trait Words: AsRef<[u64]> + AsMut<[u64]> {
    /// `count` zero words (as many as the form holds, for an array).
    fn zeros(count: usize) -> Self;
}

impl<const N: usize> Words for [u64; N] {
    fn zeros(count: usize) -> Self {
        debug_assert_eq!(count, N, "a record of this length");
        [0; N]
    }
}

impl Words for Box<[u64]> {
    fn zeros(count: usize) -> Self {
        vec![0; count].into_boxed_slice()
    }
}

/// `balances` as a record of `shape`, kept in `W`.
fn record<W: Words>(shape: Shape, balances: &Balances) -> W {
    let mut words = W::zeros(shape.words());
    shape.write(words.as_mut(), balances);
    words
}

/// `$body`, with `$table` the shard's table, whichever form it has: the same code for each.
macro_rules! in_table {
    ($records:expr, $table:ident => $body:expr) => {
        match $records {
            Records::Two($table) => $body,
            Records::Three($table) => $body,
            Records::Boxed($table) => $body,
        }
    };
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
        let records = match shape.words() {
            2 => Records::Two(HashTable::new()),
            3 => Records::Three(HashTable::new()),
            _ => Records::Boxed(HashTable::new()),
        };
        Self { shape, records }
    }

    /// How many keys there are.
    pub(super) fn len(&self) -> usize {
        in_table!(&self.records, table => table.len())
    }

    /// The record of the key of `hash` for which `is` says yes, if there is one.
    pub(super) fn find(&mut self, hash: u64, is: impl Fn(&K) -> bool) -> Option<Stored<'_>> {
        let words = in_table!(&mut self.records, table => {
            table.find_mut(hash, |(key, _)| is(key))?.1.as_mut()
        });
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
        let shape = self.shape;
        in_table!(&mut self.records, table => {
            table.insert_unique(hash, (key, record(shape, balances)), |(key, _)| hash_of(key));
        });
    }

    /// Remove the key of `hash` for which `is` says yes, and give it back.
    pub(super) fn remove(&mut self, hash: u64, is: impl Fn(&K) -> bool) -> Option<K> {
        let key = in_table!(&mut self.records, table => {
            table.find_entry(hash, |(key, _)| is(key)).ok()?.remove().0 .0
        });
        Some(key)
    }

    /// Keep only the keys for which `keep` says yes, given each key's balances.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, &Balances) -> bool) {
        let shape = self.shape;
        in_table!(&mut self.records, table => {
            table.retain(|(key, words)| keep(key, &shape.read(words.as_ref())));
        });
    }

    /// Every key with its balances, in the table's order.
    pub(super) fn each(&self, mut visit: impl FnMut(&K, Balances)) {
        in_table!(&self.records, table => {
            for (key, words) in table {
                visit(key, self.shape.read(words.as_ref()));
            }
        });
    }

    /// Forget every key.
    pub(super) fn clear(&mut self) {
        in_table!(&mut self.records, table => table.clear());
    }
}

#[cfg(test)]
mod tests;
