//! `protocol_in_code.qos.shaper_loop` for Python: the capstone, classify, refill, spend.
//!
//! Isolation comes from one independent token bucket per class: a class that floods drains only
//! its own bucket, so another class sails through at the same instant. The shaper itself has no
//! arithmetic: each decision is its class's bucket running the core's `try_consume`. It keeps the
//! objects the course lets callers reach into (`buckets`, `trace`) as the Python objects they
//! are, so replacing a bucket in `shaper.buckets` or reading `shaper.trace` behaves as in the
//! course.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyInt, PyList, PyString, PyTuple};

use crate::core::quantity::Quantity;
use crate::python::number::exact_i64;
use crate::python::record::{defaults, frozen_record, mutable_record, FieldOperation};
use crate::python::token_bucket::{self, TokenBucket, CONSUME_OUTCOME};

frozen_record! {
    /// Which class, what its bucket decided, and the balance its bucket has left.
    pub struct EnqueueResult as "EnqueueResult" in "protocol_in_code.qos.shaper_loop" {
        class_name,
        outcome,
        tokens_remaining,
    }
}

const BUCKETS: usize = 1;
const TRACE: usize = 3;

mutable_record! {
    /// A class tree, one token bucket per class (`buckets`, by class name), a clock, and a
    /// trace of every decision (a list of lines). Each shaper gets its own dict and list unless
    /// given them; callers may change both directly.
    pub struct ToyShaper as "ToyShaper" in "protocol_in_code.qos.shaper_loop" {
        tree / set_tree,
        buckets / set_buckets = defaults::dict(),
        clock / set_clock = defaults::zero(),
        trace / set_trace = defaults::list(),
    }
    text_signature = "(tree, buckets={}, clock=0, trace=[])";
    methods {
        /// Move the shaper's clock forward: `clock += seconds`.
        fn tick(&self, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
            let (done, _) = self.fields.run::<Tick, 1>(seconds.py(), [seconds]);
            done
        }

        /// Spend `size` tokens from `class_name`'s own bucket at `now`, append a trace line, and
        /// return the decision. An unknown class raises KeyError.
        #[pyo3(signature = (class_name, size, now))]
        fn enqueue<'py>(
            &self,
            class_name: &Bound<'py, PyAny>,
            size: &Bound<'py, PyAny>,
            now: &Bound<'py, PyAny>,
        ) -> PyResult<Bound<'py, EnqueueResult>> {
            self.decide(class_name, size, now)
        }
    }
}

impl ToyShaper {
    /// `ToyShaper.enqueue`: the class's own bucket decides, then the trace gets its line.
    fn decide<'py>(
        &self,
        class_name: &Bound<'py, PyAny>,
        size: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, EnqueueResult>> {
        let py = class_name.py();
        let bucket = self
            .fields
            .get(py, BUCKETS)
            .into_bound(py)
            .get_item(class_name)?;
        let bucket = bucket.cast::<TokenBucket>().map_err(|_| {
            PyTypeError::new_err(format!(
                "the bucket of class {} must be a TokenBucket",
                class_name
                    .repr()
                    .map_or_else(|_| "?".into(), |name| name.to_string())
            ))
        })?;
        let (outcome, tokens_remaining) = token_bucket::consume(bucket, size, now)?;
        let index = token_bucket::outcome_index(outcome);
        let append = Append::to(self.fields.get(py, TRACE).into_bound(py))?;
        append.call(trace_line(
            class_name,
            size,
            now,
            CONSUME_OUTCOME.text(index),
            &tokens_remaining,
        )?)?;
        EnqueueResult::make(
            py,
            class_name.clone(),
            CONSUME_OUTCOME.member(py, index)?.into_bound(py),
            tokens_remaining,
        )
    }
}

