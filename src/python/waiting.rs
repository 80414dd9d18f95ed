//! Waiting for a turn: the one deadline loop of every native blocking `acquire`.
//!
//! A waiter does not poll. It reserves its tokens at the moment they will be there (the core's
//! `reserve`), so later callers queue behind it, then sleeps until that moment. A keyed table
//! may refuse a new key for want of room; the waiter then sleeps until room may appear and
//! reserves again, while its timeout lasts. A sleep interrupted (Ctrl-C, or a clock that fails)
//! gives the reservation back before the error goes on. The asyncio form of the same loop is
//! `await_turn` in `_conveniences.py`, over the `_reserve`, `_until` and `_give_back` methods
//! that each limiter builds from [`Reserved`]. A limiter that reserves in Python (the Redis
//! limiters, whose reservation is a question to a server) waits in this same loop too, through
//! [`wait_for_turn_py`].

use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::core::exact::keyed::KeyedReservation;
use crate::core::exact::limiter::Reservation;
use crate::python::args::Timeout;
use crate::python::errors::never;

/// What one reservation found.
pub enum Reserved {
    /// Taken at the first time (the clock's reading), from the second.
    At(i64, i64),
    /// A new key and a full table: nothing taken; room may appear after this many nanoseconds.
    Refused(u128),
    /// Nothing taken: the tokens would be there later than the caller will wait.
    TooLate,
}

impl Reserved {
    /// A limiter's reservation of `n` tokens made at `now`; `Never` (more than a burst) is the
    /// error every form raises.
    pub fn of(reservation: Reservation, now: i64, n: u64) -> PyResult<Self> {
        match reservation {
            Reservation::Never => Err(never(n)),
            Reservation::TooLate(_) => Ok(Self::TooLate),
            Reservation::Taken { after_ns } => {
                let at = i128::from(now).saturating_add_unsigned(after_ns);
                Ok(Self::At(now, i64::try_from(at).unwrap_or(i64::MAX)))
            }
        }
    }

    /// A keyed table's reservation, as [`Reserved::of`].
    pub fn of_keyed(reservation: KeyedReservation, now: i64, n: u64) -> PyResult<Self> {
        match reservation {
            KeyedReservation::Decided(decided) => Self::of(decided, now, n),
            KeyedReservation::Refused { retry_in } => Ok(Self::Refused(retry_in)),
        }
    }

    /// What `_reserve` returns for `acquire_async` on a limiter of one key: the time the
    /// tokens are the caller's from, or None if too late (such a limiter is never refused).
    pub fn at(self) -> Option<i64> {
        match self {
            Self::At(_, at) => Some(at),
            Self::Refused(_) | Self::TooLate => None,
        }
    }

    /// What `_reserve` returns for `acquire_async` on a keyed limiter: `(True, at_ns)` once
    /// reserved, `(False, retry_ns)` if refused, None if too late.
    pub fn for_python(self) -> Option<(bool, i128)> {
        match self {
            Self::At(_, at) => Some((true, i128::from(at))),
            Self::Refused(retry) => Some((false, i128::try_from(retry).unwrap_or(i128::MAX))),
            Self::TooLate => None,
        }
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

/// A caller's `timeout` as the longest wait, in nanoseconds, it accepts (None: for ever).
pub fn max_wait_ns(timeout: Option<Timeout>) -> u128 {
    timeout.map_or(u128::MAX, |Timeout(wait)| wait.as_nanos())
}

/// Nanoseconds as a `Duration` (saturating at about 584 years).
pub fn nanos(ns: u128) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// A blocking acquire of `limiter` (named in the error for an event loop's thread): reserve
/// within `max_wait` nanoseconds (trying again after a refusal, while time is left), then sleep
/// until the turn. True once the tokens are the caller's, False if they would come too late.
///
/// `reserve(left)` reserves with `left` nanoseconds to spare; `until(at)` says how far the
/// clock is from `at`; `give_back(reserved_at_and_turn)` hands an abandoned turn back.
pub fn wait_for_turn(
    py: Python<'_>,
    limiter: &str,
    max_wait: u128,
    mut reserve: impl FnMut(u128) -> PyResult<Reserved>,
    until: impl Fn(i64) -> PyResult<u128>,
    give_back: impl FnOnce((i64, i64)),
) -> PyResult<bool> {
    if max_wait != 0 {
        refuse_in_event_loop(py, limiter)?;
    }
    let started = Instant::now();
    let turn = loop {
        let left = max_wait.saturating_sub(started.elapsed().as_nanos());
        match reserve(left)? {
            Reserved::At(now, at) => break (now, at),
            Reserved::TooLate => return Ok(false),
            Reserved::Refused(retry_in) => {
                // What is left once refused: asking may itself have taken a while (a server's
                // question, answered by `on_error` after its socket timeout).
                let left = max_wait.saturating_sub(started.elapsed().as_nanos());
                if left == 0 {
                    return Ok(false);
                }
                sleep_answering_signals(py, nanos(retry_in.min(left)))?;
            }
        }
    };
    let stopped = loop {
        match until(turn.1) {
            Ok(0) => return Ok(true),
            Ok(left) => {
                if let Err(interrupted) = sleep_answering_signals(py, nanos(left)) {
                    break interrupted;
                }
            }
            Err(error) => break error,
        }
    };
    give_back(turn);
    Err(stopped)
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
        max_wait_ns(timeout),
        |left| {
            #[allow(clippy::cast_precision_loss)] // seconds, for a deadline: to the microsecond
            let left = timeout.map(|_| left as f64 / 1e9);
            let found: Option<(bool, i128)> = reserve.call1((left,))?.extract()?;
            Ok(match found {
                None => Reserved::TooLate,
                // The clock's reading when reserved is the caller's to keep: unused here.
                Some((true, at)) => Reserved::At(0, i64::try_from(at).unwrap_or(i64::MAX)),
                Some((false, retry)) => Reserved::Refused(u128::try_from(retry).unwrap_or(0)),
            })
        },
        |at| until.call1((at,))?.extract(),
        |(_, at)| {
            if let Err(error) = give_back.call1((at,)) {
                error.write_unraisable(py, Some(give_back));
            }
        },
    )
}
