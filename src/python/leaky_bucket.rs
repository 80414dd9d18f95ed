//! `protocol_in_code.qos.leaky_bucket` for Python: the core's leaky bucket as a shared, mutable
//! dataclass, and `leak`/`offer` running the core's operations on it.

use pyo3::prelude::*;

use crate::core::leaky_bucket::{self as core, OfferOutcome};
use crate::core::quantity::Quantity;
use crate::python::enums::StrEnum;
use crate::python::record::{defaults, frozen_record, mutable_record, FieldOperation};
use crate::python::token_bucket::bucket_argument;

mutable_record! {
    /// A level that arrivals raise and time drains: the capacity, how full it is, how fast it
    /// drains and when the level was last settled. Behaves as a mutable dataclass. Safe to share
    /// between threads.
    pub struct LeakyBucket as "LeakyBucket" in "protocol_in_code.qos.leaky_bucket" {
        capacity / set_capacity,
        level / set_level,
        leak_per_sec / set_leak_per_sec,
        last_leak_at / set_last_leak_at = defaults::zero(),
    }
    text_signature = "(capacity, level, leak_per_sec, last_leak_at=0)";
}

/// The course's `OfferOutcome(str, Enum)`.
pub static OFFER_OUTCOME: StrEnum = StrEnum::new(
    "OfferOutcome",
    "protocol_in_code.qos.leaky_bucket",
    "Whether an arrival got in: ACCEPTED (the level rose) or OVERFLOWED (dropped, not queued).",
    &[("ACCEPTED", "Accepted"), ("OVERFLOWED", "Overflowed")],
);

frozen_record! {
    /// The decision on an arrival and the level after it.
    pub struct OfferResult as "OfferResult" in "protocol_in_code.qos.leaky_bucket" {
        outcome,
        level,
    }
}

/// Drain `bucket` for the time elapsed since `bucket.last_leak_at`, and store the result.
///
///     elapsed = now - bucket.last_leak_at
///     elapsed <= 0 -> nothing changes
///     otherwise    -> bucket.level = max(bucket.level - elapsed * bucket.leak_per_sec, 0)
///                     bucket.last_leak_at = now
///
/// The same lazy settlement as `compute_refill`, run the other way: time takes away instead of
/// adding, and the floor is empty instead of the cap being full.
#[pyfunction]
#[pyo3(signature = (bucket, now))]
pub fn leak(bucket: &Bound<'_, PyAny>, now: &Bound<'_, PyAny>) -> PyResult<()> {
    let bucket = bucket_argument::<LeakyBucket>(bucket)?;
    let (done, _) = bucket.get().fields.run::<Leak, 1>(bucket.py(), [now]);
    done
}

/// Leak `bucket` up to `now`, then admit `n` if `bucket.level + n` stays within `capacity`.
///
/// What does not fit is OVERFLOWED: dropped, with the level unchanged (a leaky bucket never
/// queues). Otherwise the level rises by `n` and the result is ACCEPTED. `level` in the result
/// is the bucket's level after the decision. Safe to call from many threads on one bucket.
#[pyfunction]
#[pyo3(signature = (bucket, n, now))]
pub fn offer<'py>(
    bucket: &Bound<'py, PyAny>,
    n: &Bound<'py, PyAny>,
    now: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, OfferResult>> {
    let py = bucket.py();
    let bucket = bucket_argument::<LeakyBucket>(bucket)?;
    let (outcome, level) = bucket.get().fields.run::<Offer, 2>(py, [n, now]);
    let index = match outcome? {
        OfferOutcome::Accepted => 0,
        OfferOutcome::Overflowed => 1,
    };
    OfferResult::make(py, OFFER_OUTCOME.member(py, index)?.into_bound(py), level)
}

/// The core's `leak` on a bucket's fields, with `[now]`.
struct Leak;

impl FieldOperation<4, 1> for Leak {
    type Answer = ();
    const REPORTED: usize = 1; // level

    fn apply<Q: Quantity>(fields: [Q; 4], [now]: &[Q; 1]) -> ([Q; 4], Result<(), Q::Error>) {
        let mut bucket = core::LeakyBucket::from(fields);
        let done = core::leak(&mut bucket, now);
        (bucket.into(), done)
    }
}

/// The core's `offer` on a bucket's fields, with `[n, now]`.
struct Offer;

impl FieldOperation<4, 2> for Offer {
    type Answer = OfferOutcome;
    const REPORTED: usize = 1; // level

    fn apply<Q: Quantity>(
        fields: [Q; 4],
        [n, now]: &[Q; 2],
    ) -> ([Q; 4], Result<OfferOutcome, Q::Error>) {
        let mut bucket = core::LeakyBucket::from(fields);
        let outcome = core::offer(&mut bucket, n, now).map(|result| result.outcome);
        (bucket.into(), outcome)
    }
}
