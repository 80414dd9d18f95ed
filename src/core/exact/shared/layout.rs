//! Where everything lives in a shared table: one array of 64-bit words, a header, then buckets.
//!
//! A table is read and written by several processes at once, each through its own mapping of
//! the same file, so nothing in it may be a pointer or a Rust type with a layout of its own:
//! everything is a 64-bit word at a fixed index, read and written as an atomic. This module
//! only computes those indices and writes and checks the header; what the words mean while
//! deciding is [`slot`](super::slot)'s and [`lock`](super::lock)'s business.
//!
//! ```text
//! header   magic, version, shape (bands, buckets, slots per bucket, max_keys), the key seed,
//!          the boot the clock readings belong to, the table's clock, the kind of lock it
//!          holds, and the limit's configuration in its canonical encoding (config.rs), packed
//!          8 bytes to a word
//! bucket   a lock (a process-shared robust mutex, see `lock.rs`: five words with glibc on
//!          x86-64), four counters (allowed, denied, refused, forgotten: counted under the
//!          bucket's lock, so that no shared word is written by every decision), a clock word
//!          (the one-key form's clock, kept beside its one lock), then `slots_per_bucket`
//!          slots
//! slot     a state word, the key's 128-bit digest, and two copies of the balances: for each
//!          band its units and its settlement time. Units take one word when every band's
//!          capacity fits 64 bits (a slot of one band is then 56 bytes), two (low, high)
//!          otherwise
//! ```
//!
//! A table's size follows from its header alone, so a file of any other size is refused
//! before a single slot is read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::lock;
use crate::core::exact::record::Shape;
use crate::process_mutex;

/// The first word of every table: the bytes "QOSTABLE" on a little-endian host. Words are in
/// the host's byte order (every process maps them as they are), so a file carried to a host of
/// the other order reads "ELBATSOQ" there, and is refused as no table.
pub const MAGIC: u64 = u64::from_le_bytes(*b"QOSTABLE");

/// The layout's version: a table written by a version with another layout is refused.
/// (Version 1 had a lock word per bucket whose owner was read from `/proc`.)
pub const VERSION: u64 = 2;

/// The most slots a bucket holds; a table of fewer keys has one bucket of that many.
pub const MOST_SLOTS_PER_BUCKET: u64 = 8;

/// The most bands a table holds: a slot of that many bands is still under 2 KiB.
pub const MOST_BANDS: u64 = 32;

/// The most keys a table holds: about 2^32, far more than a mapping of a few GiB.
pub const MOST_KEYS: u64 = 1 << 32;

/// Header words, by index.
pub(super) mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const BANDS: usize = 2;
    pub const BUCKETS: usize = 3;
    pub const SLOTS_PER_BUCKET: usize = 4;
    pub const MAX_KEYS: usize = 5;
    /// Two words: the seed of the keys' digests.
    pub const SEED: usize = 6;
    /// Two words: the boot the table's times were read in (see `Table::open`).
    pub const BOOT: usize = 8;
    /// The latest time any call has used, biased so that unsigned order is signed order.
    pub const LATEST: usize = 10;
    /// Words per band in one copy of a slot: 2 (units fit one word) or 3.
    pub const BAND_WORDS: usize = 11;
    /// The configuration's length in bytes; its bytes follow the lock's kind.
    pub const CONFIG_BYTES: usize = 12;
    /// The kind of the buckets' locks ([`process_mutex::KIND`](crate::process_mutex::KIND)).
    pub const LOCK_KIND: usize = 13;
    pub const CONFIG: usize = 14;
}

/// Words at the start of a bucket: its lock, its counters in the order of
/// [`Stats`](crate::core::exact::keyed::Stats)' fields, and its clock word.
pub(super) const BUCKET_HEAD_WORDS: usize = lock::WORDS + 5;
/// The first counter's place in a bucket's head.
pub(super) const BUCKET_COUNTERS: usize = lock::WORDS;
/// The clock word's place in a bucket's head (used by the one-key form's one bucket).
pub(super) const BUCKET_CLOCK: usize = lock::WORDS + 4;

/// Words before a slot's balances: its state and its key's digest (two words).
pub(super) const SLOT_HEAD_WORDS: usize = 3;

#[allow(clippy::cast_possible_truncation)] // the low half, on purpose
fn boot_low(boot: u128) -> u64 {
    boot as u64
}

/// A table's shape: how many words each part takes, and where each one starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub bands: usize,
    /// Words per band in a copy: 2 when every band's capacity in units fits 64 bits, else 3.
    pub band_words: usize,
    pub buckets: usize,
    pub slots_per_bucket: usize,
    pub max_keys: u64,
    config_bytes: usize,
}

/// Why an array of words is not a table this process can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// Its locks are of another C library's kind (see [`process_mutex::KIND`]).
    Lock(u64),
    /// Too short to hold a header, or a size other than its header implies.
    Size {
        words: usize,
        expected: Option<usize>,
    },
    /// The first word is not [`MAGIC`].
    Magic(u64),
    /// Written by a version of another layout.
    Version(u64),
    /// The header's shape is out of range.
    Shape(&'static str, u64),
    /// A table of another limit (or another `max_keys`) at the place this one's should be.
    Other,
}

