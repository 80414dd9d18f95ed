//! `protocol_in_code.qos.refill` for Python: the core's refill math on Python numbers.

use pyo3::prelude::*;

use crate::core::refill;
use crate::python::number::{Num, Scalar};
use crate::python::record::frozen_record;

frozen_record! {
    /// The settled balance and when it was settled, always produced together: if `tokens` grew,
    /// `last_refill_at` moved to `now` in the same result; if not, neither changed.
    pub struct RefillResult as "RefillResult" in "protocol_in_code.qos.refill" {
        tokens,
        last_refill_at,
    }
}

/// Settle a balance for the time elapsed since `last_refill_at`, without any bucket.
///
///     elapsed = now - last_refill_at
///     elapsed <= 0 -> RefillResult(tokens, last_refill_at), the inputs unchanged
///     otherwise    -> grown = tokens + elapsed * rate_per_sec
///                     RefillResult(min(grown, capacity), now)
///
/// Zero or negative elapsed time (the same instant, or a clock that went backwards)
/// falls into the same branch: nothing grows, the timestamp stays, and no error is
/// raised. The cap is applied after the growth is added, so a long-idle balance comes
/// back as `capacity`.
///
/// The function takes plain numbers, not a bucket, stores nothing and has no hidden
/// state: the same five inputs always give the same result. Numbers keep Python's types
/// and arithmetic: ints in, ints out; floats, Fractions and Decimals compute as they
/// would in Python.
// The core's math runs first on `Scalar`s when all five numbers are exact ints or floats (no
// Python object in the way, and no error type heavier than "ask Python"), and on any Python
// numbers otherwise, or when a scalar step needs Python after all (an overflow, say). The math
// has no side effects, so starting it over is safe.
#[pyfunction]
#[pyo3(signature = (tokens, capacity, rate_per_sec, last_refill_at, now))]
pub fn compute_refill<'py>(
    tokens: &Bound<'py, PyAny>,
    capacity: &Bound<'py, PyAny>,
    rate_per_sec: &Bound<'py, PyAny>,
    last_refill_at: &Bound<'py, PyAny>,
    now: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, RefillResult>> {
    let py = tokens.py();
    let inputs = [tokens, capacity, rate_per_sec, last_refill_at, now];
    if let Some([tokens, capacity, rate_per_sec, last_refill_at, now]) =
        Scalar::inputs(|i| Scalar::input(inputs[i], i))
    {
        if let Ok(result) =
            refill::compute_refill(&tokens, &capacity, &rate_per_sec, &last_refill_at, &now)
        {
            let object = |scalar: Scalar| scalar.into_object(py, |i| inputs[i].clone());
            return RefillResult::make(py, object(result.tokens), object(result.last_refill_at));
        }
    }
    let refill::RefillResult {
        tokens,
        last_refill_at,
    } = refill::compute_refill(
        &Num::new(tokens),
        &Num::new(capacity),
        &Num::new(rate_per_sec),
        &Num::new(last_refill_at),
        &Num::new(now),
    )?;
    RefillResult::make(py, tokens.into_object(), last_refill_at.into_object())
}
