//! `protocol_in_code.qos.limiter` for Python: the exact real-clock limiter of `core::exact`.
//!
//! Everything Python hands over is checked and turned into integers here, once: rates into
//! exact fractions, counts into `u64`, times into `i64` nanoseconds. The limiter's state is
//! then plain Rust behind a mutex, so no Python code ever runs while it is locked, and the
//! default clock is read natively. A blocking `acquire` sleeps with the interpreter released.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::config::Config;
use crate::core::exact::limiter::{Decision as CoreDecision, Limiter};
use crate::core::exact::settle::Balance;
use crate::python::args::{count, nanoseconds, tokens, NowNs, Timeout, N};
use crate::python::clock::{shifted, Clock};
use crate::python::config::{bands_repr, bands_tuple, read_config};
use crate::python::enums::StrEnum;
use crate::python::errors::{clock_error, never, OfClock};
use crate::python::fork::Lineage;
use crate::python::record::frozen_record;
use crate::python::waiting::{wait_for_turn, Reserved};

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
    pub fn new(
        py: Python<'_>,
        decision: CoreDecision,
        remaining: u128,
    ) -> PyResult<Bound<'_, Self>> {
        match decision {
            CoreDecision::Allowed => Self::build(py, 0, Some(0), remaining),
            CoreDecision::Wait(ns) => Self::build(py, 1, Some(ns), remaining),
            CoreDecision::Never => Self::build(py, 2, None, remaining),
        }
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

/// A blocking acquire (`acquire()` with a timeout other than 0, `with limiter:`, a decorated
/// `def`) called on a thread that is running an asyncio event loop: refused with a
/// `RuntimeError`, whether or not this call would have had to wait. Sleeping there stalls every
/// task of the loop for the whole wait, silently, and only under load, when tokens run out:
/// refused every time, the mistake shows in the first test rather than in production.
/// `acquire(timeout=0)` never sleeps, and is let through.
pub fn refuse_in_event_loop(py: Python<'_>, limiter: &str) -> PyResult<()> {
    static RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let running_loop = RUNNING_LOOP.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("asyncio")?.getattr("_get_running_loop")?.unbind())
    })?;
    if running_loop.bind(py).call0()?.is_none() {
        return Ok(());
    }
    Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
        "a blocking {limiter}.acquire() (also `with limiter:` and a decorated def) would stall \
         this thread's running event loop for as long as it waits: in async code, use `await \
         limiter.acquire_async()`, `async with limiter:`, or decorate the async def itself \
         (try_acquire() never waits)"
    )))
}

/// [`refuse_in_event_loop`] for the blocking waits written in Python (the Redis limiters').
#[pyfunction]
#[pyo3(name = "_refuse_in_event_loop")]
pub fn refuse_in_event_loop_py(py: Python<'_>, limiter: &str) -> PyResult<()> {
    refuse_in_event_loop(py, limiter)
}

/// The longest a blocking acquire sleeps without looking at signals: Ctrl-C during a long
/// wait raises `KeyboardInterrupt` within about this long, not when the wait is over.
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// Sleep for `wait` without the interpreter, in slices of at most [`SIGNAL_SLICE`], running
/// signal handlers after each; the first handler that raises ends the sleep with its error.
/// (`std::thread::sleep` itself sleeps on through a signal, so one long sleep would not do.)
pub fn sleep_answering_signals(py: Python<'_>, wait: Duration) -> PyResult<()> {
    // A wait beyond what `Instant` can express is slept slice by slice until interrupted.
    let until = Instant::now().checked_add(wait);
    loop {
        let slice = match until {
            Some(until) => until.saturating_duration_since(Instant::now()),
            None => SIGNAL_SLICE,
        };
        if slice.is_zero() {
            return Ok(());
        }
        py.detach(|| std::thread::sleep(slice.min(SIGNAL_SLICE)));
        py.check_signals()?;
    }
}

