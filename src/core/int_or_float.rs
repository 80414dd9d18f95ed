//! An int or a float that computes as Python computes, or says that it cannot.
//!
//! Python mixes its two everyday number types by fixed rules: `int` with `int` is exact integer
//! arithmetic, with no upper bound; anything with a `float` turns the `int` into a double and
//! computes in IEEE doubles. [`IntOrFloat`] follows the same rules with machine numbers, and
//! only where machine numbers give Python's exact answer:
//!
//! * `int` with `int` in checked `i64`: where Python would grow a bigger int, this one stops with
//!   [`Inexact`] instead of wrapping;
//! * with a `float`, in `f64`, when the `int` has a magnitude of at most 2^53: such an int
//!   converts to a double exactly, as Python converts it, and then the double arithmetic *is*
//!   Python's. A bigger int could round on the way (and Python compares an int with a float
//!   exactly, without converting), so that step is [`Inexact`] too.
//!
//! The course's algorithms are generic over [`Quantity`], so with this type they run on plain
//! machine numbers, no interpreter needed; whoever gets [`Inexact`] back (the Python glue does)
//! starts the step over with arbitrary-precision numbers.
//!
//! ```
//! use protocol_in_code_qos::core::int_or_float::{Inexact, IntOrFloat};
//! use protocol_in_code_qos::core::quantity::Quantity;
//!
//! let three = IntOrFloat::Int(3);
//! assert_eq!(three.times(&IntOrFloat::Float(0.5)), Ok(IntOrFloat::Float(1.5)));
//! assert_eq!(IntOrFloat::Int(i64::MAX).plus(&three), Err(Inexact));
//! ```

use crate::core::quantity::Quantity;

/// Integers up to this magnitude convert to `f64` exactly.
const EXACT_IN_F64: i64 = 1 << 53;

/// A step whose exact result machine numbers cannot give (an `i64` overflow, or a huge int next
/// to a float): Python's own numbers must compute it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inexact;

/// A Python `int` that fits in 64 bits, or a Python `float`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IntOrFloat {
    Int(i64),
    Float(f64),
}

impl IntOrFloat {
    /// `self <= 0`: against the literal `0` every value answers for itself, whatever its size.
    #[must_use]
    pub fn is_at_most_zero(self) -> bool {
        match self {
            Self::Int(i) => i <= 0,
            Self::Float(f) => f <= 0.0,
        }
    }

    /// `0 > self`, likewise.
    #[must_use]
    pub fn is_below_zero(self) -> bool {
        match self {
            Self::Int(i) => i < 0,
            Self::Float(f) => f < 0.0,
        }
    }

    fn compare(
        self,
        rhs: Self,
        int_op: fn(&i64, &i64) -> bool,
        float_op: fn(&f64, &f64) -> bool,
    ) -> Result<bool, Inexact> {
        if let (Self::Int(a), Self::Int(b)) = (self, rhs) {
            return Ok(int_op(&a, &b));
        }
        let (a, b) = self.as_f64_pair(rhs)?;
        Ok(float_op(&a, &b))
    }

    fn arithmetic(
        self,
        rhs: Self,
        int_op: fn(i64, i64) -> Option<i64>,
        float_op: fn(f64, f64) -> f64,
    ) -> Result<Self, Inexact> {
        if let (Self::Int(a), Self::Int(b)) = (self, rhs) {
            return int_op(a, b).map(Self::Int).ok_or(Inexact);
        }
        let (a, b) = self.as_f64_pair(rhs)?;
        Ok(Self::Float(float_op(a, b)))
    }

    /// Both values as doubles, for a pair that holds a float (Python computes it in doubles).
    fn as_f64_pair(self, rhs: Self) -> Result<(f64, f64), Inexact> {
        Ok((self.exact_f64()?, rhs.exact_f64()?))
    }

    fn exact_f64(self) -> Result<f64, Inexact> {
        match self {
            Self::Float(f) => Ok(f),
            #[allow(clippy::cast_precision_loss)] // exact: the magnitude is at most 2^53
            Self::Int(i) if (-EXACT_IN_F64..=EXACT_IN_F64).contains(&i) => Ok(i as f64),
            Self::Int(_) => Err(Inexact),
        }
    }
}

impl Quantity for IntOrFloat {
    type Error = Inexact;

