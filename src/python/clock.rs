//! The clock a limiter or a meter reads when no `now_ns` is given.
//!
//! By default that is the monotonic clock behind `time.monotonic_ns`, read natively on Linux
//! (so a decision needs no Python call to learn the time); otherwise any callable that returns
//! int nanoseconds. Either way the result goes through the same check as an explicit `now_ns`.

use pyo3::prelude::*;

use crate::python::args::{count, nanoseconds};

/// `None` for the monotonic clock, else a callable.
pub struct Clock(Option<Py<PyAny>>);

impl Clock {
    /// From a constructor's `clock=` argument: None, or a callable.
    pub fn new(clock: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        match clock {
            Some(clock) if clock.is_none() => Ok(Self(None)),
            Some(clock) if !clock.is_callable() => {
                Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "clock must be a callable returning int nanoseconds, such as \
                     time.monotonic_ns, not {}",
                    clock.repr()?
                )))
            }
            clock => Ok(Self(clock.map(Bound::unbind))),
        }
    }

    /// As [`Clock::new`], and a callable is called once, so that a clock of the wrong kind
    /// (`time.time`, which counts float seconds) is refused when the limiter is made rather
    /// than at its first decision.
    pub fn checked(py: Python<'_>, clock: Option<Bound<'_, PyAny>>) -> PyResult<Self> {
        let clock = Self::new(clock)?;
        if let Some(callable) = &clock.0 {
            nanoseconds(&callable.bind(py).call0()?, "clock()")?;
        }
        Ok(clock)
    }

    /// `now_ns` if given, else this clock's reading.
    pub fn now(&self, py: Python<'_>, now_ns: Option<&Bound<'_, PyAny>>) -> PyResult<i64> {
        match (now_ns, &self.0) {
            (Some(now), _) => nanoseconds(now, "now_ns"),
            (None, None) => monotonic_ns(py),
            (None, Some(clock)) => nanoseconds(&clock.bind(py).call0()?, "clock()"),
        }
    }

    /// A limiter call's `n` (default 1) and time (`now_ns`, else this clock), checked in that
    /// order.
    pub fn request(
        &self,
        py: Python<'_>,
        n: Option<&Bound<'_, PyAny>>,
        now_ns: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(u64, i64)> {
        let n = n.map_or(Ok(1), |n| count(n, "n"))?;
        Ok((n, self.now(py, now_ns)?))
    }

    /// The callable, or None for the monotonic clock (to pickle).
    pub fn callable(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.0.as_ref().map(|clock| clock.clone_ref(py))
    }

    /// For the cycle collector.
    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        match &self.0 {
            Some(clock) => visit.call(clock),
            None => Ok(()),
        }
    }
}

/// The monotonic clock behind `time.monotonic_ns`, read without calling Python where the
/// platform allows.
#[cfg(target_os = "linux")]
pub fn monotonic_ns(_py: Python<'_>) -> PyResult<i64> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    if status != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(now.tv_sec * 1_000_000_000 + now.tv_nsec)
}

#[cfg(not(target_os = "linux"))]
pub fn monotonic_ns(py: Python<'_>) -> PyResult<i64> {
    py.import("time")?.call_method0("monotonic_ns")?.extract()
}