/// A caller's `timeout` as the longest wait, in nanoseconds, it accepts (None: for ever).
pub fn max_wait_ns(timeout: Option<Timeout>) -> u128 {
    timeout.map_or(u128::MAX, |Timeout(wait)| wait.as_nanos())
}

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

    /// The limiter, locked, for a call at `now`, checked against its clock (see
    /// `Limiter::on_the_clock`); `now_ns` is what the caller gave, if anything. The first call
    /// in a child process of the one that made the limiter warns (see `Lineage`).
    fn at(
        &self,
        py: Python<'_>,
        now: i64,
        now_ns: Option<NowNs>,
    ) -> PyResult<MutexGuard<'_, Limiter>> {
        self.lineage.check(py, "RateLimiter")?;
        let mut limiter = self.lock();
        limiter.on_the_clock(now).map_err(|gap| {
            let given = now_ns.is_some();
            let what = if given {
                "now_ns"
            } else {
                "the clock's reading"
            };
            clock_error(OfClock::Limiter, what, now, gap)
        })?;
        Ok(limiter)
    }

    /// This limiter as a part of a stacked request (see `python::stack`): its lock, and the
    /// time of the call. The core checks the time against the clock once it holds the lock.
    pub(crate) fn stacked(
        &self,
        py: Python<'_>,
        now_ns: Option<NowNs>,
    ) -> PyResult<(&Mutex<Limiter>, i64)> {
        self.lineage.check(py, "RateLimiter")?;
        Ok((&self.state, self.clock.now(py, now_ns)?))
    }

    /// Set the balances `__reduce__` saved, after checking them all.
    fn restore(
        &self,
        py: Python<'_>,
        balances: Vec<(u128, Option<i64>)>,
        origin: Option<&str>,
        clock: Option<i64>,
    ) -> PyResult<()> {
        let latest = clock.or_else(|| balances.iter().filter_map(|&(_, at)| at).max());
        let by = self.clock.shift(py, origin, latest)?;
        let mut limiter = self.lock();
        if balances.len() != limiter.bands().len() {
            return Err(PyValueError::new_err(
                "the saved state has a different number of bands",
            ));
        }
        let mut bands = limiter.bands();
        for (band, (units, settled_at)) in bands.iter_mut().zip(balances) {
            if units > band.spec.capacity_units() {
                return Err(PyValueError::new_err(
                    "a saved balance exceeds its band's burst",
                ));
            }
            band.balance = Balance {
                units,
                settled_at: shifted(settled_at, by),
            };
        }
        *limiter = Limiter::from_bands(&bands).with_clock(shifted(clock, by));
        Ok(())
    }

    /// Reserve `n` tokens at the clock's time, `max_wait` nanoseconds from it at most (see
    /// `Limiter::reserve`).
    fn reserve(&self, py: Python<'_>, n: u64, max_wait: u128) -> PyResult<Reserved> {
        let now = self.clock.now(py, None)?;
        let reservation = self.at(py, now, None)?.reserve(n, now, max_wait);
        Reserved::of(reservation, now, n)
    }

    /// A waiter that stops waiting (interrupted, or its clock failed) gives back the `n`
    /// tokens it reserved at `reserved_ns` for `at_ns` (see `Limiter::give_back`).
    fn give_back(&self, py: Python<'_>, n: u64, (reserved_ns, at_ns): (i64, i64)) {
        let now = self.clock.now(py, None).unwrap_or(reserved_ns);
        self.lock().give_back(n, now, at_ns);
    }
}

#[pymethods]
impl RateLimiter {
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
        only_the_rate_by_position("RateLimiter", rate, more)?;
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

