//! How a keyed table hashes its keys, so that nobody can choose keys that collide.
//!
//! A table of clients is filled by the clients: if they could pick keys that land in one bucket,
//! every lookup would crawl through all of them (a "hash flooding" attack). So every table draws
//! a random [`Seed`], and a key's hash depends on it:
//!
//! * By default a key is hashed with SipHash-1-3 under the seed ([`Seed::sip`]), the keyed hash
//!   Rust's own `HashMap` uses for the same reason.
//! * A key that already carries a hash keyed with a secret of its own (Python's `str` hash,
//!   SipHash-1-3 under the interpreter's random secret, computed once and cached in the string) only
//!   needs that hash made this table's: [`Seed::mix`], two multiplications instead of a whole
//!   SipHash-1-3. Such a hash differs between processes, so a saved table's keys may come back in
//!   other shards (see `KeyedLimiter::restore`).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use siphasher::sip::SipHasher13;

/// How a table hashes a key of this type under its seed.
pub trait TableKey {
    fn table_hash(&self, seed: &Seed) -> u64;
}

impl TableKey for str {
    fn table_hash(&self, seed: &Seed) -> u64 {
        seed.sip(self)
    }
}

/// As its `str`, so that a `&str` finds the `String` it equals.
impl TableKey for String {
    fn table_hash(&self, seed: &Seed) -> u64 {
        self.as_str().table_hash(seed)
    }
}

/// A table's hash seed: random per table unless restored. Atomic only so that a restore can set
/// it through a shared reference; it never changes while the table is in use.
pub struct Seed {
    k0: AtomicU64,
    k1: AtomicU64,
}

impl Seed {
    #[must_use]
    pub fn random() -> Self {
        // std's RandomState draws its keys from the OS; hashing two constants with it gives
        // two random words.
        let random = RandomState::new();
        Self {
            k0: AtomicU64::new(random.hash_one(0_u8)),
            k1: AtomicU64::new(random.hash_one(1_u8)),
        }
    }

    #[must_use]
    pub fn keys(&self) -> (u64, u64) {
        (
            self.k0.load(Ordering::Relaxed),
            self.k1.load(Ordering::Relaxed),
        )
    }

    pub fn set(&self, (k0, k1): (u64, u64)) {
        self.k0.store(k0, Ordering::Relaxed);
        self.k1.store(k1, Ordering::Relaxed);
    }

    /// SipHash-1-3 of `value` under this seed.
    pub fn sip<T: Hash + ?Sized>(&self, value: &T) -> u64 {
        let (k0, k1) = self.keys();
        let mut hasher = SipHasher13::new_with_keys(k0, k1);
        value.hash(&mut hasher);
        hasher.finish()
    }

    /// This table's hash of a key whose own hash, `secret_hash`, is already keyed with a secret
    /// nobody outside the process knows. Two folded multiplications (the full 128-bit product,
    /// its halves xored) under the seed: every output bit depends on every input bit, and on
    /// the seed, so keys that share their low bits in one table do not in another.
    #[must_use]
    pub fn mix(&self, secret_hash: u64) -> u64 {
        let (k0, k1) = self.keys();
        // Odd multipliers never lose a bit; the constant keeps them apart from the xored keys.
        let once = folded_multiply(secret_hash ^ k0, k1 | 1);
        folded_multiply(once ^ k1, (k0 ^ 0x9e37_79b9_7f4a_7c15) | 1)
    }
}

#[allow(clippy::cast_possible_truncation)] // the two halves of the product
fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_str_and_its_string_hash_alike() {
        let seed = Seed::random();
        assert_eq!(
            "key".table_hash(&seed),
            String::from("key").table_hash(&seed)
        );
    }

    #[test]
    fn hashes_depend_on_the_seed() {
        let (a, b) = (Seed::random(), Seed::random());
        assert_ne!(a.keys(), b.keys());
        assert_ne!(a.sip("key"), b.sip("key"));
        assert_ne!(a.mix(42), b.mix(42));
        b.set(a.keys());
        assert_eq!((a.sip("key"), a.mix(42)), (b.sip("key"), b.mix(42)));
    }

    #[test]
    fn mixed_hashes_spread_keys_that_share_their_low_bits() {
        // Secret hashes equal in their low 32 bits, as colliding keys of a small table would
        // be: after mixing, their low 10 bits (a 1024-bucket table) spread over most buckets.
        let seed = Seed::random();
        let buckets: std::collections::HashSet<u64> = (0..4096_u64)
            .map(|high| seed.mix(high << 32 | 0x1234_5678) & 1023)
            .collect();
        assert!(buckets.len() > 900, "{} buckets", buckets.len());
    }
}
