//! What the QoS math asks of a number, and nothing more.
//!
//! The course writes its math with Python operators on whatever numbers the caller passes: ints,
//! floats, `Fraction`s, `Decimal`s. To keep one copy of each algorithm, the core is generic over
//! [`Quantity`], a trait with exactly the operations the lessons use, each of which may fail (a
//! Python operator can raise). The order in which an algorithm calls these methods *is* the
//! order in which the course evaluates its expressions, so an implementation backed by Python
//! objects reproduces the course's results, its exceptions and their order.
//!
//! The core implements the trait for `i64` (checked: overflow is an error, never a wrap) and for
//! `f64` (IEEE arithmetic, which cannot fail), which is what `cargo test` exercises.

use std::convert::Infallible;

/// A number the QoS lessons can compute with.
///
/// Each method names the Python expression it stands for. Comparisons return the truth of the
/// comparison as an `if` statement would see it. Every method fails exactly when the expression
/// it names would (an overflow, an exception), with the number type's error.
#[allow(clippy::missing_errors_doc)] // said once above, for every method
pub trait Quantity: Clone {
    /// Why an operation could not produce a number (overflow, a Python exception, ...).
    type Error;

    /// `self - rhs`
    fn minus(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// `self + rhs`
    fn plus(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// `self * rhs`
    fn times(&self, rhs: &Self) -> Result<Self, Self::Error>;
    /// `self < rhs`
    fn less_than(&self, rhs: &Self) -> Result<bool, Self::Error>;
    /// `self > rhs`
    fn greater_than(&self, rhs: &Self) -> Result<bool, Self::Error>;
    /// `self <= 0`, against the integer literal zero.
    fn at_most_zero(&self) -> Result<bool, Self::Error>;
    /// `0 > self`, with the integer literal zero on the left (as `max(self, 0)` asks it).
    fn below_zero(&self) -> Result<bool, Self::Error>;
    /// The integer literal `0`, as this number type represents it.
    #[must_use]
    fn zero(&self) -> Self;

    /// `self -= rhs`: the course spends tokens with an augmented assignment, which a number type
    /// may implement differently from `-`. Plain numbers do not, hence the default.
    fn minus_in_place(&self, rhs: &Self) -> Result<Self, Self::Error> {
        self.minus(rhs)
    }

    /// `self += rhs`, for the same reason.
    fn plus_in_place(&self, rhs: &Self) -> Result<Self, Self::Error> {
        self.plus(rhs)
    }
}

/// Python's `min(a, b)` for two arguments: `a` unless `b < a`.
///
/// Spelled out because the rule matters when the values are unordered (NaN): `min(nan, 5)` is
/// `nan` but `min(5, nan)` is `5`, and the course always writes `min(grown, capacity)`.
///
/// # Errors
///
/// The comparison's error.
pub fn python_min<N: Quantity>(a: &N, b: &N) -> Result<N, N::Error> {
    Ok(if b.less_than(a)? {
        b.clone()
    } else {
        a.clone()
    })
}

/// Python's `max(value, 0)`: `value` unless `0 > value`, so a NaN stays NaN and the zero that
/// replaces a negative value is the literal `0` (an `int` in Python, whatever `value` was).
///
/// # Errors
///
/// The comparison's error.
// Inlined into its callers, so that their numbers stay in registers (see
// `refill::compute_refill` for what returning them through memory cost).
#[allow(clippy::inline_always)]
#[inline(always)]
pub fn python_max_with_zero<N: Quantity>(value: &N) -> Result<N, N::Error> {
    Ok(if value.below_zero()? {
        value.zero()
    } else {
        value.clone()
    })
}

/// The integer result would not fit in 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("integer overflow")
    }
}

impl std::error::Error for Overflow {}

impl Quantity for i64 {
    type Error = Overflow;