/// `trace.append`, looked up before the line it appends is made, as the course's
/// `self.trace.append(f"...")` looks it up.
enum Append<'py> {
    /// An exact list: looking up its `append` can neither fail nor run code, so it is skipped,
    /// and the line is appended directly.
    List(Bound<'py, PyList>),
    /// Anything else: its `append`, whatever that is.
    Method(Bound<'py, PyAny>),
}

impl<'py> Append<'py> {
    fn to(trace: Bound<'py, PyAny>) -> PyResult<Self> {
        match trace.cast_into_exact::<PyList>() {
            Ok(list) => Ok(Self::List(list)),
            Err(other) => {
                let trace = other.into_inner();
                Ok(Self::Method(trace.getattr(intern!(trace.py(), "append"))?))
            }
        }
    }

    fn call(&self, line: Bound<'py, PyString>) -> PyResult<()> {
        match self {
            Self::List(list) => list.append(line),
            Self::Method(append) => append.call1((line,)).map(drop),
        }
    }
}

/// The course's trace line, `f"enqueue {class_name} size={size} at t={now}: {outcome.value}
/// (tokens_remaining={tokens_remaining})"`, made as CPython makes that f-string: each value
/// formatted as `format(value, "")`, in order (so a custom `__format__` runs, and raises, where
/// it would there), and the pieces joined once.
fn trace_line<'py>(
    class_name: &Bound<'py, PyAny>,
    size: &Bound<'py, PyAny>,
    now: &Bound<'py, PyAny>,
    outcome: &'static str,
    tokens_remaining: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyString>> {
    let py = class_name.py();
    let pieces = [
        Piece::Text("enqueue "),
        Piece::format(class_name)?,
        Piece::Text(" size="),
        Piece::format(size)?,
        Piece::Text(" at t="),
        Piece::format(now)?,
        Piece::Text(": "),
        Piece::Text(outcome),
        Piece::Text(" (tokens_remaining="),
        Piece::format(tokens_remaining)?,
        Piece::Text(")"),
    ];
    let mut line = String::with_capacity(96);
    for piece in &pieces {
        match piece {
            Piece::Text(text) => line.push_str(text),
            Piece::Int(int) => line.push_str(itoa::Buffer::new().format(*int)),
            // A str that is no UTF-8 (a lone surrogate) has no Rust spelling: Python joins it.
            Piece::Formatted(text) => match text.to_str() {
                Ok(text) => line.push_str(text),
                Err(_) => return join_in_python(py, &pieces),
            },
        }
    }
    Ok(PyString::new(py, &line))
}

/// One piece of a trace line: text of the line's own, or a value formatted as `format` does it.
enum Piece<'py> {
    Text(&'static str),
    /// An exact `int` within 64 bits, whose `format(value, "")` is its decimal digits.
    Int(i64),
    Formatted(Bound<'py, PyString>),
}

impl<'py> Piece<'py> {
    /// `format(value, "")`: an exact str is itself and an exact int its decimal digits (what
    /// `format` gives for them without calling anything); any other value goes through the
    /// builtin `format`, which runs its `__format__`.
    fn format(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        static FORMAT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        if let Ok(text) = value.cast_exact::<PyString>() {
            return Ok(Self::Formatted(text.clone()));
        }
        if let Some(int) = value
            .cast_exact::<PyInt>()
            .ok()
            .and_then(|int| exact_i64(int))
        {
            return Ok(Self::Int(int));
        }
        let format = FORMAT.import(value.py(), "builtins", "format")?;
        Ok(Self::Formatted(
            format.call1((value,))?.cast_into::<PyString>()?,
        ))
    }

    fn to_py_str(&self, py: Python<'py>) -> Bound<'py, PyString> {
        match self {
            Self::Text(text) => PyString::new(py, text),
            Self::Int(int) => PyString::new(py, itoa::Buffer::new().format(*int)),
            Self::Formatted(text) => text.clone(),
        }
    }
}

/// `"".join(pieces)`, for a line Rust cannot hold.
fn join_in_python<'py>(py: Python<'py>, pieces: &[Piece<'py>]) -> PyResult<Bound<'py, PyString>> {
    let pieces = PyTuple::new(py, pieces.iter().map(|piece| piece.to_py_str(py)))?;
    Ok(intern!(py, "")
        .call_method1(intern!(py, "join"), (pieces,))?
        .cast_into::<PyString>()?)
}

/// `clock += seconds` on a shaper's fields.
struct Tick;

impl FieldOperation<4, 1> for Tick {
    type Answer = ();
    const REPORTED: usize = 2; // clock

    fn apply<Q: Quantity>(
        [tree, buckets, clock, trace]: [Q; 4],
        [seconds]: &[Q; 1],
    ) -> ([Q; 4], Result<(), Q::Error>) {
        match clock.plus_in_place(seconds) {
            Ok(clock) => ([tree, buckets, clock, trace], Ok(())),
            Err(error) => ([tree, buckets, clock, trace], Err(error)),
        }
    }
}

/// Enqueue each `(class_name, size)` of `offered` at the shaper's clock, in order, and return
/// the decisions as a tuple.
#[pyfunction]
pub fn run_contention<'py>(
    shaper: &Bound<'py, PyAny>,
    offered: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut decisions = Vec::new();
    for item in offered.try_iter()? {
        let [class_name, size] = unpack(&item?)?;
        let enqueue = shaper.getattr("enqueue")?;
        let now = shaper.getattr("clock")?;
        decisions.push(enqueue.call1((class_name, size, now))?);
    }
    PyTuple::new(shaper.py(), decisions)
}

/// `a, b = item`, with Python's errors.
fn unpack<'py>(item: &Bound<'py, PyAny>) -> PyResult<[Bound<'py, PyAny>; 2]> {
    let Ok(mut values) = item.try_iter() else {
        return Err(PyTypeError::new_err(format!(
            "cannot unpack non-iterable {} object",
            item.get_type().name()?
        )));
    };
    let mut take = || values.next().transpose();
    match (take()?, take()?) {
        (Some(first), Some(second)) => {
            if take()?.is_some() {
                return Err(PyValueError::new_err(
                    "too many values to unpack (expected 2)",
                ));
            }
            Ok([first, second])
        }
        (first, _) => Err(PyValueError::new_err(format!(
            "not enough values to unpack (expected 2, got {})",
            usize::from(first.is_some())
        ))),
    }
}
