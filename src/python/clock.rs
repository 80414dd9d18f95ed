//! The clock a limiter or a meter reads when no `now_ns` is given.
//!
//! By default that is the monotonic clock behind `time.monotonic_ns`, read natively on Linux
//! (so a decision needs no Python call to learn the time); otherwise any callable that returns
//! int nanoseconds. Either way the result goes through the same check as an explicit `now_ns`.

use pyo3::prelude::*;

use crate::core::exact::clock_gap::shift_onto;
use crate::python::args::{nanoseconds, NowNs};

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
    pub fn now(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<i64> {
        match (now_ns, &self.0) {
            (Some(NowNs(now)), _) => Ok(now),
            (None, None) => monotonic_ns(py),
            (None, Some(clock)) => nanoseconds(&clock.bind(py).call0()?, "clock()"),
        }
    }

    /// Nanoseconds from this clock's reading until `at_ns` (0 once it is there).
    pub fn until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
        let now = self.now(py, None)?;
        Ok(u128::try_from(i128::from(at_ns) - i128::from(now)).unwrap_or(0))
    }

    /// What a pickle records of where its times come from: for the default clock, the boot of
    /// the machine they were read on; nothing for a clock of the caller's, whose times are the
    /// caller's to keep meaningful.
    pub fn origin(&self) -> Option<&'static str> {
        match self.0 {
            None => boot_id(),
            Some(_) => None,
        }
    }

    /// How far the times of a saved limiter must move to mean the same on this clock: nothing
    /// if they were read on this boot of this machine, or come from a clock of the caller's.
    /// Otherwise (another machine, or a reboot: monotonic readings of another count) its clock,
    /// `latest`, moves to now, and every other time with it (see `clock_gap::shift_onto`).
    pub fn shift(
        &self,
        py: Python<'_>,
        origin: Option<&str>,
        latest: Option<i64>,
    ) -> PyResult<i64> {
        match (origin, &self.0, latest) {
            (Some(saved_on), None, Some(latest)) if Some(saved_on) != boot_id() => {
                Ok(shift_onto(latest, monotonic_ns(py)?))
            }
            _ => Ok(0),
        }
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

pub use crate::host::boot_id;

/// The monotonic clock behind `time.monotonic_ns`, read without calling Python where the
/// platform allows (asking Python would cost a call per decision).
#[cfg(target_os = "linux")]
#[allow(clippy::unnecessary_wraps)] // the same signature as the other platforms' form
pub fn monotonic_ns(_py: Python<'_>) -> PyResult<i64> {
    Ok(crate::host::monotonic_ns())
}

#[cfg(not(target_os = "linux"))]
pub fn monotonic_ns(py: Python<'_>) -> PyResult<i64> {
    py.import("time")?.call_method0("monotonic_ns")?.extract()
}