    fn minus(&self, rhs: &Self) -> Result<Self, Overflow> {
        self.checked_sub(*rhs).ok_or(Overflow)
    }
    fn plus(&self, rhs: &Self) -> Result<Self, Overflow> {
        self.checked_add(*rhs).ok_or(Overflow)
    }
    fn times(&self, rhs: &Self) -> Result<Self, Overflow> {
        self.checked_mul(*rhs).ok_or(Overflow)
    }
    fn less_than(&self, rhs: &Self) -> Result<bool, Overflow> {
        Ok(self < rhs)
    }
    fn greater_than(&self, rhs: &Self) -> Result<bool, Overflow> {
        Ok(self > rhs)
    }
    fn at_most_zero(&self) -> Result<bool, Overflow> {
        Ok(*self <= 0)
    }
    fn below_zero(&self) -> Result<bool, Overflow> {
        Ok(*self < 0)
    }
    fn zero(&self) -> Self {
        0
    }
}

impl Quantity for f64 {
    type Error = Infallible;

    fn minus(&self, rhs: &Self) -> Result<Self, Infallible> {
        Ok(self - rhs)
    }
    fn plus(&self, rhs: &Self) -> Result<Self, Infallible> {
        Ok(self + rhs)
    }
    fn times(&self, rhs: &Self) -> Result<Self, Infallible> {
        Ok(self * rhs)
    }
    fn less_than(&self, rhs: &Self) -> Result<bool, Infallible> {
        Ok(self < rhs)
    }
    fn greater_than(&self, rhs: &Self) -> Result<bool, Infallible> {
        Ok(self > rhs)
    }
    fn at_most_zero(&self) -> Result<bool, Infallible> {
        Ok(*self <= 0.0)
    }
    fn below_zero(&self) -> Result<bool, Infallible> {
        Ok(*self < 0.0)
    }
    fn zero(&self) -> Self {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_min_keeps_the_first_argument_unless_the_second_is_smaller() {
        assert_eq!(python_min(&3_i64, &5), Ok(3));
        assert_eq!(python_min(&5_i64, &3), Ok(3));
        assert!(python_min(&f64::NAN, &5.0).unwrap().is_nan());
        assert_eq!(python_min(&5.0, &f64::NAN), Ok(5.0));
    }

    #[test]
    fn python_max_with_zero_floors_negatives_and_keeps_nan() {
        assert_eq!(python_max_with_zero(&-3_i64), Ok(0));
        assert_eq!(python_max_with_zero(&3_i64), Ok(3));
        assert!(python_max_with_zero(&f64::NAN).unwrap().is_nan());
    }

    #[test]
    fn integer_arithmetic_reports_overflow_instead_of_wrapping() {
        assert_eq!(i64::MAX.plus(&1), Err(Overflow));
        assert_eq!(i64::MIN.minus(&1), Err(Overflow));
        assert_eq!(i64::MAX.times(&2), Err(Overflow));
    }

    #[test]
    fn integer_comparisons_are_strict_where_they_say_so() {
        assert_eq!(0_i64.below_zero(), Ok(false));
        assert_eq!((-1_i64).below_zero(), Ok(true));
        assert_eq!(0_i64.at_most_zero(), Ok(true));
        assert_eq!(1_i64.at_most_zero(), Ok(false));
        assert_eq!(Overflow.to_string(), "integer overflow");
    }

    #[test]
    fn float_arithmetic_and_comparisons_are_ieee() {
        assert_eq!(3.0_f64.minus(&1.0), Ok(2.0));
        assert_eq!(1.0_f64.less_than(&2.0), Ok(true));
        assert_eq!(2.0_f64.less_than(&1.0), Ok(false));
        assert_eq!(1.0_f64.less_than(&1.0), Ok(false));
        assert_eq!(2.0_f64.greater_than(&1.0), Ok(true));
        assert_eq!(1.0_f64.greater_than(&2.0), Ok(false));
        assert_eq!(1.0_f64.greater_than(&1.0), Ok(false));
        assert_eq!(0.0_f64.at_most_zero(), Ok(true));
        assert_eq!((-0.5_f64).at_most_zero(), Ok(true));
        assert_eq!(0.5_f64.at_most_zero(), Ok(false));
        assert_eq!(f64::NAN.at_most_zero(), Ok(false));
        assert_eq!((-0.5_f64).below_zero(), Ok(true));
        assert_eq!(0.0_f64.below_zero(), Ok(false));
        assert_eq!(0.5_f64.below_zero(), Ok(false));
        assert_eq!(python_max_with_zero(&-2.5_f64), Ok(0.0));
    }
}
