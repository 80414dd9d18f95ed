//! Keys of mixed kinds for a keyed table: ints, floats, text, bytes, and numbered objects.
//!
//! [`KeyedLimiter`](super::keyed::KeyedLimiter) takes any key type; this is the one the Python
//! glue stores, so that `1`, `"a"` and `b"a"` can be keys of one table, each hashed by the
//! table's seeded hash with no Python code. It lives in the core, with no Python in it, so that
//! `cargo bench --bench keyed_floor` times the table the glue really uses. What each Python
//! value becomes is the glue's business (`src/python/keys.rs`).

use std::hash::{Hash, Hasher};

use hashbrown::Equivalent;

/// A key as the table stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Int(i64),
    /// An int from 2**63 to 2**64 - 1 (a uint64 that no `i64` holds).
    Wide(u64),
    /// Any other int within `i128`, as its low and high halves.
    Big(u64, u64),
    /// A float that is not an integer (an infinity included), by its bits (never a NaN).
    Float(u64),
    Str(Box<str>),
    Bytes(Box<[u8]>),
    /// A number the table's owner gave an object key of its own (the Python glue's registry
    /// numbers every key that is none of the above).
    Object(u64),
}

/// A key as a call looks it up: borrowed from the caller's value, so a lookup allocates
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    Int(i64),
    Wide(u64),
    Big(u64, u64),
    Float(u64),
    Str(&'a str),
    Bytes(&'a [u8]),
    Object(u64),
}

impl Key {
    fn as_ref(&self) -> KeyRef<'_> {
        match self {
            Self::Int(value) => KeyRef::Int(*value),
            Self::Wide(value) => KeyRef::Wide(*value),
            Self::Big(low, high) => KeyRef::Big(*low, *high),
            Self::Float(bits) => KeyRef::Float(*bits),
            Self::Str(text) => KeyRef::Str(text),
            Self::Bytes(bytes) => KeyRef::Bytes(bytes),
            Self::Object(id) => KeyRef::Object(*id),
        }
    }

    /// Whether the table should say when it forgets this key (its owner keeps the object the
    /// number stands for, and must let go of it).
    #[must_use]
    pub fn is_registered(&self) -> bool {
        matches!(self, Self::Object(_))
    }
}

/// Hashed as its borrowed form, so that a `KeyRef` finds the `Key` it equals.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

/// One write to the hasher per key (two for a `Big` one), none for its kind: keys of different
/// kinds may share a hash (an int and an object number), which equality sorts out, and the hot
/// path hashes on every call.
impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match *self {
            #[allow(clippy::cast_sign_loss)] // the bits, not the value
            Self::Int(value) => state.write_u64(value as u64),
            Self::Wide(value) | Self::Float(value) | Self::Object(value) => state.write_u64(value),
            Self::Big(low, high) => {
                state.write_u64(low);
                state.write_u64(high);
            }
            Self::Str(text) => text.hash(state),
            Self::Bytes(bytes) => bytes.hash(state),
        }
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self == key.as_ref()
    }
}

impl From<&KeyRef<'_>> for Key {
    fn from(key: &KeyRef<'_>) -> Self {
        match *key {
            KeyRef::Int(value) => Self::Int(value),
            KeyRef::Wide(value) => Self::Wide(value),
            KeyRef::Big(low, high) => Self::Big(low, high),
            KeyRef::Float(bits) => Self::Float(bits),
            KeyRef::Str(text) => Self::Str(text.into()),
            KeyRef::Bytes(bytes) => Self::Bytes(bytes.into()),
            KeyRef::Object(id) => Self::Object(id),
        }
    }
}

/// An int within `i128` as a plain key: `Int` within `i64`, `Wide` up to `2**64 - 1`, `Big`
/// beyond.
#[must_use]
pub fn plain_int(value: i128) -> KeyRef<'static> {
    i64::try_from(value).map_or_else(
        |_| {
            u64::try_from(value).map_or_else(
                |_| {
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // halves
                    KeyRef::Big(value as u64, (value >> 64) as u64)
                },
                KeyRef::Wide,
            )
        },
        KeyRef::Int,
    )
}
