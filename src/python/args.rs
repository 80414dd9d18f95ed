//! Arguments checked at the door: Python values turned into the core's integers.
//!
//! The exact core computes with `u64` counts, `i64` nanoseconds and rational rates. Each helper
//! here accepts what a Python user would reasonably pass, refuses the rest with a `TypeError` or
//! `ValueError` that names the parameter and the value, and runs before anything is changed.

use std::time::Duration;

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt};

use crate::core::exact::waiting::wait_of_seconds;
use crate::python::errors::text_of;

/// `fractions.Fraction`.
pub fn fraction_class(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FRACTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(FRACTION
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("fractions")?.getattr("Fraction")?.unbind())
        })?
        .bind(py))
}

/// `value` as an exact `Fraction`: ints, Fractions, Decimals and numeric strings exactly; a
/// float through its shortest repr, so 0.1 means 1/10. NaN, infinities and bools are refused.
pub fn exact_fraction<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number, not bool ({value})"
        )));
    }
    // A float (or a subclass such as numpy.float64, whose own repr differs) is read through
    // the plain float's shortest repr.
    let source = if value.is_instance_of::<PyFloat>() {
        PyFloat::new(py, value.extract::<f64>()?).repr()?.into_any()
    } else {
        value.clone()
    };
    fraction_class(py)?.call1((source,)).map_err(|err| {
        if !is_type_or_value_error(py, &err)
            && !err.is_instance_of::<pyo3::exceptions::PyOverflowError>(py)
        {
            return err;
        }
        let kind = if err.is_instance_of::<PyTypeError>(py) {
            PyTypeError::new_err
        } else {
            PyValueError::new_err
        };
        kind(format!(
            "{name} must be a finite number (int, Fraction, Decimal, float or numeric str), not {}",
            value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// Typed arguments: a method that takes `n: Option<N>` says in its signature what it takes,
/// and PyO3 reads it (with the checks below, in the order of the signature) before the body
/// runs. Each names its parameter in its errors, as the course's and the Redis forms do.
macro_rules! typed_argument {
    ($(#[$doc:meta])* $name:ident($inner:ty) = $read:ident($parameter:literal)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name(pub $inner);

        impl<'a, 'py> FromPyObject<'a, 'py> for $name {
            type Error = PyErr;

            fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                $read(&value, $parameter).map(Self)
            }
        }
    };
}

typed_argument!(
    /// `n`: how many tokens, a [`count`].
    N(u64) = count("n")
);
typed_argument!(
    /// `reserved`: the tokens a cost was taken as, a [`count`].
    ReservedCost(u64) = count("reserved")
);
typed_argument!(
    /// `actual`: the tokens a cost turned out to be, a [`count`].
    ActualCost(u64) = count("actual")
);
typed_argument!(
    /// `now_ns`: a call's time, [`nanoseconds`].
    NowNs(i64) = nanoseconds("now_ns")
);
typed_argument!(
    /// `timeout`: how long a blocking call may wait, in [`seconds`].
    Timeout(Duration) = seconds("timeout")
);

/// `n` as given, or 1.
pub fn tokens(n: Option<N>) -> u64 {
    n.map_or(1, |N(n)| n)
}

/// A count of tokens: an int (or an object with `__index__`), not a bool, from 0 to 2^64 - 1.
pub fn count(value: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    let index = integer(value, name)?;
    index.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{name} must be between 0 and 2**64 - 1, not {index}"
        ))
    })
}

/// A time in nanoseconds: an int within 64 bits. A float is most likely seconds from
/// `time.time()` or `time.monotonic()`, and the error says so.
pub fn nanoseconds(value: &Bound<'_, PyAny>, name: &str) -> PyResult<i64> {
    if value.is_instance_of::<PyFloat>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be int nanoseconds, not a float ({}): time.time() and \
             time.monotonic() count seconds; use time.monotonic_ns()",
            value.repr()?
        )));
    }
    let index = integer(value, name)?;
    index
        .extract::<i64>()
        .map_err(|_| PyValueError::new_err(format!("{name} must fit in 64 bits, not {index}")))
}