    /// Take `n` tokens if every band holds them; True if taken, False if not (nothing taken).
    /// Raises ValueError if `n` exceeds a band's burst, since no wait would ever be enough.
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn try_acquire(&self, py: Python<'_>, n: Option<N>, now_ns: Option<NowNs>) -> PyResult<bool> {
        let (n, now) = self.clock.request(py, n, now_ns)?;
        match self.at(py, now, now_ns)?.acquire(n, now) {
            CoreDecision::Allowed => Ok(true),
            CoreDecision::Wait(_) => Ok(false),
            // No wait would ever be enough: a loop retrying on False would spin for ever.
            CoreDecision::Never => Err(never(n)),
        }
    }

    /// Take `n` tokens if every band holds them, and say exactly what happened: a Decision
    /// that is ALLOWED (taken), DENIED with the exact wait_ns until the same request would
    /// pass (nothing taken), or NEVER (n exceeds a band's burst).
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn check<'py>(
        &self,
        py: Python<'py>,
        n: Option<N>,
        now_ns: Option<NowNs>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let (decision, remaining) = {
            let mut limiter = self.at(py, now, now_ns)?;
            let decision = limiter.acquire(n, now);
            (decision, limiter.available())
        };
        Decision::new(py, decision, remaining)
    }

    /// What check(n) would answer now, taking nothing.
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn peek<'py>(
        &self,
        py: Python<'py>,
        n: Option<N>,
        now_ns: Option<NowNs>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let (decision, remaining) = {
            let mut limiter = self.at(py, now, now_ns)?;
            (limiter.peek(n, now), limiter.available_at(now))
        };
        Decision::new(py, decision, remaining)
    }

    /// Give `n` tokens back to every band (each capped at its burst).
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn refund(&self, py: Python<'_>, n: Option<N>, now_ns: Option<NowNs>) -> PyResult<()> {
        let (n, now) = self.clock.request(py, n, now_ns)?;
        self.at(py, now, now_ns)?.refund(n, now);
        Ok(())
    }

    /// Whole tokens every band holds now: how many 1-token requests would pass at once.
    #[pyo3(signature = (now_ns = None))]
    fn available(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<u128> {
        let now = self.clock.now(py, now_ns)?;
        Ok(self.at(py, now, now_ns)?.available_at(now))
    }

    /// Each band's whole tokens now, and the nanoseconds until it can give one more (for a
    /// full band, once it is spent from): `[(tokens, next_ns), ...]` in the order of `bands`.
    /// Until `next_ns` has passed, no band can give more than its `tokens`. Takes nothing.
    #[pyo3(signature = (now_ns = None))]
    fn band_levels(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<Vec<(u128, u128)>> {
        let now = self.clock.now(py, now_ns)?;
        let levels = self.at(py, now, now_ns)?.levels_at(now);
        Ok(levels.iter().map(|l| (l.tokens, l.next_ns)).collect())
    }

    /// Take `n` tokens, sleeping (without holding the interpreter) until every band holds
    /// them. Returns True once taken, or False at once if they would only be there after
    /// `timeout` seconds. Raises ValueError if `n` exceeds a band's burst, since no wait would
    /// ever be enough.
    ///
    /// Waiters are served in the order they arrive: each reserves its tokens at the moment
    /// they will be there, and whoever comes later queues behind it, so a large request is
    /// never starved by small ones. Ctrl-C ends the wait with KeyboardInterrupt (signals are
    /// looked at every 50 ms), and the waiter gives its tokens back. The sleep assumes the limiter's clock keeps pace with real time, as a monotonic clock does.
    #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
    fn acquire(&self, py: Python<'_>, n: Option<N>, timeout: Option<Timeout>) -> PyResult<bool> {
        let n = tokens(n);
        wait_for_turn(
            py,
            "RateLimiter",
            max_wait_ns(timeout),
            |left| self.reserve(py, n, left),
            |at| self.clock.until(py, at),
            |turn| self.give_back(py, n, turn),
        )
    }

    /// Reserve `n` tokens as `acquire` does, without sleeping: the time, on the limiter's
    /// clock, from which they are the caller's, or None, taking nothing, if that is more than
    /// `timeout` seconds away. Raises ValueError if `n` exceeds a band's burst. For
    /// `acquire_async`, which awaits that time (see `_until`) and gives the tokens back
    /// (`_give_back`) if it is cancelled.
    #[pyo3(signature = (n = None, timeout = None))]
    fn _reserve(
        &self,
        py: Python<'_>,
        n: Option<N>,
        timeout: Option<Timeout>,
    ) -> PyResult<Option<i64>> {
        let n = tokens(n);
        match self.reserve(py, n, max_wait_ns(timeout))? {
            Reserved::At(_, at) => Ok(Some(at)),
            Reserved::TooLate | Reserved::Refused(_) => Ok(None),
        }
    }

    /// Give back `n` tokens that `_reserve` booked for `at_ns` and that were not used (a
    /// cancelled waiter): undone if no waiter queued behind them, else forfeited, so nobody
    /// is ever let in before a turn already promised (see `Limiter::give_back`).
    fn _give_back(&self, py: Python<'_>, n: N, at_ns: i64) -> PyResult<()> {
        let N(n) = n;
        let now = self.clock.now(py, None)?;
        self.lock().give_back(n, now, at_ns);
        Ok(())
    }

    /// Nanoseconds from the limiter's clock until `at_ns` (0 once it is there).
    fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
        self.clock.until(py, at_ns)
    }

    /// The bands, each a `Band` as it was written.
    #[getter]
    fn bands<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        bands_tuple(py, &self.config)
    }

    /// The bands as written (`RateLimiter(bands=[Band(rate=100, burst=100, per=60)])`). No
    /// balance is shown: one settled at the last call would be stale, and reading the clock
    /// (any callable, even a failing one) to settle it is not a repr's business.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "{}(bands={})",
            slf.get_type().qualname()?,
            bands_repr(slf.py(), &slf.get().config)?
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
        let balances: Vec<_> = bands
            .iter()
            .map(|band| (band.balance.units, band.balance.settled_at))
            .collect();
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("bands", bands_tuple(py, &this.config)?)?;
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

    /// Take `n` tokens, awaiting (asyncio) until every band holds them. True once taken, False
    /// at once if they would only be there after `timeout` seconds; ValueError if `n` exceeds
    /// a band's burst. Served in order of arrival, as `acquire`; a cancelled waiter gives its
    /// tokens back.
    #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: Option<Bound<'py, PyAny>>,
        timeout: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
        conveniences(py)?.call_method1("await_reserved", (slf, &n, timeout))
    }

    /// Use as a decorator: `function` takes one token each time its body starts, waiting as
    /// acquire() does for a def or a generator, as acquire_async() does for an async def or
    /// an async generator. A generator's token is taken at its first iteration, a coroutine's
    /// when it is first awaited.
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        function: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method1("decorate", (slf, function))
    }

    /// `with limiter:` takes one token, waiting as acquire() does.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        slf.call_method0("acquire")?;
        Ok(slf.clone())
    }

    /// Leaving the block gives nothing back: the token was spent.
    #[pyo3(signature = (*_exc_info))]
    fn __exit__(_slf: &Bound<'_, Self>, _exc_info: &Bound<'_, PyTuple>) {}

    /// `async with limiter:` takes one token, awaiting as acquire_async() does.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method1("enter_async", (slf,))
    }

    #[pyo3(signature = (*_exc_info))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        _exc_info: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method0("exit_async")
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.clock.traverse(&visit)
    }
}

/// The module that gives the limiters their asyncio and decorator forms, written in Python.
pub fn conveniences(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(MODULE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("protocol_in_code.qos._conveniences")?.unbind())
        })?
        .bind(py))
}

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
    let rate = rate.map_or_else(|| "None".to_owned(), |rate| repr_or_placeholder(rate));
    let second = repr_or_placeholder(&second);
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

fn repr_or_placeholder(value: &Bound<'_, PyAny>) -> String {
    value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
}
