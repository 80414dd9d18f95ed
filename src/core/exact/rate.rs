//! A rate as integers: the one place where a rational number of tokens per second becomes
//! whole units per nanosecond.
//!
//! A rate of `p/q` tokens per second (in lowest terms) adds `p / (q * 10^9)` tokens every
//! nanosecond. Counting balances in *units* of `1 / (q * 10^9)` token makes that exactly `p`
//! units per nanosecond: every accrual is then an integer multiplication, with no remainder to
//! carry because the unit was chosen so that none arises. (DPDK's `rte_meter` makes the same
//! move with a period and a number of bytes per period; here the period is always one
//! nanosecond and the remainder lives in the unit.)

/// Nanoseconds in a second.
pub const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// The largest balance, in units, that a band may need to hold. Leaves headroom so that a full
/// balance plus a refund, or `n` units plus a balance, can never overflow a `u128`.
const MAX_UNITS: u128 = 1 << 120;

/// Tokens per second as a fraction in lowest terms, and what that means in units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens per second: numerator (`p`).
    pub numerator: u64,
    /// Tokens per second: denominator (`q`).
    pub denominator: u64,
}

/// Why a rate or a burst cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateError {
    /// The rate is zero: nothing would ever refill.
    Zero,
    /// The burst is zero: no request could ever pass.
    ZeroBurst,
    /// `burst` tokens in units of `1 / (denominator * 10^9)` do not fit the integer range.
    TooFine,
}

impl std::fmt::Display for RateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Zero => "rate must be positive",
            Self::ZeroBurst => "burst must be an int from 1 to 2**64 - 1",
            Self::TooFine => "burst times the rate's denominator is too large to hold exactly",
        })
    }
}

impl std::error::Error for RateError {}

impl Rate {
    /// `numerator / denominator` tokens per second, reduced to lowest terms.
    ///
    /// # Errors
    ///
    /// [`RateError::Zero`] for a zero numerator or denominator.
    pub fn new(numerator: u64, denominator: u64) -> Result<Self, RateError> {
        if numerator == 0 || denominator == 0 {
            return Err(RateError::Zero);
        }
        let divisor = gcd(numerator, denominator);
        Ok(Self {
            numerator: numerator / divisor,
            denominator: denominator / divisor,
        })
    }

    /// How many units make one token: `denominator * 10^9`.
    #[must_use]
    pub fn units_per_token(&self) -> u128 {
        u128::from(self.denominator) * NANOS_PER_SECOND
    }

    /// How many units accrue each nanosecond: `numerator`.
    #[must_use]
    pub fn units_per_ns(&self) -> u128 {
        u128::from(self.numerator)
    }
}

/// A band's fixed numbers: its rate, and its burst (the most tokens it holds) in units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BandSpec {
    pub rate: Rate,
    pub burst: u64,
}

impl BandSpec {
    /// # Errors
    ///
    /// [`RateError::ZeroBurst`], or [`RateError::TooFine`] when the burst in units would not fit.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, RateError> {
        if burst == 0 {
            return Err(RateError::ZeroBurst);
        }
        let capacity = u128::from(burst)
            .checked_mul(rate.units_per_token())
            .filter(|&units| units <= MAX_UNITS);
        match capacity {
            Some(_) => Ok(Self { rate, burst }),
            None => Err(RateError::TooFine),
        }
    }

    /// The burst in units.
    #[must_use]
    pub fn capacity_units(&self) -> u128 {
        u128::from(self.burst) * self.rate.units_per_token()
    }

    /// `tokens` in units, if it is no more than the burst (else it could never be held).
    #[must_use]
    pub fn units_of(&self, tokens: u64) -> Option<u128> {
        (tokens <= self.burst).then(|| u128::from(tokens) * self.rate.units_per_token())
    }
}

/// The greatest common divisor of `a` and `b` (Euclid's algorithm), which puts a fraction in
/// lowest terms: every rate here, and a meter's byte rate, is kept so.
pub(crate) fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_to_give() {
        assert_eq!(RateError::Zero.to_string(), "rate must be positive");
        assert_eq!(
            RateError::ZeroBurst.to_string(),
            "burst must be an int from 1 to 2**64 - 1"
        );
        assert!(RateError::TooFine
            .to_string()
            .starts_with("burst times the rate's"));
    }

    #[test]
    fn rates_are_kept_in_lowest_terms() {
        assert_eq!(
            Rate::new(10, 4),
            Ok(Rate {
                numerator: 5,
                denominator: 2
            })
        );
        assert_eq!(Rate::new(0, 1), Err(RateError::Zero));
    }

    #[test]
    fn a_unit_makes_one_nanosecond_of_accrual_an_integer() {
        // 1/3 token per second: a unit is 1/(3 * 10^9) token and one unit accrues per ns.
        let rate = Rate::new(1, 3).unwrap();
        assert_eq!(rate.units_per_ns(), 1);
        assert_eq!(rate.units_per_token(), 3 * NANOS_PER_SECOND);
    }

    #[test]
    fn bursts_must_be_positive_and_fit() {
        let rate = Rate::new(1, 1).unwrap();
        assert_eq!(BandSpec::new(rate, 0), Err(RateError::ZeroBurst));
        let fine = Rate::new(1, u64::MAX).unwrap();
        assert_eq!(BandSpec::new(fine, u64::MAX), Err(RateError::TooFine));
    }
}