/// `operator.index(value)`, refusing bools: an int as Python sees one.
pub fn integer<'py>(value: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static INDEX: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    if value.is_exact_instance_of::<PyInt>() {
        return Ok(value.clone());
    }
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not bool ({value})"
        )));
    }
    INDEX
        .import(value.py(), "operator", "index")
        .and_then(|index| index.call1((value,)))
        .map_err(|err| {
            if !is_type_or_value_error(value.py(), &err) {
                return err;
            }
            PyTypeError::new_err(format!(
                "{name} must be an int, not {} ({})",
                value
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string()),
                value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            ))
        })
}

/// A non-negative duration in seconds.
pub fn seconds(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Duration> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be a number of seconds, not bool ({value})"
        )));
    }
    let forever = if name == "timeout" {
        " (None waits for ever)"
    } else {
        ""
    };
    let secs: f64 = value.extract().map_err(|err: PyErr| {
        if err.is_instance_of::<PyOverflowError>(value.py()) {
            // An int beyond any float (10**400): a number, but not one a wait can be.
            return PyValueError::new_err(format!(
                "{name} must be a finite number of seconds >= 0{forever}, not a number too \
                 large for a float"
            ));
        }
        if !is_type_or_value_error(value.py(), &err) {
            return err;
        }
        PyTypeError::new_err(format!(
            "{name} must be a number of seconds, not {}",
            value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })?;
    wait_of_seconds(secs).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{name} must be a finite number of seconds >= 0{forever}, not {secs}"
        ))
    })
}

/// `timeout` as every acquire form reads it, for the waits written in Python: seconds as a
/// float, or the error the native forms raise for the same value.
#[pyfunction]
#[pyo3(name = "_timeout_seconds")]
pub fn timeout_seconds(timeout: &Bound<'_, PyAny>) -> PyResult<f64> {
    seconds(timeout, "timeout").map(|wait| wait.as_secs_f64())
}

/// A rate that may be zero, as `(numerator, denominator)` in lowest terms: exact as for
/// [`exact_fraction`], refused if negative or beyond 64 bits.
pub fn rational(py: Python<'_>, value: &Bound<'_, PyAny>, name: &str) -> PyResult<(u64, u64)> {
    let fraction = exact_fraction(py, value, name)?;
    if fraction.lt(0)? {
        return Err(PyValueError::new_err(format!(
            "{name} must not be negative, not {}",
            fraction.str()?
        )));
    }
    fraction_parts(&fraction).ok_or_else(|| {
        PyValueError::new_err(format!(
            "{name}={} needs a numerator or denominator beyond 64 bits",
            text_of(&fraction)
        ))
    })
}

/// A `Fraction`'s numerator and denominator, if both fit in 64 bits (so only a fraction of
/// 0 or more has them).
pub fn fraction_parts(fraction: &Bound<'_, PyAny>) -> Option<(u64, u64)> {
    let part = |name| fraction.getattr(name).ok()?.extract::<u64>().ok();
    Some((part("numerator")?, part("denominator")?))
}

/// Whether an error is one a bad argument raises (and so may be reworded to name the
/// parameter), rather than something to pass on untouched (`KeyboardInterrupt`, `MemoryError`).
fn is_type_or_value_error(py: Python<'_>, err: &PyErr) -> bool {
    err.is_instance_of::<PyTypeError>(py) || err.is_instance_of::<PyValueError>(py)
}

/// `numerator / denominator` as Python shows an exact rate: an int when whole, else a Fraction.
pub fn rational_object(
    py: Python<'_>,
    numerator: u64,
    denominator: u64,
) -> PyResult<Bound<'_, PyAny>> {
    if denominator == 1 {
        Ok(numerator.into_pyobject(py)?.into_any())
    } else {
        fraction_class(py)?.call1((numerator, denominator))
    }
}

/// Whether `value` can be iterated: False only for a TypeError from `iter()`, so that any
/// other error (a KeyboardInterrupt in `__iter__`) reaches the caller.
pub fn is_iterable(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    match value.try_iter() {
        Ok(_) => Ok(true),
        Err(error) if error.is_instance_of::<pyo3::exceptions::PyTypeError>(value.py()) => {
            Ok(false)
        }
        Err(error) => Err(error),
    }
}
