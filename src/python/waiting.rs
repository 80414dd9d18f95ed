//! Waiting for a turn, in Python's hands: the deadline loop of `core::exact::waiting`, run
//! with the interpreter released while it sleeps, answering signals, and refused on an event
//! loop's thread.
//!
//! Every native blocking `acquire` waits here. The asyncio form of the same wait is
//! `await_turn` in `_conveniences.py`, over the `_reserve`, `_until` and `_give_back` methods
//! that each limiter builds from a [`Reserved`]. A limiter that reserves in Python (the Redis
//! limiters, whose reservation is a question to a server) waits in this same loop too, through
//! [`wait_for_turn_py`].

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::core::exact::waiting::{self, max_wait_ns, nanos, Reserved};
use crate::python::args::Timeout;

/// What `_reserve` returns for `acquire_async` on a keyed limiter: `(True, at_ns)` once
/// reserved, `(False, retry_ns)` if refused, None if too late. (A limiter of one key is never
/// refused, and returns only the time, `Reserved::at`.)
pub fn for_python(reserved: Reserved) -> Option<(bool, i128)> {
    match reserved {
        Reserved::At { at_ns, .. } => Some((true, i128::from(at_ns))),
        Reserved::Refused(retry) => Some((false, i128::try_from(retry).unwrap_or(i128::MAX))),
        Reserved::TooLate => None,
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

/// A blocking wait's time: its deadline read on `Instant`, its sleeps those of
/// [`sleep_answering_signals`].
struct Blocking<'py> {
    py: Python<'py>,
    started: Instant,
}

impl waiting::Pause for Blocking<'_> {
    type Error = PyErr;

    fn elapsed_ns(&self) -> u128 {
        self.started.elapsed().as_nanos()
    }

    fn sleep(&mut self, ns: u128) -> PyResult<()> {
        sleep_answering_signals(self.py, nanos(ns))
    }
}

/// A blocking acquire of `limiter` (named in the error for an event loop's thread): the core's
/// `wait_for_turn`, sleeping here. True once the tokens are the caller's, False if they would
/// come too late.
pub fn wait_for_turn(
    py: Python<'_>,
    limiter: &str,
    max_wait: u128,
    reserve: impl FnMut(u128) -> PyResult<Reserved>,
    until: impl Fn(i64) -> PyResult<u128>,
    give_back: impl FnOnce(i64, i64),
) -> PyResult<bool> {
    if max_wait != 0 {
        refuse_in_event_loop(py, limiter)?;
    }
    let mut time = Blocking {
        py,
        started: Instant::now(),
    };
    waiting::wait_for_turn(&mut time, max_wait, reserve, until, give_back)
}

/// [`wait_for_turn`] for a limiter that reserves in Python (the Redis limiters' blocking
/// `acquire`), so that every blocking wait is this one loop. The three callables answer as a
/// native limiter's `_reserve`, `_until` and `_give_back` do for `acquire_async` (see
/// `await_turn` in `_conveniences.py`): `reserve(left)`, given the seconds left (None: no
/// deadline), returns `(True, at_ns)` once reserved, `(False, retry_ns)` if refused for now, or
/// None if too late; `until(at_ns)` says how many nanoseconds are still to wait; and
/// `give_back(at_ns)` hands back a turn abandoned (an error it raises is reported as
/// unraisable, and the error that stopped the wait goes on).
#[pyfunction]
#[pyo3(name = "_wait_for_turn")]
pub fn wait_for_turn_py(
    py: Python<'_>,
    limiter: &str,
    timeout: Option<Timeout>,
    reserve: &Bound<'_, PyAny>,
    until: &Bound<'_, PyAny>,
    give_back: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    wait_for_turn(
        py,
        limiter,
        max_wait_ns(timeout.map(|Timeout(wait)| wait)),
        |left| {
            #[allow(clippy::cast_precision_loss)] // seconds, for a deadline: to the microsecond
            let left = timeout.map(|_| left as f64 / 1e9);
            let found: Option<(bool, i128)> = reserve.call1((left,))?.extract()?;
            Ok(match found {
                None => Reserved::TooLate,
                // The clock's reading when reserved is the caller's to keep: unused here.
                Some((true, at)) => Reserved::At {
                    reserved_ns: 0,
                    at_ns: i64::try_from(at).unwrap_or(i64::MAX),
                },
                Some((false, retry)) => Reserved::Refused(u128::try_from(retry).unwrap_or(0)),
            })
        },
        |at| until.call1((at,))?.extract(),
        |_, at| {
            if let Err(error) = give_back.call1((at,)) {
                error.write_unraisable(py, Some(give_back));
            }
        },
    )
}
