//! `protocol_in_code.qos.token_bucket` for Python: a shared, mutable bucket around the core.
//!
//! The course's `TokenBucket` is a mutable dataclass whose fields callers read and write, and
//! which many threads may share. The native bucket keeps its four fields behind a mutex and
//! follows one rule: **no Python code runs while the mutex is held**. Python code can switch
//! threads or re-enter the same bucket (a number whose `__sub__` reads it), and a lock held
//! across it would deadlock.
//!
//! [`try_consume`] therefore has two ways to run the core's `try_consume`:
//!
//! * When every number is an exact `int` or `float` (a [`Scalar`]), no Python code can run, so
//!   the whole decision happens under the lock, start to finish.
//! * Otherwise it settles optimistically: lock, copy the four fields out, unlock; run the core on
//!   the copy (Python arithmetic runs here); lock again and store the copy only if nobody stored
//!   anything in between (a version counter says), else start over from the fresh state.
//!
//! Either way an update is stored whole or not at all: no update is lost and nobody sees half of
//! one. Values displaced by a general-case store are released after unlocking, since releasing
//! an arbitrary object can run its `__del__`.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::core::token_bucket::{self as core, ConsumeOutcome};
use crate::python::enums::StrEnum;
use crate::python::number::{Num, Scalar, StoredNumber};
use crate::python::record::{self, frozen_record};

type Fields = core::TokenBucket<StoredNumber>;

/// The bucket's fields as stored, with a count of stores.
struct Stored {
    fields: Fields,
    version: u64,
}

/// Where the refill math's answer is stored: the capacity, the current balance, the fill rate
/// and the time the balance was last settled. Behaves as a mutable dataclass: every field
/// holds whatever value it was given, and can be read and reassigned.
#[pyclass(
    frozen,
    name = "TokenBucket",
    module = "protocol_in_code.qos.token_bucket"
)]
pub struct TokenBucket {
    state: Mutex<Stored>,
}

type Field = fn(&mut Fields) -> &mut StoredNumber;

const NAMES: [&str; 4] = ["capacity", "tokens", "rate_per_sec", "last_refill_at"];
const CAPACITY: Field = |b| &mut b.capacity;
const TOKENS: Field = |b| &mut b.tokens;
const RATE_PER_SEC: Field = |b| &mut b.rate_per_sec;
const LAST_REFILL_AT: Field = |b| &mut b.last_refill_at;

