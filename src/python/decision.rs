//! A limiter's answer for Python: `LimitOutcome` and `Decision`, made from the core's answer.
//!
//! Every limiter answers with these, whichever store keeps its state: the native ones from the
//! core's [`Answer`], the ones written in Python (the Redis limiters) by building them.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::core::exact::keyed::Answer;
use crate::python::enums::StrEnum;
use crate::python::record::frozen_record;

/// The outcomes of a limiter's decision.
pub static LIMIT_OUTCOME: StrEnum = StrEnum::new(
    "LimitOutcome",
    "protocol_in_code.qos.limiter",
    "A limiter's answer: ALLOWED (taken), DENIED (not yet: see wait_ns), NEVER (more than a \
     band can ever hold) or REFUSED (a keyed limiter's table is full of throttled keys).",
    &[
        ("ALLOWED", "Allowed"),
        ("DENIED", "Denied"),
        ("NEVER", "Never"),
        ("REFUSED", "Refused"),
    ],
);

frozen_record! {
    /// A limiter's answer: the outcome, the exact wait in nanoseconds until the same request
    /// would be allowed (0 when allowed, None when never), and the whole tokens every band
    /// still holds. True when allowed.
    pub struct Decision as "Decision" in "protocol_in_code.qos.limiter" {
        outcome,
        wait_ns,
        remaining,
    }
    methods {
        /// Whether the request was (or would be) allowed.
        #[getter]
        fn allowed(&self, py: Python<'_>) -> PyResult<bool> {
            Ok(self.outcome.bind(py).is(LIMIT_OUTCOME.member(py, 0)?.bind(py)))
        }

        fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
            self.allowed(py)
        }
    }
}

impl Decision {
    /// The Python answer for the core's answer: its outcome's code is the index of its
    /// `LimitOutcome` member.
    pub fn of(py: Python<'_>, answer: Answer) -> PyResult<Bound<'_, Self>> {
        let decision = answer.decision;
        Self::build(
            py,
            usize::from(decision.code()),
            decision.wait_ns(),
            answer.left(),
        )
    }

    /// The answer whose outcome is `LimitOutcome` member `index`.
    pub fn build(
        py: Python<'_>,
        index: usize,
        wait_ns: Option<u128>,
        remaining: u128,
    ) -> PyResult<Bound<'_, Self>> {
        Self::make(
            py,
            LIMIT_OUTCOME.member(py, index)?.into_bound(py),
            wait_ns
                .map(|ns| int(py, ns))
                .transpose()?
                .into_bound_py_any(py)?,
            int(py, remaining)?,
        )
    }
}

/// `value` as a Python int. Nearly every count fits 64 bits, which CPython makes from a machine
/// word; only a larger one goes through the bytes a 128-bit value needs (twice as slow).
fn int(py: Python<'_>, value: u128) -> PyResult<Bound<'_, PyAny>> {
    match u64::try_from(value) {
        Ok(small) => small.into_bound_py_any(py),
        Err(_) => value.into_bound_py_any(py),
    }
}
