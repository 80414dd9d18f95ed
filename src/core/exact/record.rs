//! A key's balances as a fixed-size record of 64-bit words: the one form both keyed tables
//! store them in, the in-process table in its heap and the shared table in a mapped file.
//!
//! The decisions themselves run on [`Balances`], the state as the settlement reads it. A table
//! keeps each key's state in this record instead, for three reasons:
//!
//! * **Fixed size.** Every key of a table has the same bands, so every record has the same
//!   length, known when the table is made: a table can be an array of records (the shared
//!   one), or keep a record inline beside its key (the in-process one).
//! * **Small.** A band's capacity in units nearly always fits 64 bits, and then its balance
//!   does too: two words per band, a quarter less than a `u128` and an `Option<i64>`. Only a
//!   table with some band beyond that ("wide") spends a third word on each band.
//! * **Plain words**, with no pointer and no padding, so another process can read what this
//!   one wrote.
//!
//! ```text
//! per band, in the order of the specs:
//!   narrow  [units, settled at]
//!   wide    [units low, units high, settled at]
//! settled at: the nanosecond as an i64's bits; i64::MIN for a balance never anchored
//! ```
//!
//! Where the words live is the [`Cells`] trait's business: plain `u64`s in the heap, or
//! atomics that other processes map (written only under a lock, so each word is loaded and
//! stored on its own, `Relaxed`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::core::exact::limiter::Balances;
use crate::core::exact::rate::BandSpec;
use crate::core::exact::settle::Balance;

/// A settlement time that was never set, as stored (no call has anchored the balance).
const NEVER_SETTLED: i64 = i64::MIN;

/// Words per band: units (one word, or low and high), then the settlement time.
const NARROW_BAND_WORDS: usize = 2;
const WIDE_BAND_WORDS: usize = 3;

/// The shape of a table's records: how many bands, and how many words each takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    pub bands: usize,
    /// 2 when every band's capacity in units fits 64 bits, else 3.
    pub band_words: usize,
}

impl Shape {
    /// The records of `bands` bands, `wide` if some band's capacity needs more than 64 bits.
    #[must_use]
    pub fn new(bands: usize, wide: bool) -> Self {
        Self {
            bands,
            band_words: if wide {
                WIDE_BAND_WORDS
            } else {
                NARROW_BAND_WORDS
            },
        }
    }

    /// The records that hold balances of `specs`: narrow unless some capacity needs more than
    /// 64 bits.
    #[must_use]
    pub fn of(specs: &[BandSpec]) -> Self {
        let wide = specs
            .iter()
            .any(|spec| u64::try_from(spec.capacity_units()).is_err());
        Self::new(specs.len(), wide)
    }

    /// Whether a band takes three words.
    #[must_use]
    pub fn is_wide(&self) -> bool {
        self.band_words == WIDE_BAND_WORDS
    }

    /// Words of one record.
    #[must_use]
    pub fn words(&self) -> usize {
        self.band_words * self.bands
    }

    /// The balances `cells` hold (a record of this shape).
    #[must_use]
    #[inline]
    pub fn read<C: Cells + ?Sized>(&self, cells: &C) -> Balances {
        debug_assert_eq!(cells.count(), self.words(), "one record");
        if self.bands == 1 {
            // One band, as there usually is: inline, nothing allocated.
            return Balances::One(self.read_band(cells, 0));
        }
        (0..self.bands)
            .map(|band| self.read_band(cells, band * self.band_words))
            .collect::<Vec<_>>()
            .into()
    }

    /// Store `balances` (one per band, none beyond a narrow record's 64 bits) into `cells`.
    #[inline]
    pub fn write<C: Cells + ?Sized>(&self, cells: &mut C, balances: &Balances) {
        debug_assert_eq!(cells.count(), self.words(), "one record");
        debug_assert_eq!(balances.len(), self.bands, "one balance per band");
        for (band, balance) in balances.iter().enumerate() {
            self.write_band(cells, band * self.band_words, balance);
        }
    }

    #[inline]
    fn read_band<C: Cells + ?Sized>(&self, cells: &C, at: usize) -> Balance {
        let units = if self.is_wide() {
            u128::from(cells.get(at)) | (u128::from(cells.get(at + 1)) << 64)
        } else {
            u128::from(cells.get(at))
        };
        #[allow(clippy::cast_possible_wrap)] // the word holds an i64's bits
        let settled_at = cells.get(at + self.band_words - 1) as i64;
        Balance {
            units,
            settled_at: (settled_at != NEVER_SETTLED).then_some(settled_at),
        }
    }

    #[inline]
    fn write_band<C: Cells + ?Sized>(&self, cells: &mut C, at: usize, balance: &Balance) {
        // Truncations meant: the low and the high word of the units.
        #[allow(clippy::cast_possible_truncation)]
        cells.put(at, balance.units as u64);
        if self.is_wide() {
            #[allow(clippy::cast_possible_truncation)]
            cells.put(at + 1, (balance.units >> 64) as u64);
        } else {
            // A narrow table's every capacity fits 64 bits, and no balance exceeds its capacity.
            debug_assert!(
                u64::try_from(balance.units).is_ok(),
                "units within the capacity"
            );
        }
        #[allow(clippy::cast_sign_loss)] // the word holds an i64's bits
        cells.put(
            at + self.band_words - 1,
            balance.settled_at.unwrap_or(NEVER_SETTLED) as u64,
        );
    }
}

/// Where a record's words live: read and written one word at a time.
pub trait Cells {
    /// How many words there are.
    fn count(&self) -> usize;
    /// The word at `index`.
    fn get(&self, index: usize) -> u64;
    /// Store `word` at `index`.
    fn put(&mut self, index: usize, word: u64);
}

/// Words in the heap, owned by one table behind its lock.
impl Cells for [u64] {
    fn count(&self) -> usize {
        self.len()
    }

    fn get(&self, index: usize) -> u64 {
        self[index]
    }

    fn put(&mut self, index: usize, word: u64) {
        self[index] = word;
    }
}

/// Words another process may map too, each loaded and stored on its own: the lock that
/// guards them orders the accesses.
impl Cells for &[AtomicU64] {
    fn count(&self) -> usize {
        self.len()
    }

    fn get(&self, index: usize) -> u64 {
        self[index].load(Relaxed)
    }

    fn put(&mut self, index: usize, word: u64) {
        self[index].store(word, Relaxed);
    }
}

#[cfg(test)]
mod tests;
