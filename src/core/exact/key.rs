//! Keys of mixed kinds for a keyed table: ints of any size, floats, text, bytes, tuples of
//! these, and numbered objects.
//!
//! [`KeyedLimiter`](super::keyed::KeyedLimiter) takes any key type; this is the one the Python
//! glue stores, so that `1`, `"a"` and `b"a"` can be keys of one table, each hashed by the
//! table's seeded hash with no Python code. It lives in the core, with no Python in it, so that
//! `cargo bench --bench keyed_floor` times the table the glue really uses. What each Python
//! value becomes is the glue's business (`src/python/keys.rs`), but for what needs no Python to
//! say: the forms a value may turn out to be ([`Classified`]), the key a float is
//! ([`float_key`]), an int's halves ([`plain_int`], [`big_int`]) and a digest's record
//! ([`Digested::name`], [`digest_bytes`], [`KeyRef::digest_named`]).
//!
//! A key of variable length (an int beyond 128 bits, text, bytes, a tuple) longer than
//! [`LONGEST_KEPT`] bytes is stored as a 128-bit digest instead (see [`KeyRef::kept`]): the
//! table's bound is `max_keys` keys, and without this one client could fill each of them with
//! as many bytes as it likes (4,000 API keys of 60 KB each held 235 MiB).

use std::hash::{Hash, Hasher};

use siphasher::sip128::SipHasher13;

mod stored;

pub use stored::{Key, SHORT};

/// The longest key, in bytes, that the table stores as it is; a longer one is stored as its
/// digest (see [`KeyRef::kept`]).
///
/// What clients are told apart by stays below it, so it comes back from iteration as itself:
/// an IPv6 address is at most 45 characters, a UUID 36, an API token rarely over 100, and a
/// tuple `(address, route)` adds 9 bytes per item. Above it a key costs its table entry and
/// the digest's box, whatever its length; at it, the entry and the stored copy cost about four
/// times an int key (bytes asked of the allocator at 100,000 keys of one band, with the
/// table's growth slack: 171 per 128-byte key, 107 per 45-byte one, 67 per longer one, 43 per
/// int or per text of up to 13 bytes, which is held in place).
pub const LONGEST_KEPT: usize = 128;

/// The kind of key a [`KeyRef::Digest`] stands for. Kept beside the digest, so that text and
/// bytes of the same length and content stay two keys, as they are when short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digested {
    Int = 0,
    Str = 1,
    Bytes = 2,
    Tuple = 3,
}

impl Digested {
    /// Every kind, in the order of its number.
    const ALL: [Self; 4] = [Self::Int, Self::Str, Self::Bytes, Self::Tuple];

    /// The kind's name, as a digest's record says it (the Python `KeyDigest("str", ...)`):
    /// `"int"`, `"str"`, `"bytes"` or `"tuple"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "int",
            Self::Str => "str",
            Self::Bytes => "bytes",
            Self::Tuple => "tuple",
        }
    }

    /// The kind `name` names, if any.
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// A digest's 16 bytes, as a digest's record holds them: its low half, then its high half,
/// each little endian.
#[must_use]
pub fn digest_bytes(low: u64, high: u64) -> [u8; 16] {
    let mut digest = [0; 16];
    digest[..8].copy_from_slice(&low.to_le_bytes());
    digest[8..].copy_from_slice(&high.to_le_bytes());
    digest
}

