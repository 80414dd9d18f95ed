//! `protocol_in_code.qos.limiter` for Python: the exact real-clock limiter of `core::exact`.
//!
//! Everything Python hands over is checked and turned into integers here, once: rates into
//! exact fractions, counts into `u64`, times into `i64` nanoseconds. The limiter's state is
//! then plain Rust behind a mutex, so no Python code ever runs while it is locked, and the
//! default clock is read natively. A blocking `acquire` sleeps with the interpreter released.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::clock_gap::shifted;
use crate::core::exact::config::Config;
use crate::core::exact::limiter::Limiter;
use crate::core::exact::settle::Balance;
use crate::python::args::{count, nanoseconds};
use crate::python::clock::Clock;
use crate::python::config::read_config;
use crate::python::errors::{shown, OfClock};
use crate::python::fork::Lineage;
use crate::python::surface::methods::limiter_methods;
use crate::python::surface::{limits_repr, pickled_kwargs, PyLimit};

/// An exact rate limiter of one or more bands.
///
/// RateLimiter(rate, *, burst=None, per=1, bands=None, initial=None, start_ns=None,
/// clock=None): either one band from rate/burst/per, or bands, a list of Band (or (rate,
/// burst) / (rate, burst, per) tuples). initial is the starting number of tokens (default:
/// full); clock a callable returning int nanoseconds (default: time.monotonic_ns).
///
/// Methods (each takes now_ns= to override the clock): try_acquire(n=1) -> bool,
/// check(n=1) -> Decision (takes if allowed), peek(n=1) -> Decision (takes nothing),
/// refund(n=1), available() -> int, blocking acquire(n=1, timeout=None) -> bool and
/// await acquire_async(n=1, timeout=None). A limiter is also a decorator (for def, async def
/// and generators of both kinds) and a context manager (with and async with), each taking one
/// token.
/// Thread-safe: decisions are exact under any contention, and a thread sleeping in acquire
/// holds neither the GIL nor the limiter.
#[pyclass(
    frozen,
    subclass,
    dict,
    weakref,
    name = "RateLimiter",
    module = "protocol_in_code.qos.limiter"
)]
pub struct RateLimiter {
    state: Mutex<Limiter>,
    clock: Clock,
    config: Config,
    lineage: Lineage,
}

impl RateLimiter {
    fn lock(&self) -> MutexGuard<'_, Limiter> {
        // Every mutation of a `Limiter` completes without panicking or is not started, so a
        // poisoned lock still guards a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Set the balances `__reduce__` saved, after checking them all.
    fn restore(
        &self,
        py: Python<'_>,
        balances: Vec<(u128, Option<i64>)>,
        origin: Option<&str>,
        clock: Option<i64>,
    ) -> PyResult<()> {
        let saved: Vec<Balance> = balances.into_iter().map(Balance::from).collect();
        let latest = Limiter::saved_clock(saved.iter().copied(), clock);
        let by = self.clock.shift(py, origin, latest)?;
        let saved = saved
            .into_iter()
            .map(|balance| balance.shifted(by))
            .collect();
        let restored = Limiter::saved(&self.config.specs(), saved, shifted(clock, by))?;
        *self.lock() = restored;
        Ok(())
    }
}

/// The one limiter, in this process: its part is itself, and its key is none.
impl PyLimit for RateLimiter {
    type Core = Mutex<Limiter>;
    type Part = Self;
    type Key<'a> = ();
    const NAME: &'static str = "RateLimiter";
    const CLOCK: OfClock = OfClock::Limiter;

    fn parts(&self) -> &[Self] {
        std::slice::from_ref(self)
    }

    fn core<'a>(&'a self, part: &'a Self) -> &'a Mutex<Limiter> {
        &part.state
    }

    fn config<'a>(&'a self, part: &'a Self) -> &'a Config {
        &part.config
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn with_key<R>(&self, _: &Self, (): (), _: bool, decide: impl FnOnce(()) -> R) -> PyResult<R> {
        Ok(decide(()))
    }

    fn lineage(&self, py: Python<'_>) -> PyResult<()> {
        self.lineage.check(py, Self::NAME)
    }
}

limiter_methods! { one key: RateLimiter {
    #[new]
    #[pyo3(
        signature = (rate = None, *more, burst = None, per = None, bands = None, initial = None, start_ns = None, clock = None),
        text_signature = "(rate=None, *, burst=None, per=None, bands=None, initial=None, start_ns=None, clock=None)"
    )]
    #[allow(clippy::too_many_arguments)] // the constructor's keywords are its interface
    fn __new__(
        py: Python<'_>,
        rate: Option<&Bound<'_, PyAny>>,
        more: &Bound<'_, PyTuple>,
        burst: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
        bands: Option<&Bound<'_, PyAny>>,
        initial: Option<&Bound<'_, PyAny>>,
        start_ns: Option<&Bound<'_, PyAny>>,
        clock: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        only_the_rate_by_position(Self::NAME, rate, more)?;
        let config = read_config(py, rate, burst, per, bands)?;
        let initial = initial
            .map(|n| Ok::<_, PyErr>(config.check_initial(count(n, "initial")?)?))
            .transpose()?;
        let start_ns = start_ns.map(|t| nanoseconds(t, "start_ns")).transpose()?;
        let clock = Clock::checked(py, clock)?;
        Ok(Self {
            state: Mutex::new(Limiter::new(&config.specs(), initial, start_ns)),
            clock,
            config,
            lineage: Lineage::new(),
        })
    }