impl TokenBucket {
    fn lock(&self) -> MutexGuard<'_, Stored> {
        // Every store is a single move, so even a panic elsewhere cannot leave the fields
        // half-written: a poisoned lock still guards a consistent bucket.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The four field objects, in field order, and the version they belong to.
    fn snapshot<'py>(&self, py: Python<'py>) -> (core::TokenBucket<Num<'py>>, u64) {
        let stored = self.lock();
        (
            core::TokenBucket {
                capacity: stored.fields.capacity.num(py),
                tokens: stored.fields.tokens.num(py),
                rate_per_sec: stored.fields.rate_per_sec.num(py),
                last_refill_at: stored.fields.last_refill_at.num(py),
            },
            stored.version,
        )
    }

    fn field_values<'py>(&self, py: Python<'py>) -> [Bound<'py, PyAny>; 4] {
        let (fields, _) = self.snapshot(py);
        [
            fields.capacity.into_object(),
            fields.tokens.into_object(),
            fields.rate_per_sec.into_object(),
            fields.last_refill_at.into_object(),
        ]
    }

    /// Store `fields` if the bucket is still at `version`. Returns what to release once the lock
    /// is gone: the displaced fields (`Ok`) or, if someone stored first, the rejected ones (`Err`).
    fn store_if_unchanged(&self, version: u64, fields: Fields) -> Result<Fields, Fields> {
        let mut stored = self.lock();
        if stored.version != version {
            return Err(fields);
        }
        stored.version = stored.version.wrapping_add(1);
        Ok(std::mem::replace(&mut stored.fields, fields))
    }

    fn get_field(&self, py: Python<'_>, field: Field) -> Py<PyAny> {
        field(&mut self.lock().fields).object().clone_ref(py)
    }

    fn set_field(&self, field: Field, value: Bound<'_, PyAny>) {
        let value = StoredNumber::new(value);
        let displaced = {
            let mut stored = self.lock();
            stored.version = stored.version.wrapping_add(1);
            std::mem::replace(field(&mut stored.fields), value)
        };
        drop(displaced);
    }

    /// The whole decision under the lock, when every number is a [`Scalar`]: no Python code can
    /// run, so nobody can interleave. `None`, with the bucket untouched, when a number is not a
    /// scalar or an operation needs Python.
    fn try_consume_scalars<'py>(
        &self,
        n: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
    ) -> Option<core::ConsumeResult<Bound<'py, PyAny>>> {
        let py = n.py();
        let (n, now) = (Scalar::new(n)?, Scalar::new(now)?);
        let mut stored = self.lock();
        let f = &stored.fields;
        let mut working = core::TokenBucket {
            capacity: f.capacity.scalar(py)?,
            tokens: f.tokens.scalar(py)?,
            rate_per_sec: f.rate_per_sec.scalar(py)?,
            last_refill_at: f.last_refill_at.scalar(py)?,
        };
        let outcome = core::try_consume(&mut working, &n, &now).ok()?.outcome;
        // Releasing the displaced ints and floats runs no Python code either.
        stored.fields.update_from(working, StoredNumber::set_scalar);
        stored.version = stored.version.wrapping_add(1);
        Some(stored.fields.decided(py, outcome))
    }

    /// The general case: settle a copy with the lock released (Python arithmetic may run,
    /// switch threads or read this bucket), then store it if nobody stored first, else retry.
    fn try_consume_numbers<'py>(
        &self,
        py: Python<'py>,
        n: &Num<'py>,
        now: &Num<'py>,
    ) -> PyResult<core::ConsumeResult<Bound<'py, PyAny>>> {
        loop {
            let (mut working, version) = self.snapshot(py);
            let decided = core::try_consume(&mut working, n, now);
            // Succeeded or failed part-way, `working` is what the course would have left on
            // the bucket: store it, unless another update came first.
            let settled = working.map(StoredNumber::from_num);
            let result = decided.map(|result| settled.decided(py, result.outcome));
            match self.store_if_unchanged(version, settled) {
                Ok(displaced) => {
                    drop(displaced);
                    return result;
                }
                Err(rejected) => drop(rejected),
            }
        }
    }
}

impl Fields {
    /// The result of a decision: `tokens_remaining` is the bucket's own balance object after
    /// it, as in the course (`result.tokens_remaining is bucket.tokens`).
    fn decided<'py>(
        &self,
        py: Python<'py>,
        outcome: ConsumeOutcome,
    ) -> core::ConsumeResult<Bound<'py, PyAny>> {
        core::ConsumeResult {
            outcome,
            tokens_remaining: self.tokens.object().bind(py).clone(),
        }
    }
}

/// The course's default for `last_refill_at`: the int `0`.
fn zero() -> Py<PyAny> {
    Python::attach(|py| {
        0_i64
            .into_pyobject(py)
            .map_or_else(|e| match e {}, |z| z.into_any().unbind())
    })
}

