//! Seats held and places waited in: the `Lease` a holder gets, the `_Waiter` an
//! `acquire_async` keeps while in line, and the heap's [`Seats`]: seating at once, or the
//! blocking wait of `acquire`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use super::{Locked, Seats, Wake};
use crate::core::exact::key::Key;
use crate::core::exact::waiting::max_wait_ns;
use crate::core::seats::table::Asked;
use crate::core::seats::{Grant, SeatsError, Ticket};
use crate::python::args::Timeout;
use crate::python::fork::forks;
use crate::python::surface::conveniences;
use crate::python::waiting::refuse_in_event_loop;

/// Seats held: `n` of them, and the fencing token of this holder, strictly greater than every
/// earlier holder's of the same limit (of the same key, for a keyed limiter).
///
/// The seats are given back by release() (twice is harmless), by leaving a `with lease:`
/// block, or when the lease is dropped without either (an exception, a cancelled task, a lost
/// reference).
#[pyclass(frozen, module = "protocol_in_code.qos.concurrency")]
pub struct Lease {
    table: Arc<Locked>,
    key: Option<Key>,
    grant: Grant,
    held: AtomicBool,
    /// The forks behind the process the seats were granted in (`fork::forks`).
    granted_in: u64,
}

impl Lease {
    pub(super) fn new(table: &Arc<Locked>, key: Option<&Key>, grant: Grant) -> Self {
        Lease {
            table: Arc::clone(table),
            key: key.cloned(),
            grant,
            held: AtomicBool::new(true),
            granted_in: forks(),
        }
    }

    fn give_back(&self, py: Python<'_>) {
        if self.held.swap(false, Ordering::AcqRel) {
            // A lease's seats are held until this one swap: the release cannot find fewer.
            let (key, n) = (self.key.as_ref(), self.grant.n);
            let _ = self.table.release_granted(py, key, n, self.granted_in);
        }
    }
}

#[pymethods]
impl Lease {
    /// How many seats this lease holds.
    #[getter]
    fn n(&self) -> u64 {
        self.grant.n
    }

    /// The fencing token: strictly increasing per limit, so a store can refuse a late write
    /// from a holder whose seats have since gone to another.
    #[getter]
    fn token(&self) -> u64 {
        self.grant.token
    }

    /// Whether the seats were given back.
    #[getter]
    fn released(&self) -> bool {
        !self.held.load(Ordering::Acquire)
    }

    /// Give the seats back (the first call does; later ones do nothing).
    fn release(&self, py: Python<'_>) {
        self.give_back(py);
    }

    /// Keep the seats past this lease: the caller gives them back itself (`with limiter:`).
    #[pyo3(name = "_keep")]
    pub(super) fn keep(&self) {
        self.held.store(false, Ordering::Release);
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, pyo3::types::PyTuple>) {
        self.give_back(py);
    }

    fn __repr__(&self) -> String {
        let released = if self.released() { ", released" } else { "" };
        format!(
            "Lease(n={}, token={}{released})",
            self.grant.n, self.grant.token
        )
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if *self.held.get_mut() {
            Python::attach(|py| self.give_back(py));
        }
    }
}

/// A place in a limiter's line, kept by `acquire_async` while it awaits its turn (and by a
/// blocking `acquire` while it sleeps): given up when dropped, giving back any seats it was
/// granted meanwhile.
#[pyclass(frozen, module = "protocol_in_code.qos.concurrency", name = "_Waiter")]
pub struct Waiter {
    table: Arc<Locked>,
    key: Option<Key>,
    ticket: Ticket,
    open: AtomicBool,
}

impl Waiter {
    /// The place of `ticket` in the line of `key` in `table`, open until taken or left.
    fn new(table: &Arc<Locked>, key: Option<&Key>, ticket: Ticket) -> Self {
        Waiter {
            table: Arc::clone(table),
            key: key.cloned(),
            ticket,
            open: AtomicBool::new(true),
        }
    }

    fn lease(&self, outcome: Option<Result<Grant, SeatsError>>) -> PyResult<Option<Lease>> {
        let Some(outcome) = outcome else {
            return Ok(None);
        };
        self.open.store(false, Ordering::Release);
        Ok(Some(Lease::new(&self.table, self.key.as_ref(), outcome?)))
    }
}

#[pymethods]
impl Waiter {
    /// The lease once seated, None while in line; ValueError if a smaller limit refused it.
    #[pyo3(name = "_take")]
    fn take(&self, py: Python<'_>) -> PyResult<Option<Lease>> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.lease(self.table.outcome(py, self.key.as_ref(), self.ticket))
    }