    fn minus(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.arithmetic(*rhs, i64::checked_sub, |a, b| a - b)
    }
    fn plus(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.arithmetic(*rhs, i64::checked_add, |a, b| a + b)
    }
    fn times(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.arithmetic(*rhs, i64::checked_mul, |a, b| a * b)
    }
    fn less_than(&self, rhs: &Self) -> Result<bool, Inexact> {
        self.compare(*rhs, |a, b| a < b, |a, b| a < b)
    }
    fn greater_than(&self, rhs: &Self) -> Result<bool, Inexact> {
        self.compare(*rhs, |a, b| a > b, |a, b| a > b)
    }
    fn at_most_zero(&self) -> Result<bool, Inexact> {
        Ok(self.is_at_most_zero())
    }
    fn below_zero(&self) -> Result<bool, Inexact> {
        Ok(self.is_below_zero())
    }
    fn zero(&self) -> Self {
        Self::Int(0)
    }
}

#[cfg(test)]
mod tests {
    use super::{Inexact, IntOrFloat, EXACT_IN_F64};
    use crate::core::quantity::Quantity;
    use IntOrFloat::{Float, Int};

    #[test]
    fn ints_stay_ints_until_they_overflow() {
        assert_eq!(Int(7).minus(&Int(9)), Ok(Int(-2)));
        assert_eq!(Int(1 << 40).times(&Int(1 << 22)), Ok(Int(1 << 62)));
        assert_eq!(Int(1 << 40).times(&Int(1 << 23)), Err(Inexact));
        assert_eq!(Int(i64::MIN).minus(&Int(1)), Err(Inexact));
        assert_eq!(Int(i64::MAX).greater_than(&Int(i64::MAX - 1)), Ok(true));
    }

    #[test]
    fn a_float_makes_the_step_a_double_step() {
        assert_eq!(Int(1).plus(&Float(0.5)), Ok(Float(1.5)));
        assert_eq!(Float(0.1).plus(&Float(0.2)), Ok(Float(0.1 + 0.2)));
        assert_eq!(Int(3).minus(&Float(3.0)), Ok(Float(0.0)));
        assert_eq!(
            Float(f64::INFINITY).times(&Int(0)).map(|v| v != v),
            Ok(true)
        );
    }

    #[test]
    fn an_int_beyond_two_to_the_53_next_to_a_float_is_inexact() {
        // 2^53 + 1 is no double: Python would round it (arithmetic) or compare it exactly.
        let edge = Int(EXACT_IN_F64);
        let beyond = Int(EXACT_IN_F64 + 1);
        assert_eq!(edge.plus(&Float(0.0)), Ok(Float(9_007_199_254_740_992.0)));
        assert_eq!(beyond.plus(&Float(0.0)), Err(Inexact));
        assert_eq!(Float(1.0).less_than(&Int(-EXACT_IN_F64 - 1)), Err(Inexact));
        assert_eq!(beyond.less_than(&Int(EXACT_IN_F64 + 2)), Ok(true));
    }

    #[test]
    fn comparisons_with_nan_are_false_both_ways() {
        let nan = Float(f64::NAN);
        assert_eq!(nan.less_than(&Int(1)), Ok(false));
        assert_eq!(nan.greater_than(&Int(1)), Ok(false));
        assert_eq!(nan.at_most_zero(), Ok(false));
        assert_eq!(nan.below_zero(), Ok(false));
    }

    #[test]
    fn comparisons_are_strict_for_ints_and_floats_alike() {
        for (low, high) in [
            (Int(1), Int(2)),
            (Float(1.0), Float(2.0)),
            (Int(1), Float(1.5)),
        ] {
            assert_eq!(low.less_than(&high), Ok(true));
            assert_eq!(high.less_than(&low), Ok(false));
            assert_eq!(low.less_than(&low), Ok(false));
            assert_eq!(high.greater_than(&low), Ok(true));
            assert_eq!(low.greater_than(&high), Ok(false));
            assert_eq!(high.greater_than(&high), Ok(false));
        }
    }

    #[test]
    fn the_sign_tests_put_zero_on_the_right_side() {
        for (value, at_most, below) in [
            (Int(-3), true, true),
            (Int(0), true, false),
            (Int(3), false, false),
            (Float(-0.5), true, true),
            (Float(0.0), true, false),
            (Float(0.5), false, false),
        ] {
            assert_eq!(value.at_most_zero(), Ok(at_most), "{value:?} <= 0");
            assert_eq!(value.below_zero(), Ok(below), "0 > {value:?}");
        }
    }

    #[test]
    fn zero_is_the_int_zero_and_any_size_compares_with_it() {
        assert_eq!(Float(2.5).zero(), Int(0));
        assert_eq!(Int(i64::MIN).below_zero(), Ok(true));
        assert_eq!(Float(-0.0).below_zero(), Ok(false));
        assert_eq!(Float(-0.0).at_most_zero(), Ok(true));
    }
}