/// A key as a call looks it up: borrowed from the caller's value, so a lookup allocates
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    Int(i64),
    Wide(u64),
    Big(u64, u64),
    Huge(&'a [u8]),
    Float(u64),
    Str(&'a str),
    Bytes(&'a [u8]),
    Tuple(&'a [u8]),
    Digest(Digested, u64, u64),
    Object(u64),
}

/// One write to the hasher per key (two for a `Big` or `Digest` one), none for its kind: keys
/// of different kinds may share a hash (an int and an object number), which equality sorts
/// out, and the hot path hashes on every call.
impl Hash for KeyRef<'_> {
    // On every call's path: left to itself the compiler calls it out of line, which cost 56
    // instructions a decision in `bench/governor_floor.rs`'s loop (counted by cachegrind).
    #[allow(clippy::inline_always)]
    #[inline(always)]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match *self {
            #[allow(clippy::cast_sign_loss)] // the bits, not the value
            Self::Int(value) => state.write_u64(value as u64),
            Self::Wide(value) | Self::Float(value) | Self::Object(value) => state.write_u64(value),
            Self::Big(low, high) | Self::Digest(_, low, high) => {
                state.write_u64(low);
                state.write_u64(high);
            }
            Self::Str(text) => hash_text(text.as_bytes(), state),
            Self::Huge(bytes) | Self::Bytes(bytes) | Self::Tuple(bytes) => bytes.hash(state),
        }
    }
}

/// Hash text by its UTF-8 bytes and a byte no UTF-8 holds, so that it ends where it ends; a
/// stored key hashes its text so without reading it as text again.
fn hash_text<H: Hasher>(utf8: &[u8], state: &mut H) {
    state.write(utf8);
    state.write_u8(0xff);
}

impl KeyRef<'static> {
    /// The digest key a record names by its kind's name and its 16 bytes (see
    /// [`digest_bytes`]): what a table gives back in place of a long key, taken back in its
    /// place. `None` for a name or a length that no digest has.
    #[must_use]
    pub fn digest_named(kind: &str, digest: &[u8]) -> Option<Self> {
        let kind = Digested::named(kind)?;
        let (low, high) = digest.split_first_chunk::<8>()?;
        let high: &[u8; 8] = high.try_into().ok()?;
        Some(Self::Digest(
            kind,
            u64::from_le_bytes(*low),
            u64::from_le_bytes(*high),
        ))
    }
}

impl KeyRef<'_> {
    /// This key as a table seeded with `seed` stores it: itself, or if it is longer than
    /// [`LONGEST_KEPT`] bytes, its digest. `seed` is only asked for then.
    ///
    /// The digest is SipHash-1-3 with 128 bits of output, keyed by a key drawn from the
    /// table's seed (see [`digest_key`]): a client who does not know the seed cannot choose two
    /// keys with one digest, and by chance two of a table's long keys share one with a
    /// probability near `2**-128` per pair. A table restored with its saved seed (a copy, an
    /// unpickled one) digests every key as the table it was saved from did, so a saved digest
    /// still stands for its key there.
    #[must_use]
    #[inline]
    pub fn kept(self, seed: impl FnOnce() -> (u64, u64)) -> Self {
        let length = match self {
            Self::Huge(bytes) | Self::Bytes(bytes) | Self::Tuple(bytes) => bytes.len(),
            Self::Str(text) => text.len(),
            _ => 0,
        };
        if length <= LONGEST_KEPT {
            return self;
        }
        self.digested(seed())
    }

    /// This key's digest under a table seeded with `seed` (see [`KeyRef::kept`]). Never
    /// inlined: the common call, on a short key, stays as small as it was.
    #[cold]
    #[inline(never)]
    fn digested(self, seed: (u64, u64)) -> Self {
        let (kind, bytes) = match self {
            Self::Huge(bytes) => (Digested::Int, bytes),
            Self::Str(text) => (Digested::Str, text.as_bytes()),
            Self::Bytes(bytes) => (Digested::Bytes, bytes),
            Self::Tuple(items) => (Digested::Tuple, items),
            _ => return self,
        };
        let (k0, k1) = digest_key(seed);
        let (low, high) = SipHasher13::new_with_keys(k0, k1).hash(bytes).as_u64();
        Self::Digest(kind, low, high)
    }
}