    /// Give up the place: None if it left the line, else the lease it was granted meanwhile
    /// (ValueError if it was refused).
    #[pyo3(name = "_leave")]
    fn leave(&self, py: Python<'_>) -> PyResult<Option<Lease>> {
        if !self.open.swap(false, Ordering::AcqRel) {
            return Ok(None);
        }
        self.lease(self.table.leave(py, self.key.as_ref(), self.ticket))
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if *self.open.get_mut() {
            // A lease granted meanwhile is dropped at once, giving its seats back.
            Python::attach(|py| drop(self.leave(py)));
        }
    }
}

/// The longest a blocking acquire sleeps without looking at signals (as `waiting.rs` does).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// Sleep until unparked, for at most `left` nanoseconds and one slice, without the
/// interpreter; then run signal handlers (Ctrl-C ends the wait with its error).
fn park(py: Python<'_>, left: u128) -> PyResult<()> {
    let slice = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX)).min(SIGNAL_SLICE);
    py.detach(|| std::thread::park_timeout(slice));
    py.check_signals()
}

/// `_ask`: what `acquire_async` asks, given a callable that wakes its task: a `Lease` if
/// seated at once, a `_Waiter` in line (the callable is called once it is decided), or None
/// for a new key in a full table (the callable is called when a key is forgotten).
pub(super) fn ask_for_task(
    py: Python<'_>,
    table: &Arc<Locked>,
    key: Option<&Key>,
    n: u64,
    wake: Py<PyAny>,
) -> PyResult<Option<Py<PyAny>>> {
    Ok(match table.ask(py, key, n, Some(Wake::Task(wake)))? {
        Asked::Seated(grant) => Some(Py::new(py, Lease::new(table, key, grant))?.into_any()),
        Asked::InLine(ticket) => Some(Py::new(py, Waiter::new(table, key, ticket))?.into_any()),
        Asked::Busy | Asked::NoRoom(_) => None,
    })
}

impl Seats for Locked {
    type Key = Key;
    type Lease = Lease;

    /// Seated now, if the seats are free and nobody waits (and, for a new key, the table has
    /// room).
    fn try_acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Key>,
        n: u64,
    ) -> PyResult<Option<Lease>> {
        Ok(match self.ask(py, key, n, None)? {
            Asked::Seated(grant) => Some(Lease::new(self, key, grant)),
            Asked::InLine(_) | Asked::Busy | Asked::NoRoom(_) => None,
        })
    }

    /// Seated at once, or in line until seated or `timeout` passes (None then, holding
    /// nothing). A place is given up on any error (a signal's), by the waiter's drop.
    fn acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Key>,
        n: u64,
        timeout: Option<Timeout>,
        limiter: &str,
    ) -> PyResult<Option<Lease>> {
        let max_wait = max_wait_ns(timeout.map(|Timeout(wait)| wait));
        if max_wait != 0 {
            refuse_in_event_loop(py, limiter)?;
        }
        let started = Instant::now();
        let left = || max_wait.saturating_sub(started.elapsed().as_nanos());
        loop {
            let wake = (max_wait != 0).then(|| Wake::Thread(std::thread::current()));
            match self.ask(py, key, n, wake)? {
                Asked::Seated(grant) => return Ok(Some(Lease::new(self, key, grant))),
                Asked::Busy => return Ok(None),
                Asked::InLine(ticket) => {
                    let waiter = Waiter::new(self, key, ticket);
                    loop {
                        if let Some(lease) = waiter.take(py)? {
                            return Ok(Some(lease));
                        }
                        if left() == 0 {
                            return waiter.leave(py);
                        }
                        park(py, left())?;
                    }
                }
                Asked::NoRoom(forgotten) => {
                    while self.lock().forgotten() == forgotten {
                        if left() == 0 {
                            return Ok(None);
                        }
                        park(py, left())?;
                    }
                }
            }
        }
    }

    fn in_flight(&self, _py: Python<'_>) -> PyResult<u64> {
        Ok(self.lock().counts().0)
    }

    fn waiting(&self) -> u64 {
        u64::try_from(self.lock().counts().1).unwrap_or(u64::MAX)
    }

    fn limit(&self) -> u64 {
        self.lock().limit()
    }

    fn set_limit(&self, py: Python<'_>, limit: u64) -> PyResult<()> {
        Ok(self.resize(py, limit)?)
    }

    fn give_back_kept(&self, py: Python<'_>) -> PyResult<()> {
        Ok(self.release(py, None, 1)?)
    }

    fn awaiting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        conveniences(py)?.getattr("await_lease")
    }
}
