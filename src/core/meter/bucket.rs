//! A meter's bucket: bytes as tokens, settled exactly.
//!
//! A rate of `p/q` bytes per second is counted in units of `1 / (q * 10^9)` byte, so `p` units
//! arrive every nanosecond, exactly as the limiter's bands do (see
//! [`rate`](crate::core::exact::rate)). A meter's rate may be zero (an RFC 4115 bucket that
//! never fills), and a bucket may hold zero bytes (an RFC 2697 bucket that only passes its
//! overflow on).

use crate::core::exact::rate::{gcd, NANOS_PER_SECOND};
use crate::core::exact::settle::{settle, settle_with_overflow, Balance};
use crate::core::meter::MeterError;

/// The most units a bucket may hold, leaving headroom for sums.
const MAX_UNITS: u128 = 1 << 120;

/// Bytes per second as a fraction in lowest terms; zero is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ByteRate {
    pub numerator: u64,
    pub denominator: u64,
}

impl ByteRate {
    /// `numerator / denominator` bytes per second, in lowest terms (`0/1` for zero).
    ///
    /// # Errors
    ///
    /// A zero denominator.
    pub fn new(numerator: u64, denominator: u64) -> Result<Self, MeterError> {
        if denominator == 0 {
            return Err(MeterError::Rule("a rate's denominator is not zero"));
        }
        let divisor = gcd(numerator, denominator);
        Ok(Self {
            numerator: numerator / divisor,
            denominator: denominator / divisor,
        })
    }

    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.numerator == 0
    }

    /// `self >= other`, exactly.
    #[must_use]
    pub fn at_least(&self, other: &Self) -> bool {
        u128::from(self.numerator) * u128::from(other.denominator)
            >= u128::from(other.numerator) * u128::from(self.denominator)
    }
}

/// One bucket of a meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bucket {
    units_per_ns: u128,
    units_per_byte: u128,
    capacity: u128,
    balance: Balance,
}

impl Bucket {
    /// A full bucket of `size` bytes filling at `rate`, settled from `start_ns` (or from its
    /// first decision).
    ///
    /// # Errors
    ///
    /// [`MeterError::TooFine`] when `size` bytes in this rate's units would not fit.
    pub fn new(rate: ByteRate, size: u64, start_ns: Option<i64>) -> Result<Self, MeterError> {
        let units_per_byte = u128::from(rate.denominator) * NANOS_PER_SECOND;
        let capacity = u128::from(size)
            .checked_mul(units_per_byte)
            .filter(|&units| units <= MAX_UNITS)
            .ok_or(MeterError::TooFine)?;
        Ok(Self {
            units_per_ns: u128::from(rate.numerator),
            units_per_byte,
            capacity,
            balance: Balance {
                units: capacity,
                settled_at: start_ns,
            },
        })
    }

    /// Settle to `now_ns`; return the units that arrived while full.
    pub fn settle(&mut self, now_ns: i64) -> u128 {
        let (balance, overflow) =
            settle_with_overflow(self.balance, self.units_per_ns, self.capacity, now_ns);
        self.balance = balance;
        overflow
    }

    /// Settle to `now_ns` with no arrivals of its own, then pour in `units` (capped): how an
    /// RFC 2697 excess bucket receives the committed bucket's overflow. Buckets of one meter
    /// share one rate, so the units mean the same in both.
    pub fn settle_and_pour(&mut self, now_ns: i64, units: u128) {
        self.balance = settle(self.balance, 0, self.capacity, now_ns);
        self.balance.units = self.balance.units.saturating_add(units).min(self.capacity);
    }

    /// Whether the bucket holds `bytes` (`T >= B` in the RFCs).
    #[must_use]
    pub fn holds(&self, bytes: u64) -> bool {
        u128::from(bytes)
            .checked_mul(self.units_per_byte)
            .is_some_and(|need| need <= self.balance.units)
    }

    /// Take `bytes` out (`T -= B`); only after [`Bucket::holds`] said yes.
    pub fn take(&mut self, bytes: u64) {
        let need = u128::from(bytes) * self.units_per_byte;
        self.balance.units = self.balance.units.saturating_sub(need);
    }

    /// The level as an exact fraction of bytes: `(units, units per byte)`.
    #[must_use]
    pub fn level(&self) -> (u128, u128) {
        (self.balance.units, self.units_per_byte)
    }

    /// The size in bytes.
    #[must_use]
    pub fn size(&self) -> u128 {
        self.capacity / self.units_per_byte
    }

    /// The raw state, to save and restore a meter.
    #[must_use]
    pub fn balance(&self) -> Balance {
        self.balance
    }

    /// Restore a saved state; `false` (and no change) if it exceeds the bucket.
    pub fn restore(&mut self, balance: Balance) -> bool {
        if balance.units > self.capacity {
            return false;
        }
        self.balance = balance;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_rates_are_kept_in_lowest_terms_and_compared_exactly() {
        assert_eq!(
            ByteRate::new(6, 4),
            Ok(ByteRate {
                numerator: 3,
                denominator: 2
            })
        );
        let rate = |p, q| ByteRate::new(p, q).unwrap();
        assert!(!rate(1, 3).at_least(&rate(1, 2)));
        assert!(rate(2, 1).at_least(&rate(3, 2)));
        assert!(rate(3, 2).at_least(&rate(6, 4)));
        assert!(rate(0, 1).is_zero());
    }

    #[test]
    fn a_level_is_exact_and_a_restore_never_overfills() {
        // 3/2 bytes per second: a byte is 2 * 10^9 units.
        let mut bucket = Bucket::new(ByteRate::new(3, 2).unwrap(), 10, Some(0)).unwrap();
        assert_eq!(bucket.size(), 10);
        bucket.take(4);
        assert_eq!(bucket.level(), (12_000_000_000, 2_000_000_000));
        let saved = bucket.balance();
        let over = Balance {
            units: 20_000_000_001,
            settled_at: Some(0),
        };
        assert!(!bucket.restore(over));
        assert_eq!(bucket.balance(), saved, "a refused restore changes nothing");
        let full = Balance {
            units: 20_000_000_000,
            settled_at: Some(5),
        };
        assert!(bucket.restore(full));
        assert_eq!(bucket.balance(), full);
        let some = Balance {
            units: 7,
            settled_at: None,
        };
        assert!(bucket.restore(some));
        assert_eq!(bucket.level(), (7, 2_000_000_000));
    }
}
