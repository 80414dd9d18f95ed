//! `protocol_in_code.qos.token_bucket` for Python: the core's bucket as a shared, mutable
//! dataclass, and `try_consume` running the core's decision on it.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::type_object::PyTypeCheck;

use crate::core::quantity::Quantity;
use crate::core::token_bucket::{self as core, ConsumeOutcome};
use crate::python::enums::StrEnum;
use crate::python::record::{defaults, frozen_record, mutable_record, FieldOperation};

mutable_record! {
    /// Where the refill math's answer is stored: the capacity, the current balance, the fill
    /// rate and the time the balance was last settled. Behaves as a mutable dataclass: every
    /// field holds whatever value it was given, and can be read and reassigned. Safe to share
    /// between threads.
    pub struct TokenBucket as "TokenBucket" in "protocol_in_code.qos.token_bucket" {
        capacity / set_capacity,
        tokens / set_tokens,
        rate_per_sec / set_rate_per_sec,
        last_refill_at / set_last_refill_at = defaults::zero(),
    }
    text_signature = "(capacity, tokens, rate_per_sec, last_refill_at=0)";
}

/// The course's `ConsumeOutcome(str, Enum)`.
pub static CONSUME_OUTCOME: StrEnum = StrEnum::new(
    "ConsumeOutcome",
    "protocol_in_code.qos.token_bucket",
    "Whether a request may go ahead: ALLOWED (the tokens were spent) or THROTTLED (nothing was \
     spent).",
    &[("ALLOWED", "Allowed"), ("THROTTLED", "Throttled")],
);

frozen_record! {
    /// The decision on a request and the balance left after it.
    pub struct ConsumeResult as "ConsumeResult" in "protocol_in_code.qos.token_bucket" {
        outcome,
        tokens_remaining,
    }
}

/// Settle `bucket` up to `now`, store the settled balance on it, then spend `n` tokens if the
/// balance covers them.
///
/// The refill is `compute_refill(bucket.tokens, bucket.capacity, bucket.rate_per_sec,
/// bucket.last_refill_at, now)`: the bucket hands over its numbers, never itself, and keeps
/// both numbers of the answer. Then `bucket.tokens < n` means THROTTLED (nothing spent);
/// otherwise `n` is subtracted and the result is ALLOWED. `tokens_remaining` is the bucket's
/// balance after the decision.
///
/// Safe to call from many threads on one bucket: each call's update is stored whole or retried.
#[pyfunction]
#[pyo3(signature = (bucket, n, now))]
pub fn try_consume<'py>(
    bucket: &Bound<'py, PyAny>,
    n: &Bound<'py, PyAny>,
    now: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, ConsumeResult>> {
    let py = bucket.py();
    let bucket = bucket_argument::<TokenBucket>(bucket)?;
    let (outcome, tokens_remaining) = consume(bucket, n, now)?;
    ConsumeResult::make(
        py,
        outcome_member(py, outcome)?.into_bound(py),
        tokens_remaining,
    )
}

/// The `bucket` argument of a course function, if it is a `B` (a course bucket of the pure-Python
/// package, say, is refused with a `TypeError` naming the argument).
pub fn bucket_argument<'a, 'py, B: PyTypeCheck>(
    bucket: &'a Bound<'py, PyAny>,
) -> PyResult<&'a Bound<'py, B>> {
    bucket
        .cast::<B>()
        .map_err(|err| PyTypeError::new_err(format!("argument 'bucket': {err}")))
}

/// The core's decision on `bucket`, and the bucket's own balance object after it (as in the
/// course, `result.tokens_remaining is bucket.tokens`).
pub fn consume<'py>(
    bucket: &Bound<'py, TokenBucket>,
    n: &Bound<'py, PyAny>,
    now: &Bound<'py, PyAny>,
) -> PyResult<(ConsumeOutcome, Bound<'py, PyAny>)> {
    let (outcome, tokens) = bucket
        .get()
        .fields
        .run::<TryConsume, 2>(bucket.py(), [n, now]);
    Ok((outcome?, tokens))
}

/// The core's `try_consume` on a bucket's fields, with `[n, now]`.
struct TryConsume;

impl FieldOperation<4, 2> for TryConsume {
    type Answer = ConsumeOutcome;
    const REPORTED: usize = 1; // tokens

    fn apply<Q: Quantity>(
        fields: [Q; 4],
        [n, now]: &[Q; 2],
    ) -> ([Q; 4], Result<ConsumeOutcome, Q::Error>) {
        let mut bucket = core::TokenBucket::from(fields);
        let outcome = core::try_consume(&mut bucket, n, now).map(|result| result.outcome);
        (bucket.into(), outcome)
    }
}

/// The `ConsumeOutcome` member for a core outcome.
pub fn outcome_member(py: Python<'_>, outcome: ConsumeOutcome) -> PyResult<Py<PyAny>> {
    CONSUME_OUTCOME.member(py, outcome_index(outcome))
}

/// The outcome's position in `CONSUME_OUTCOME`.
pub fn outcome_index(outcome: ConsumeOutcome) -> usize {
    match outcome {
        ConsumeOutcome::Allowed => 0,
        ConsumeOutcome::Throttled => 1,
    }
}
