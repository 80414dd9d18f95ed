//! A key as the table stores it, in two words.
//!
//! The in-process table keeps each key beside its record (see
//! [`record`](crate::core::exact::record)), so the key's size is most of an entry's: at one
//! band, a 16-byte key and a 16-byte record make an entry of 32 bytes, where a key of three
//! words made one of 40. So the common keys are held in place, and only the rare ones point
//! elsewhere:
//!
//! * an int within 64 bits, a float, an object's number: its one word;
//! * text, bytes, a tuple or a huge int of at most [`SHORT`] bytes (an IPv4 address, a short
//!   name, a small tuple): its bytes, in place;
//! * text, bytes, a tuple or a huge int longer than that: its bytes in a box of 32, 64 or 128
//!   bytes, the first that holds them (a key longer than
//!   [`LONGEST_KEPT`](super::LONGEST_KEPT) bytes is kept as its digest, see
//!   [`KeyRef::kept`]), with its kind and length in place: one allocation and one pointer to
//!   follow, as a boxed `str` would be, without the `str`'s second word;
//! * an int of 128 bits, a digest: in a box of its own.
//!
//! The table never sees these forms: it hashes and compares a stored key as the [`KeyRef`] it
//! was made from ([`Key::as_ref`]), so a borrowed key finds the stored key it equals.

use std::hash::{Hash, Hasher};

use hashbrown::Equivalent;

use super::{hash_text, Digested, KeyRef, LONGEST_KEPT};

/// The most bytes of text, bytes, a tuple or a huge int held in place: what fits beside the
/// form's tag, the kind and the length in two words.
pub const SHORT: usize = 13;

/// A key as the table stores it: 16 bytes, whatever its kind (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(Form);

/// A key's stored form. The bytes of a string of bytes are zero past its length, so equal
/// keys are equal forms.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    Int(i64),
    Wide(u64),
    Float(u64),
    Object(u64),
    /// An int within `i128` beyond 64 bits: low and high halves.
    Big(Box<[u64; 2]>),
    Digest(Box<(Digested, u64, u64)>),
    /// At most [`SHORT`] bytes, in place.
    Short(Kind, u8, [u8; SHORT]),
    /// At most 32, 64 or [`LONGEST_KEPT`] bytes, boxed.
    Up32(Kind, u8, Box<[u8; 32]>),
    Up64(Kind, u8, Box<[u8; 64]>),
    Up128(Kind, u8, Box<[u8; LONGEST_KEPT]>),
    /// Longer still: only a key that was not [`KeyRef::kept`] (the table never stores one).
    Longer(Box<(Kind, Box<[u8]>)>),
}

/// The kinds of key that are a string of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Huge,
    Str,
    Bytes,
    Tuple,
}

/// `bytes` in an array of `N` zeros (`bytes` holds at most `N`).
fn padded<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut array = [0; N];
    array[..bytes.len()].copy_from_slice(bytes);
    array
}

impl Kind {
    /// The borrowed key of this kind whose bytes are `bytes` (text stored from a `&str`).
    fn key(self, bytes: &[u8]) -> KeyRef<'_> {
        match self {
            Self::Huge => KeyRef::Huge(bytes),
            Self::Str => KeyRef::Str(std::str::from_utf8(bytes).expect("stored from text")),
            Self::Bytes => KeyRef::Bytes(bytes),
            Self::Tuple => KeyRef::Tuple(bytes),
        }
    }
}

impl<'a> KeyRef<'a> {
    /// The kind and the bytes of a key that is a string of bytes.
    #[inline]
    fn as_bytes(&self) -> Option<(Kind, &'a [u8])> {
        match *self {
            Self::Huge(bytes) => Some((Kind::Huge, bytes)),
            Self::Str(text) => Some((Kind::Str, text.as_bytes())),
            Self::Bytes(bytes) => Some((Kind::Bytes, bytes)),
            Self::Tuple(items) => Some((Kind::Tuple, items)),
            _ => None,
        }
    }
}

