//! A number that remembers which input it was: what lets an algorithm give back the very value
//! it was given.
//!
//! The course's algorithms often return an input unchanged (a bucket already full keeps its
//! `tokens`; a refill with no time elapsed keeps `last_refill_at`). In Python that result *is*
//! the object passed in, so `is` holds. A [`Scalar`] is an [`IntOrFloat`] plus the position of
//! the input it is, if any: it runs an algorithm on machine numbers, and afterwards whoever
//! holds the inputs (the Python glue) can tell a result that is one of them from a value the
//! algorithm computed, and hand back the input itself. It holds no reference to anything, so it
//! is copied freely.
//!
//! ```
//! use protocol_in_code_qos::core::int_or_float::IntOrFloat;
//! use protocol_in_code_qos::core::quantity::Quantity;
//! use protocol_in_code_qos::core::scalar::Scalar;
//!
//! let tokens = Scalar::from_input(IntOrFloat::Int(3), 0);
//! assert_eq!(tokens.origin(), Some(0)); // as given: input 0
//! let more = tokens.plus(&Scalar::from_input(IntOrFloat::Int(1), 1)).unwrap();
//! assert_eq!(more.origin(), None); // computed: a new value
//! assert_eq!(more.value(), IntOrFloat::Int(4));
//! ```

use crate::core::int_or_float::{Inexact, IntOrFloat};
use crate::core::quantity::Quantity;

/// An [`IntOrFloat`] and which of an operation's inputs it is: the input's position, or none for a
/// value the operation computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scalar {
    value: IntOrFloat,
    origin: usize,
}

impl Scalar {
    /// The origin of a computed value.
    const COMPUTED: usize = usize::MAX;

    /// Input number `position`, whose value is already known.
    ///
    /// # Panics
    ///
    /// If `position` is `usize::MAX`, which stands for "computed".
    #[must_use]
    pub fn from_input(value: IntOrFloat, position: usize) -> Self {
        assert!(position != Self::COMPUTED, "an input has a position");
        Self {
            value,
            origin: position,
        }
    }

    /// `K` inputs read with `read` (given each position), if every one of them is a scalar.
    pub fn inputs<const K: usize>(read: impl Fn(usize) -> Option<Self>) -> Option<[Self; K]> {
        let mut scalars = [Self::computed(IntOrFloat::Int(0)); K];
        for (position, scalar) in scalars.iter_mut().enumerate() {
            *scalar = read(position)?;
        }
        Some(scalars)
    }

    fn computed(value: IntOrFloat) -> Self {
        Self {
            value,
            origin: Self::COMPUTED,
        }
    }

    /// The position of the input this scalar is, unless the operation computed it.
    #[must_use]
    pub fn origin(self) -> Option<usize> {
        (self.origin != Self::COMPUTED).then_some(self.origin)
    }

    #[must_use]
    pub fn value(self) -> IntOrFloat {
        self.value
    }
}

impl Quantity for Scalar {
    type Error = Inexact;

    fn minus(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.value.minus(&rhs.value).map(Self::computed)
    }
    fn plus(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.value.plus(&rhs.value).map(Self::computed)
    }
    fn times(&self, rhs: &Self) -> Result<Self, Inexact> {
        self.value.times(&rhs.value).map(Self::computed)
    }
    fn less_than(&self, rhs: &Self) -> Result<bool, Inexact> {
        self.value.less_than(&rhs.value)
    }
    fn greater_than(&self, rhs: &Self) -> Result<bool, Inexact> {
        self.value.greater_than(&rhs.value)
    }
    fn at_most_zero(&self) -> Result<bool, Inexact> {
        self.value.at_most_zero()
    }
    fn below_zero(&self) -> Result<bool, Inexact> {
        self.value.below_zero()
    }
    fn zero(&self) -> Self {
        Self::computed(self.value.zero())
    }
}

#[cfg(test)]
mod tests {
    use super::Scalar;
    use crate::core::int_or_float::{Inexact, IntOrFloat};
    use crate::core::quantity::Quantity;
    use crate::core::refill::compute_refill;
    use IntOrFloat::{Float, Int};

    /// The five inputs of a refill, each at its position.
    fn refill_inputs(values: [IntOrFloat; 5]) -> [Scalar; 5] {
        Scalar::inputs(|i| Some(Scalar::from_input(values[i], i))).unwrap()
    }

    #[test]
    fn a_result_passed_through_is_still_its_input() {
        // No time elapsed: tokens (input 0) and last_refill_at (input 3) come back as they were.
        let [tokens, capacity, rate, last, now] =
            refill_inputs([Int(2), Int(10), Int(1), Int(5), Int(5)]);
        let result = compute_refill(&tokens, &capacity, &rate, &last, &now).unwrap();
        assert_eq!(result.tokens.origin(), Some(0));
        assert_eq!(result.last_refill_at.origin(), Some(3));
    }

    #[test]
    fn a_computed_result_has_no_origin_and_a_capped_one_is_the_cap() {
        let [tokens, capacity, rate, last, now] =
            refill_inputs([Int(2), Int(10), Float(0.5), Int(0), Int(4)]);
        let grown = compute_refill(&tokens, &capacity, &rate, &last, &now).unwrap();
        assert_eq!(
            (grown.tokens.origin(), grown.tokens.value()),
            (None, Float(4.0))
        );
        assert_eq!(grown.last_refill_at.origin(), Some(4)); // now, as given
        let [tokens, capacity, rate, last, now] =
            refill_inputs([Int(2), Int(10), Int(100), Int(0), Int(4)]);
        let capped = compute_refill(&tokens, &capacity, &rate, &last, &now).unwrap();
        assert_eq!(capped.tokens.origin(), Some(1)); // min(grown, capacity) is capacity itself
    }

    #[test]
    fn inputs_are_all_or_none_and_inexact_steps_say_so() {
        let read = |i: usize| (i != 1).then(|| Scalar::from_input(Int(7), i));
        assert_eq!(Scalar::inputs::<3>(read), None);
        let big = Scalar::from_input(Int(i64::MAX), 0);
        assert_eq!(big.plus(&big), Err(Inexact));
    }

    #[test]
    #[should_panic(expected = "an input has a position")]
    fn the_computed_marker_is_no_input_position() {
        let _ = Scalar::from_input(Int(0), usize::MAX);
    }
}