    /// The bands as written (`RateLimiter(bands=[Band(rate=100, burst=100, per=60)])`). No
    /// balance is shown: one settled at the last call would be stale, and reading the clock
    /// (any callable, even a failing one) to settle it is not a repr's business.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "{}({})",
            slf.get_type().qualname()?,
            limits_repr(slf.get(), slf.py())?
        ))
    }

    /// Pickle and copy: rebuilt from its bands and clock, then given its balances back.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        let (bands, clock) = {
            let limiter = this.lock();
            (limiter.bands(), limiter.clock())
        };
        let balances: Vec<(u128, Option<i64>)> =
            bands.iter().map(|band| band.balance.into()).collect();
        let kwargs = pickled_kwargs(this, py)?;
        kwargs.set_item("clock", this.clock.callable(py))?;
        let rebuild = rebuilder(slf.as_any(), &kwargs)?;
        // The balances, the attributes, where the times come from (see `Clock::shift`), and
        // the limiter's clock (see `Limiter::with_clock`).
        let state = with_attributes(slf.as_any(), PyList::new(py, balances)?.into_any())?;
        let state = (
            state.get_item(0)?,
            state.get_item(1)?,
            this.clock.origin(),
            clock,
        )
            .into_pyobject(py)?
            .into_any();
        Ok((rebuild, PyTuple::empty(py), state))
    }

    /// Restore the balances and attributes saved by `__reduce__`. Saved on another machine, or
    /// before a reboot, with the default clock, their times are moved to this clock (see
    /// `Clock::shift`), so a restored limiter never waits longer than its balances need.
    #[pyo3(signature = (state))]
    fn __setstate__(slf: &Bound<'_, Self>, state: &Bound<'_, PyTuple>) -> PyResult<()> {
        // Saved by older versions: without the clock, or without the origin either.
        let (balances, attributes, origin, clock): (_, Bound<'_, PyDict>, Option<String>, _) =
            match state.len() {
                2 => (
                    state.get_item(0)?.extract()?,
                    state.get_item(1)?.extract()?,
                    None,
                    None,
                ),
                3 => {
                    let (balances, attributes, origin) = state.extract()?;
                    (balances, attributes, origin, None)
                }
                _ => state.extract()?,
            };
        slf.get()
            .restore(slf.py(), balances, origin.as_deref(), clock)?;
        restore_attributes(slf.as_any(), &attributes)
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.clock.traverse(&visit)
    }
}}

/// A pickle state, with the attributes set on the instance (by a subclass, say) beside it.
pub fn with_attributes<'py>(
    instance: &Bound<'py, PyAny>,
    state: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let attributes = instance.getattr(intern!(instance.py(), "__dict__"))?;
    (state, attributes.cast::<PyDict>()?.copy()?).into_bound_py_any(instance.py())
}

/// Give an unpickled instance back the attributes [`with_attributes`] saved.
pub fn restore_attributes(
    instance: &Bound<'_, PyAny>,
    attributes: &Bound<'_, PyDict>,
) -> PyResult<()> {
    instance
        .getattr(intern!(instance.py(), "__dict__"))?
        .cast::<PyDict>()?
        .update(attributes.as_mapping())
}

/// `functools.partial(type(instance), **kwargs)`: how a limiter pickles its configuration,
/// keyword-only arguments included.
pub fn rebuilder<'py>(
    instance: &Bound<'py, PyAny>,
    kwargs: &Bound<'py, pyo3::types::PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = instance.py();
    py.import("functools")?
        .getattr("partial")?
        .call((instance.get_type(),), Some(kwargs))
}

/// A limiter takes its rate alone by position: `RateLimiter(100, 60)` reads as "100 per 60
/// seconds" to some and as "100 a second, a burst of 60" to others, so the rest are keywords,
/// and a second positional argument is refused saying how to write either.
pub fn only_the_rate_by_position(
    class: &str,
    rate: Option<&Bound<'_, PyAny>>,
    more: &Bound<'_, PyTuple>,
) -> PyResult<()> {
    let Ok(second) = more.get_item(0) else {
        return Ok(());
    };
    let rate = rate.map_or_else(|| "None".to_owned(), |rate| shown(rate));
    let second = shown(&second);
    Err(PyTypeError::new_err(format!(
        "{class}() takes the rate alone by position, and {} were given: write \
         {class}({rate}, burst={second}) for a burst of {second}, or {class}({rate}, \
         per={second}) for {rate} per {second} seconds (also written as a quota, such as \
         \"100/minute\")",
        more.len() + 1
    )))
}

/// [`only_the_rate_by_position`] for the limiters written in Python (the Redis ones).
#[pyfunction]
#[pyo3(name = "_only_the_rate_by_position")]
pub fn only_the_rate_by_position_py(
    limiter: &str,
    rate: Option<&Bound<'_, PyAny>>,
    more: &Bound<'_, PyTuple>,
) -> PyResult<()> {
    only_the_rate_by_position(limiter, rate, more)
}