/// The key a table seeded with `seed` digests long keys with: itself a SipHash-1-3 digest, of
/// a fixed text, under the table's seed. Drawn from the seed so that restoring the seed
/// restores it, and not the seed itself, so that the table's hash and the digests are two
/// unrelated functions of a key.
fn digest_key((k0, k1): (u64, u64)) -> (u64, u64) {
    SipHasher13::new_with_keys(k0, k1)
        .hash(b"protocol-in-code-qos: the digest key of a keyed table's long keys")
        .as_u64()
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

/// The int a [`KeyRef::Big`] holds, from its low and high halves: [`plain_int`] undone.
#[must_use]
pub fn big_int(low: u64, high: u64) -> i128 {
    #[allow(clippy::cast_possible_wrap)] // the bits, not the value
    let value = ((u128::from(high) << 64) | u128::from(low)) as i128;
    value
}

/// 2**127, the first float beyond `i128`.
const TWO_TO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// What a value turned out to be, as a key: a plain key (borrowed from the value, or built
/// from it), or an object, which equals no plain key and is numbered by whoever holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified<'a> {
    Plain(KeyRef<'a>),
    /// A tuple of plain keys, its items encoded (the bytes of a [`KeyRef::Tuple`]).
    Tuple(Vec<u8>),
    /// An int beyond `i128`, as its bytes (those of a [`KeyRef::Huge`]).
    Huge(Vec<u8>),
    /// Neither equal to a plain key nor one.
    Object,
}

impl Classified<'_> {
    /// The plain key, borrowed; `None` for an object.
    #[must_use]
    pub fn as_key(&self) -> Option<KeyRef<'_>> {
        match self {
            Self::Plain(plain) => Some(*plain),
            Self::Tuple(items) => Some(KeyRef::Tuple(items)),
            Self::Huge(bytes) => Some(KeyRef::Huge(bytes)),
            Self::Object => None,
        }
    }

    /// The table key, owned, as a table seeded with `seed` stores it (see [`KeyRef::kept`]).
    #[must_use]
    pub fn into_key(self, seed: (u64, u64)) -> Option<Key> {
        self.as_key().map(|plain| Key::from(&plain.kept(|| seed)))
    }
}

/// A float value as a key, as a dict finds it: an integral one as the int it equals (so `1.0`
/// and `1` are one key), beyond `i128` by that int's bytes (see [`huge_float_bytes`]); any
/// other by its bits (an infinity included); a NaN is an object (equal to nothing, not even
/// itself: a dict finds a NaN key only by identity).
#[must_use]
pub fn float_key(value: f64) -> Classified<'static> {
    if value.is_nan() {
        return Classified::Object;
    }
    if value.fract() != 0.0 {
        return Classified::Plain(KeyRef::Float(value.to_bits()));
    }
    if (-TWO_TO_127..TWO_TO_127).contains(&value) {
        #[allow(clippy::cast_possible_truncation)] // integral and within range
        return Classified::Plain(plain_int(value as i128));
    }
    huge_float_bytes(value).map_or(Classified::Object, Classified::Huge)
}

/// The [`KeyRef::Huge`] bytes of an integral float: the bytes the glue reads an int of the same
/// value as, so that a float and the int it equals are one key. The table needs them beyond
/// `i128` (every float beyond 2**53 is integral, up to 2**1024); `None` for a float with a
/// fraction, an infinity or a NaN.
#[must_use]
pub fn huge_float_bytes(value: f64) -> Option<Vec<u8>> {
    if !value.is_finite() || value.fract() != 0.0 {
        return None;
    }
    // The magnitude is `mantissa * 2**shift`, with an integer `mantissa` below 2**53.
    let bits = value.to_bits();
    let biased = i32::try_from((bits >> 52) & 0x7ff).ok()?;
    let fraction = bits & ((1 << 52) - 1);
    let (mut mantissa, mut shift) = match biased {
        0 => (fraction, -1074),
        _ => (fraction | (1 << 52), biased - 1075),
    };
    if shift < 0 {
        // Integral, so the bits shifted out are zeros.
        mantissa >>= shift.unsigned_abs().min(63);
        shift = 0;
    }
    let shift = usize::try_from(shift).ok()?;
    let bit_length = match mantissa {
        0 => 0,
        _ => 64 - mantissa.leading_zeros() as usize + shift,
    };
    let mut out = vec![0_u8; bit_length / 8 + 1];
    let placed = (mantissa << (shift % 8)).to_le_bytes();
    for (byte, &value) in out.iter_mut().skip(shift / 8).zip(&placed) {
        *byte = value;
    }
    if value < 0.0 {
        // Two's complement: every bit flipped, then one added.
        let mut carry = true;
        for byte in &mut out {
            let (sum, overflow) = (!*byte).overflowing_add(u8::from(carry));
            *byte = sum;
            carry = overflow;
        }
    }
    Some(out)
}