impl std::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Size {
                words,
                expected: None,
            } => write!(f, "{} bytes is too short for a table's header", words * 8),
            Self::Size {
                words,
                expected: Some(expected),
            } => write!(
                f,
                "the file holds {} bytes where its header says {}: it was truncated or \
                 overwritten",
                words * 8,
                expected * 8
            ),
            Self::Magic(word) => write!(f, "not a rate-limit table (first word {word:#018x})"),
            Self::Version(version) => write!(
                f,
                "a table of layout version {version}, where this version reads {VERSION}"
            ),
            Self::Shape(what, value) => write!(f, "a header with {what} = {value}"),
            Self::Other => f.write_str("a table of another configuration"),
            Self::Lock(kind) => write!(
                f,
                "its locks are of kind {kind:#x}, where this program's are {:#x}: it was made \
                 by a program built against another C library (glibc and musl differ)",
                process_mutex::KIND
            ),
        }
    }
}

impl std::error::Error for LayoutError {}

impl Layout {
    /// The shape of a table of `bands` bands and `max_keys` keys (at least 1, at most
    /// [`MOST_KEYS`]), whose configuration encodes in `config_bytes` bytes; `wide` if some
    /// band's capacity in units needs more than 64 bits.
    ///
    /// # Panics
    ///
    /// Never: the bucket count is at most 2^32, which a usize of 64 bits holds.
    #[must_use]
    pub fn new(bands: usize, max_keys: u64, config_bytes: usize, wide: bool) -> Self {
        let max_keys = max_keys.clamp(1, MOST_KEYS);
        let per_bucket = max_keys.min(MOST_SLOTS_PER_BUCKET);
        let buckets = max_keys.div_ceil(per_bucket);
        Self {
            bands,
            band_words: Shape::new(bands, wide).band_words,
            buckets: usize::try_from(buckets).expect("at most 2^32 buckets"),
            slots_per_bucket: usize::try_from(per_bucket).expect("at most 8"),
            max_keys,
            config_bytes,
        }
    }

    /// The record one copy of a slot's balances is (see [`crate::core::exact::record`]).
    #[must_use]
    pub fn record(&self) -> Shape {
        Shape {
            bands: self.bands,
            band_words: self.band_words,
        }
    }

    /// Words of one copy of a slot's balances.
    pub(super) fn copy_words(&self) -> usize {
        self.record().words()
    }

    /// Words of one slot.
    #[must_use]
    pub fn slot_words(&self) -> usize {
        SLOT_HEAD_WORDS + 2 * self.copy_words()
    }

    fn bucket_words(&self) -> usize {
        BUCKET_HEAD_WORDS + self.slots_per_bucket * self.slot_words()
    }

    fn header_words(&self) -> usize {
        at::CONFIG + self.config_bytes.div_ceil(8)
    }

    /// The table's size in words.
    #[must_use]
    pub fn words(&self) -> usize {
        self.header_words() + self.buckets * self.bucket_words()
    }

    /// The index of bucket `bucket`'s first word, its lock's; its counters, its clock word,
    /// then its slots, follow.
    pub(super) fn bucket(&self, bucket: usize) -> usize {
        self.header_words() + bucket * self.bucket_words()
    }

    /// The index of slot `slot` of bucket `bucket`.
    pub(super) fn slot(&self, bucket: usize, slot: usize) -> usize {
        self.bucket(bucket) + BUCKET_HEAD_WORDS + slot * self.slot_words()
    }