#[pymethods]
impl TokenBucket {
    #[new]
    #[pyo3(
        signature = (capacity, tokens, rate_per_sec, last_refill_at = zero()),
        text_signature = "(capacity, tokens, rate_per_sec, last_refill_at=0)"
    )]
    fn __new__(
        capacity: Bound<'_, PyAny>,
        tokens: Bound<'_, PyAny>,
        rate_per_sec: Bound<'_, PyAny>,
        last_refill_at: Py<PyAny>,
    ) -> Self {
        let py = tokens.py();
        let fields = core::TokenBucket {
            capacity: StoredNumber::new(capacity),
            tokens: StoredNumber::new(tokens),
            rate_per_sec: StoredNumber::new(rate_per_sec),
            last_refill_at: StoredNumber::new(last_refill_at.into_bound(py)),
        };
        Self {
            state: Mutex::new(Stored { fields, version: 0 }),
        }
    }

    /// The most tokens the bucket keeps.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_field(py, CAPACITY)
    }
    #[setter]
    fn set_capacity(&self, value: Bound<'_, PyAny>) {
        self.set_field(CAPACITY, value);
    }

    /// The balance as of `last_refill_at`.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_field(py, TOKENS)
    }
    #[setter]
    fn set_tokens(&self, value: Bound<'_, PyAny>) {
        self.set_field(TOKENS, value);
    }

    /// Tokens earned per unit of the caller's clock.
    #[getter]
    fn rate_per_sec(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_field(py, RATE_PER_SEC)
    }
    #[setter]
    fn set_rate_per_sec(&self, value: Bound<'_, PyAny>) {
        self.set_field(RATE_PER_SEC, value);
    }

    /// When `tokens` was last settled.
    #[getter]
    fn last_refill_at(&self, py: Python<'_>) -> Py<PyAny> {
        self.get_field(py, LAST_REFILL_AT)
    }
    #[setter]
    fn set_last_refill_at(&self, value: Bound<'_, PyAny>) {
        self.set_field(LAST_REFILL_AT, value);
    }

    #[classattr]
    fn __match_args__(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        PyTuple::new(py, NAMES)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let values = slf.get().field_values(slf.py());
        let [a, b, c, d] = values;
        record::repr(
            slf.as_any(),
            &[(NAMES[0], a), (NAMES[1], b), (NAMES[2], c), (NAMES[3], d)],
        )
    }

    fn __richcmp__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        op: CompareOp,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let fields = other
            .cast_exact::<Self>()
            .ok()
            .map(|other| (slf.get().field_values(py), other.get().field_values(py)));
        record::compare_fields(py, op, fields)
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        Ok((
            slf.get_type(),
            PyTuple::new(py, slf.get().field_values(py))?,
        ))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never wait here: the collector may run while this thread holds the lock. Skipping a
        // visit only makes the collector keep these objects alive a little longer.
        if let Ok(stored) = self.state.try_lock() {
            let f = &stored.fields;
            for field in [&f.capacity, &f.tokens, &f.rate_per_sec, &f.last_refill_at] {
                visit.call(field.object())?;
            }
        }
        Ok(())
    }

    fn __clear__(&self) {
        let displaced = Python::attach(|py| {
            let none = || StoredNumber::new(py.None().into_bound(py));
            let cleared = core::TokenBucket {
                capacity: none(),
                tokens: none(),
                rate_per_sec: none(),
                last_refill_at: none(),
            };
            let mut stored = self.lock();
            stored.version = stored.version.wrapping_add(1);
            std::mem::replace(&mut stored.fields, cleared)
        });
        drop(displaced);
    }
}

/// The course's `ConsumeOutcome(str, Enum)`, built once.
static CONSUME_OUTCOME: PyOnceLock<StrEnum> = PyOnceLock::new();

pub fn consume_outcome(py: Python<'_>) -> PyResult<&StrEnum> {
    CONSUME_OUTCOME.get_or_try_init(py, || {
        StrEnum::new(
            py,
            "ConsumeOutcome",
            "protocol_in_code.qos.token_bucket",
            "Whether a request may go ahead: ALLOWED (the tokens were spent) or THROTTLED \
             (nothing was spent).",
            &[("ALLOWED", "Allowed"), ("THROTTLED", "Throttled")],
        )
    })
}

frozen_record! {
    /// The decision on a request and the balance left after it.
    pub struct ConsumeResult as "ConsumeResult" in "protocol_in_code.qos.token_bucket" {
        outcome,
        tokens_remaining,
    }
}

impl ConsumeResult {
    fn from_core(py: Python<'_>, result: core::ConsumeResult<Bound<'_, PyAny>>) -> PyResult<Self> {
        let index = match result.outcome {
            ConsumeOutcome::Allowed => 0,
            ConsumeOutcome::Throttled => 1,
        };
        Ok(Self {
            outcome: consume_outcome(py)?.member(py, index),
            tokens_remaining: result.tokens_remaining.unbind(),
        })
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
pub fn try_consume(
    bucket: &Bound<'_, TokenBucket>,
    n: &Bound<'_, PyAny>,
    now: &Bound<'_, PyAny>,
) -> PyResult<ConsumeResult> {
    let py = bucket.py();
    let bucket = bucket.get();
    let decided = match bucket.try_consume_scalars(n, now) {
        Some(decided) => decided,
        None => bucket.try_consume_numbers(py, &Num::new(n), &Num::new(now))?,
    };
    ConsumeResult::from_core(py, decided)
}