impl Key {
    /// This key, borrowed: what the table hashes and compares.
    #[must_use]
    #[inline]
    pub fn as_ref(&self) -> KeyRef<'_> {
        match &self.0 {
            Form::Int(value) => KeyRef::Int(*value),
            Form::Wide(value) => KeyRef::Wide(*value),
            Form::Float(bits) => KeyRef::Float(*bits),
            Form::Object(number) => KeyRef::Object(*number),
            Form::Big(halves) => KeyRef::Big(halves[0], halves[1]),
            Form::Digest(digest) => KeyRef::Digest(digest.0, digest.1, digest.2),
            _ => self.bytes_key(),
        }
    }

    /// A string of bytes, borrowed.
    fn bytes_key(&self) -> KeyRef<'_> {
        let (kind, bytes) = self
            .as_bytes()
            .expect("every other form is a string of bytes");
        kind.key(bytes)
    }

    /// The kind and the bytes of a key that is a string of bytes, without reading text as
    /// text.
    #[inline]
    fn as_bytes(&self) -> Option<(Kind, &[u8])> {
        let (kind, length, bytes): (_, _, &[u8]) = match &self.0 {
            Form::Short(kind, length, bytes) => (kind, length, bytes),
            Form::Up32(kind, length, bytes) => (kind, length, &bytes[..]),
            Form::Up64(kind, length, bytes) => (kind, length, &bytes[..]),
            Form::Up128(kind, length, bytes) => (kind, length, &bytes[..]),
            Form::Longer(longer) => return Some((longer.0, &longer.1)),
            _ => return None,
        };
        Some((*kind, &bytes[..usize::from(*length)]))
    }

    /// Whether the table should say when it forgets this key (its owner keeps the object the
    /// number stands for, and must let go of it).
    #[must_use]
    pub fn is_registered(&self) -> bool {
        matches!(self.0, Form::Object(_))
    }
}

/// Hashed as its borrowed form, so that a `KeyRef` finds the `Key` it equals.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.as_bytes() {
            // As `KeyRef` hashes them.
            Some((Kind::Str, utf8)) => hash_text(utf8, state),
            Some((_, bytes)) => bytes.hash(state),
            None => self.as_ref().hash(state),
        }
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    #[inline]
    fn equivalent(&self, key: &Key) -> bool {
        match self.as_bytes() {
            Some(mine) => key.as_bytes() == Some(mine),
            None => *self == key.as_ref(),
        }
    }
}

impl From<&KeyRef<'_>> for Key {
    fn from(key: &KeyRef<'_>) -> Self {
        Self(match *key {
            KeyRef::Int(value) => Form::Int(value),
            KeyRef::Wide(value) => Form::Wide(value),
            KeyRef::Float(bits) => Form::Float(bits),
            KeyRef::Object(number) => Form::Object(number),
            KeyRef::Big(low, high) => Form::Big(Box::new([low, high])),
            KeyRef::Digest(kind, low, high) => Form::Digest(Box::new((kind, low, high))),
            KeyRef::Huge(_) | KeyRef::Str(_) | KeyRef::Bytes(_) | KeyRef::Tuple(_) => {
                let (kind, bytes) = key.as_bytes().expect("a string of bytes");
                match u8::try_from(bytes.len()) {
                    Ok(length) if bytes.len() <= SHORT => Form::Short(kind, length, padded(bytes)),
                    Ok(length) if bytes.len() <= 32 => {
                        Form::Up32(kind, length, Box::new(padded(bytes)))
                    }
                    Ok(length) if bytes.len() <= 64 => {
                        Form::Up64(kind, length, Box::new(padded(bytes)))
                    }
                    Ok(length) if bytes.len() <= LONGEST_KEPT => {
                        Form::Up128(kind, length, Box::new(padded(bytes)))
                    }
                    _ => Form::Longer(Box::new((kind, bytes.into()))),
                }
            }
        })
    }
}