    /// The slots a table holds: `max_keys` rounded up to whole buckets.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.buckets * self.slots_per_bucket
    }

    /// Write a new table's header into `words` (all zero, [`Layout::words`] long).
    pub fn write_header(&self, words: &[AtomicU64], config: &[u8], seed: (u64, u64), boot: u128) {
        let header = [
            (at::MAGIC, MAGIC),
            (at::VERSION, VERSION),
            (at::BANDS, self.bands as u64),
            (at::BAND_WORDS, self.band_words as u64),
            (at::BUCKETS, self.buckets as u64),
            (at::SLOTS_PER_BUCKET, self.slots_per_bucket as u64),
            (at::MAX_KEYS, self.max_keys),
            (at::SEED, seed.0),
            (at::SEED + 1, seed.1),
            (at::BOOT, (boot >> 64) as u64),
            (at::BOOT + 1, boot_low(boot)),
            (at::LATEST, 0),
            (at::CONFIG_BYTES, config.len() as u64),
            (at::LOCK_KIND, process_mutex::KIND),
        ];
        for (index, value) in header {
            words[index].store(value, Relaxed);
        }
        for (index, chunk) in config.chunks(8).enumerate() {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            words[at::CONFIG + index].store(u64::from_be_bytes(word), Relaxed);
        }
    }

    /// The layout of the table in `words`, checked against its size, and its configuration's
    /// encoding. Reads only the header, after checking that it is there.
    ///
    /// # Errors
    ///
    /// If `words` is not a table of this version, or its size is not what its header says.
    ///
    /// # Panics
    ///
    /// Never: each count is checked against its bound before it is converted.
    pub fn read(words: &[AtomicU64]) -> Result<(Self, Vec<u8>), LayoutError> {
        let too_short = LayoutError::Size {
            words: words.len(),
            expected: None,
        };
        let word = |index: usize| words.get(index).map(|word| word.load(Relaxed));
        let magic = word(at::MAGIC).ok_or(too_short.clone())?;
        if magic != MAGIC {
            return Err(LayoutError::Magic(magic));
        }
        let version = word(at::VERSION).ok_or(too_short.clone())?;
        if version != VERSION {
            return Err(LayoutError::Version(version));
        }
        let config_bytes = word(at::CONFIG_BYTES).ok_or(too_short.clone())?;

        let bands = word(at::BANDS).ok_or(too_short.clone())?;
        let max_keys = word(at::MAX_KEYS).ok_or(too_short.clone())?;
        if !(1..=MOST_BANDS).contains(&bands) {
            return Err(LayoutError::Shape("bands", bands));
        }
        if !(1..=MOST_KEYS).contains(&max_keys) {
            return Err(LayoutError::Shape("max_keys", max_keys));
        }
        if config_bytes > 8 * MOST_BANDS * 8 {
            return Err(LayoutError::Shape("configuration bytes", config_bytes));
        }
        let band_words = word(at::BAND_WORDS).ok_or(too_short.clone())?;
        let wide = match band_words {
            2 => false,
            3 => true,
            _ => return Err(LayoutError::Shape("words per band", band_words)),
        };
        let layout = Self::new(
            usize::try_from(bands).expect("at most 32"),
            max_keys,
            usize::try_from(config_bytes).expect("a few KiB"),
            wide,
        );
        for (index, value) in [
            (at::BUCKETS, layout.buckets as u64),
            (at::SLOTS_PER_BUCKET, layout.slots_per_bucket as u64),
        ] {
            if word(index) != Some(value) {
                return Err(LayoutError::Shape(
                    "a bucket count",
                    word(index).unwrap_or(0),
                ));
            }
        }
        let lock_kind = word(at::LOCK_KIND).ok_or(too_short.clone())?;
        if lock_kind != process_mutex::KIND {
            return Err(LayoutError::Lock(lock_kind));
        }
        if words.len() != layout.words() {
            return Err(LayoutError::Size {
                words: words.len(),
                expected: Some(layout.words()),
            });
        }
        let mut config = Vec::with_capacity(layout.config_bytes);
        for index in 0..layout.config_bytes.div_ceil(8) {
            config.extend_from_slice(&words[at::CONFIG + index].load(Relaxed).to_be_bytes());
        }
        config.truncate(layout.config_bytes);
        Ok((layout, config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed(words: usize) -> Vec<AtomicU64> {
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_written_header_reads_back() {
        let layout = Layout::new(2, 100, 84, true);
        let words = zeroed(layout.words());
        let config: Vec<u8> = (0..84).collect();
        layout.write_header(&words, &config, (1, 2), 3);
        assert_eq!(Layout::read(&words), Ok((layout, config)));
        assert_eq!(layout.capacity(), 104);
        assert_eq!(layout.slot_words(), 3 + 2 * 6);
        assert_eq!(Layout::new(1, 100, 44, false).slot_words(), 3 + 2 * 2);
    }

    #[test]
    fn one_key_is_one_bucket_of_one_slot() {
        let layout = Layout::new(1, 1, 44, false);
        assert_eq!((layout.buckets, layout.slots_per_bucket), (1, 1));
    }

    #[test]
    fn anything_else_is_refused_before_a_slot_is_read() {
        let layout = Layout::new(1, 10, 44, false);
        let words = zeroed(layout.words());
        assert_eq!(Layout::read(&words[..3]), Err(LayoutError::Magic(0)));
        layout.write_header(&words, &[7; 44], (1, 2), 3);
        assert!(matches!(
            Layout::read(&words[..words.len() - 1]),
            Err(LayoutError::Size {
                expected: Some(_),
                ..
            })
        ));
        assert!(matches!(
            Layout::read(&words[..2]),
            Err(LayoutError::Size { expected: None, .. })
        ));
        words[at::VERSION].store(1, Relaxed);
        assert_eq!(Layout::read(&words), Err(LayoutError::Version(1)));
        words[at::VERSION].store(VERSION, Relaxed);
        words[at::LOCK_KIND].store(process_mutex::KIND ^ 0x300, Relaxed);
        assert!(matches!(Layout::read(&words), Err(LayoutError::Lock(_))));
        words[at::LOCK_KIND].store(process_mutex::KIND, Relaxed);
        words[at::BANDS].store(0, Relaxed);
        assert_eq!(Layout::read(&words), Err(LayoutError::Shape("bands", 0)));
    }
}