/// Append a tuple's item to the tuple's encoding: a tag (its kind), a word (little endian: the
/// value, or a length), then for a `Big` its high half, for a `Digest` its high half and its
/// kind, and for a `Huge`, `Str`, `Bytes` or `Tuple` as many bytes as the word says. No two
/// keys encode alike, so two tuples are equal exactly when their encodings are, and the
/// encoding can be hashed as the tuple.
pub fn encode_item(key: KeyRef<'_>, out: &mut Vec<u8>) {
    let mut high = [0; 9];
    #[allow(clippy::cast_sign_loss)] // the bits, not the value
    let (tag, word, tail): (u8, u64, &[u8]) = match key {
        KeyRef::Int(value) => (0, value as u64, &[]),
        KeyRef::Wide(value) => (1, value, &[]),
        KeyRef::Big(low, high_half) => {
            high[..8].copy_from_slice(&high_half.to_le_bytes());
            (2, low, &high[..8])
        }
        KeyRef::Float(bits) => (3, bits, &[]),
        KeyRef::Str(text) => (4, text.len() as u64, text.as_bytes()),
        KeyRef::Bytes(bytes) => (5, bytes.len() as u64, bytes),
        KeyRef::Tuple(items) => (6, items.len() as u64, items),
        KeyRef::Object(number) => (7, number, &[]),
        KeyRef::Huge(bytes) => (8, bytes.len() as u64, bytes),
        KeyRef::Digest(kind, low, high_half) => {
            high[..8].copy_from_slice(&high_half.to_le_bytes());
            high[8] = kind as u8;
            (9, low, &high)
        }
    };
    out.push(tag);
    out.extend_from_slice(&word.to_le_bytes());
    out.extend_from_slice(tail);
}

/// The first item of a tuple's encoding and the encoding of the rest; `None` once none is
/// left.
#[must_use]
pub fn first_item(items: &[u8]) -> Option<(KeyRef<'_>, &[u8])> {
    let (&tag, rest) = items.split_first()?;
    let (word, rest) = rest.split_first_chunk::<8>()?;
    let word = u64::from_le_bytes(*word);
    let length = match tag {
        2 => 8,
        9 => 9,
        4..=6 | 8 => usize::try_from(word).ok()?,
        _ => 0,
    };
    let (tail, rest) = rest.split_at_checked(length)?;
    let high = || Some(u64::from_le_bytes(tail.get(..8)?.try_into().ok()?));
    #[allow(clippy::cast_possible_wrap)] // the bits, not the value
    let key = match tag {
        0 => KeyRef::Int(word as i64),
        1 => KeyRef::Wide(word),
        2 => KeyRef::Big(word, high()?),
        3 => KeyRef::Float(word),
        4 => KeyRef::Str(std::str::from_utf8(tail).ok()?),
        5 => KeyRef::Bytes(tail),
        6 => KeyRef::Tuple(tail),
        7 => KeyRef::Object(word),
        8 => KeyRef::Huge(tail),
        9 => {
            let kind = match tail[8] {
                0 => Digested::Int,
                1 => Digested::Str,
                2 => Digested::Bytes,
                3 => Digested::Tuple,
                _ => return None,
            };
            KeyRef::Digest(kind, word, high()?)
        }
        _ => return None,
    };
    Some((key, rest))
}

#[cfg(test)]
mod tests;
