//! In-flight limits in one process: `ConcurrencyLimiter`, `KeyedConcurrencyLimiter` and the
//! `Lease` a holder gets, over the rules of `core::seats`.
//!
//! The core decides who is seated and when; this file keeps its [`Seats`] under a lock and
//! tells the waiters. A waiter is either a thread parked in `acquire` or an asyncio task
//! awaiting a future; both stand in the same line, so they are seated in the order they came.
//! Each waiter has a place, found by its ticket, where a change records what the core decided
//! for it (seated with a grant, or refused by a smaller limit) before it is woken. No Python
//! code runs under the lock: a change only collects the waiters to wake, and wakes them (a
//! thread by `unpark`, a task by the callable it gave, which hands the news to its loop with
//! `call_soon_threadsafe`) once the lock is released.
//!
//! A keyed limiter keeps one line per key, made at the key's first use and forgotten as soon
//! as nobody holds a seat of it or waits for one, at most `max_keys` at once. A new key that
//! finds the table full is refused, as a keyed rate limiter refuses one: nobody is evicted,
//! and a caller that waits is woken when a key is forgotten, to ask again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::core::exact::key::Key;
use crate::core::exact::keyed::random_seed;
use crate::core::seats::{self, Grant, Seats, SeatsError, Ticket, Woken};
use crate::python::args::{count, tokens, Timeout, N};
use crate::python::keys::classify;
use crate::python::surface::conveniences;
use crate::python::waiting::{max_wait_ns, refuse_in_event_loop};

/// How a waiter is told that its place was decided.
enum Wake {
    /// A thread parked in a blocking `acquire`.
    Thread(Thread),
    /// A task's callable, which wakes the task on its own loop.
    Task(Py<PyAny>),
}

impl Wake {
    fn wake(self, py: Python<'_>) {
        match self {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(call) => {
                if let Err(error) = call.call0(py) {
                    error.write_unraisable(py, Some(call.bind(py)));
                }
            }
        }
    }
}

/// What a change leaves to do once the lock is released: waiters to wake, and wakers to let
/// go of (a task's callable is a Python object, whose release may run Python code).
#[derive(Default)]
struct After {
    wake: Vec<Wake>,
    drop: Vec<Wake>,
}

impl After {
    fn run(self, py: Python<'_>) {
        for wake in self.wake {
            wake.wake(py);
        }
        drop(self.drop);
    }
}

/// A waiter's place: how to wake it, and, once decided, what the core decided.
struct Place {
    n: u64,
    wake: Option<Wake>,
    outcome: Option<Result<Grant, SeatsError>>,
}

/// One limit's seats, and the places of its waiters (in line, or decided and not yet told).
struct Line {
    seats: Seats,
    places: HashMap<Ticket, Place>,
}

impl Line {
    fn new(limit: u64, tokens_from: u64) -> Result<Self, SeatsError> {
        Ok(Line {
            seats: Seats::with_tokens_from(limit, tokens_from)?,
            places: HashMap::new(),
        })
    }

    /// Record in their places what a change decided, and collect those waiters to wake.
    fn decided(&mut self, woken: Woken, after: &mut After) {
        let limit = self.seats.limit();
        let seated = woken.seated.into_iter().map(|(t, grant)| (t, Ok(grant)));
        let refused = woken.refused.into_iter().map(|t| (t, Err(limit)));
        for (ticket, outcome) in seated.chain(refused) {
            if let Some(place) = self.places.get_mut(&ticket) {
                let n = place.n;
                place.outcome =
                    Some(outcome.map_err(|limit| SeatsError::MoreThanLimit { n, limit }));
                after.wake.extend(place.wake.take());
            }
        }
    }

    /// Nobody holds a seat and nobody waits or is still to be told.
    fn idle(&self) -> bool {
        self.seats.in_flight() == 0 && self.places.is_empty()
    }
}

/// The lines of a limiter: one, or one per key.
enum Lines {
    One(Line),
    PerKey {
        lines: HashMap<Key, Line>,
        max_keys: usize,
        /// Where the tokens of a key made again start: past every forgotten key's.
        tokens_from: u64,
        /// Callers refused for want of room, woken when a key is forgotten.
        room: Vec<Wake>,
        /// How many keys were forgotten so far: a caller refused for room asks again once it
        /// has changed.
        forgotten: u64,
    },
}

/// What asking found.
enum Asked {
    Seated(Grant),
    InLine(Ticket),
    /// Not free, and the caller would not wait.
    Busy,
    /// A new key, and a table full of keys in use: room may come once the count of keys
    /// forgotten is past this one.
    NoRoom(u64),
}

struct State {
    limit: u64,
    lines: Lines,
}

impl State {
    fn line(&mut self, key: Option<&Key>) -> Option<&mut Line> {
        match (&mut self.lines, key) {
            (Lines::One(line), _) => Some(line),
            (Lines::PerKey { lines, .. }, Some(key)) => lines.get_mut(key),
            (Lines::PerKey { .. }, None) => None,
        }
    }

    /// Take `n` seats of `key`'s line, or (given a `wake`) join the line, or for a new key in
    /// a full table, wait for room. A `wake` kept (in a place, or waiting for room) is taken
    /// out of `wake`; the caller lets go of one not kept once the lock is released.
    fn ask(
        &mut self,
        key: Option<&Key>,
        n: u64,
        wake: &mut Option<Wake>,
    ) -> Result<Asked, SeatsError> {
        let limit = self.limit;
        let line = match (&mut self.lines, key) {
            (
                Lines::PerKey {
                    lines,
                    max_keys,
                    tokens_from,
                    room,
                    forgotten,
                },
                Some(key),
            ) if !lines.contains_key(key) => {
                let mut line = Line::new(limit, *tokens_from)?;
                let Some(grant) = line.seats.try_take(n)? else {
                    unreachable!("a new line has every seat free")
                };
                if lines.len() >= *max_keys {
                    room.extend(wake.take());
                    return Ok(Asked::NoRoom(*forgotten));
                }
                lines.insert(key.clone(), line);
                return Ok(Asked::Seated(grant));
            }
            _ => self
                .line(key)
                .expect("a keyed limiter is always given a key"),
        };
        if wake.is_none() {
            return Ok(line.seats.try_take(n)?.map_or(Asked::Busy, Asked::Seated));
        }
        Ok(match line.seats.ask(n)? {
            seats::Asked::Seated(grant) => Asked::Seated(grant),
            seats::Asked::InLine(ticket) => {
                let place = Place {
                    n,
                    wake: wake.take(),
                    outcome: None,
                };
                line.places.insert(ticket, place);
                Asked::InLine(ticket)
            }
        })
    }

    /// Forget `key` if nobody holds or waits for its seats, waking those waiting for room.
    fn forget_if_idle(&mut self, key: Option<&Key>, after: &mut After) {
        let (
            Lines::PerKey {
                lines,
                tokens_from,
                room,
                forgotten,
                ..
            },
            Some(key),
        ) = (&mut self.lines, key)
        else {
            return;
        };
        if lines.get(key).is_some_and(Line::idle) {
            if let Some(line) = lines.remove(key) {
                *tokens_from = (*tokens_from).max(line.seats.next_token());
                *forgotten += 1;
                after.wake.append(room);
            }
        }
    }

    fn forgotten(&self) -> u64 {
        match self.lines {
            Lines::One(_) => 0,
            Lines::PerKey { forgotten, .. } => forgotten,
        }
    }

    fn each_line(&self) -> Box<dyn Iterator<Item = &Line> + '_> {
        match &self.lines {
            Lines::One(line) => Box::new(std::iter::once(line)),
            Lines::PerKey { lines, .. } => Box::new(lines.values()),
        }
    }
}

/// A limiter's state under its lock, shared with its leases and waiters.
struct Table {
    state: Mutex<State>,
}

impl Table {
    fn new(limit: u64, max_keys: Option<usize>) -> Result<Self, SeatsError> {
        let lines = match max_keys {
            None => Lines::One(Line::new(limit, 1)?),
            Some(max_keys) => {
                Seats::new(limit)?; // the core's check of a limit, before any key has a line
                Lines::PerKey {
                    lines: HashMap::new(),
                    max_keys,
                    tokens_from: 1,
                    room: Vec::new(),
                    forgotten: 0,
                }
            }
        };
        Ok(Table {
            state: Mutex::new(State { limit, lines }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every change completes without panicking or is not started.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// [`State::ask`], letting go of a waker it did not keep once unlocked.
    fn ask(&self, key: Option<&Key>, n: u64, wake: Option<Wake>) -> Result<Asked, SeatsError> {
        let mut wake = wake;
        let asked = self.lock().ask(key, n, &mut wake);
        drop(wake);
        asked
    }

    /// Run `change` on `key`'s line under the lock, then forget the key if it is idle, and
    /// wake whom the change decided for once unlocked.
    fn change<R>(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        change: impl FnOnce(&mut Line, &mut After) -> R,
    ) -> Option<R> {
        let mut after = After::default();
        let result = {
            let mut state = self.lock();
            let result = state.line(key).map(|line| change(line, &mut after));
            state.forget_if_idle(key, &mut after);
            result
        };
        after.run(py);
        result
    }

    /// `n` seats of `key` given back.
    fn release(&self, py: Python<'_>, key: Option<&Key>, n: u64) -> Result<(), SeatsError> {
        self.change(py, key, |line, after| {
            let woken = line.seats.release(n)?;
            line.decided(woken, after);
            Ok(())
        })
        .unwrap_or(Err(SeatsError::NotHeld { n, held: 0 }))
    }

    /// What was decided for the waiter of `ticket`, taken out of its place; None while it is
    /// still in line.
    fn outcome(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        ticket: Ticket,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(py, key, |line, _| {
            line.places.get(&ticket)?.outcome.as_ref()?;
            line.places.remove(&ticket)?.outcome
        })
        .flatten()
    }

    /// The waiter of `ticket` gives up: None if it left the line, else what was decided for it
    /// meanwhile (seats it now holds, or a refusal).
    fn leave(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        ticket: Ticket,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(py, key, |line, after| {
            let place = line.places.remove(&ticket)?;
            if let Some(woken) = line.seats.leave(ticket) {
                after.drop.extend(place.wake);
                line.decided(woken, after);
                return None;
            }
            place.outcome
        })
        .flatten()
    }

    fn resize(&self, py: Python<'_>, limit: u64) -> Result<(), SeatsError> {
        let mut after = After::default();
        let resized = (|| {
            let mut state = self.lock();
            Seats::new(limit)?;
            state.limit = limit;
            let lines: Vec<&mut Line> = match &mut state.lines {
                Lines::One(line) => vec![line],
                Lines::PerKey { lines, .. } => lines.values_mut().collect(),
            };
            for line in lines {
                let woken = line.seats.resize(limit)?;
                line.decided(woken, &mut after);
            }
            Ok(())
        })();
        after.run(py);
        resized
    }
}

/// A key as a keyed limiter stores it: a plain key (`str`, `bytes`, an int, a float, or a tuple
/// of these), or a value equal to one, read as `keys::classify` reads a keyed rate limiter's.
fn table_key(key: &Bound<'_, PyAny>, seed: (u64, u64)) -> PyResult<Key> {
    classify(key)?.into_key(seed).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "key must be a str, bytes, int, float or a tuple of these, not {}",
            key.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// `limit`: a count of seats, at least 1.
fn seats_limit(limit: &Bound<'_, PyAny>) -> PyResult<u64> {
    count(limit, "limit")
}

/// Seats held: `n` of them, and the fencing token of this holder, strictly greater than every
/// earlier holder's of the same limit (of the same key, for a keyed limiter).
///
/// The seats are given back by release() (twice is harmless), by leaving a `with lease:`
/// block, or when the lease is dropped without either (an exception, a cancelled task, a lost
/// reference).
#[pyclass(frozen, module = "protocol_in_code.qos.concurrency")]
pub struct Lease {
    table: Arc<Table>,
    key: Option<Key>,
    grant: Grant,
    held: AtomicBool,
}

impl Lease {
    fn new(table: &Arc<Table>, key: Option<&Key>, grant: Grant) -> Self {
        Lease {
            table: Arc::clone(table),
            key: key.cloned(),
            grant,
            held: AtomicBool::new(true),
        }
    }

    fn give_back(&self, py: Python<'_>) {
        if self.held.swap(false, Ordering::AcqRel) {
            // A lease's seats are held until this one swap: the release cannot find fewer.
            let _ = self.table.release(py, self.key.as_ref(), self.grant.n);
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
    fn keep(&self) {
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
    table: Arc<Table>,
    key: Option<Key>,
    ticket: Ticket,
    open: AtomicBool,
}

impl Waiter {
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

/// A blocking acquire: seated at once, or in line until seated or `timeout` passes (None then,
/// holding nothing). A place is given up on any error (a signal's), by the waiter's drop.
fn acquire(
    py: Python<'_>,
    table: &Arc<Table>,
    key: Option<&Key>,
    n: u64,
    timeout: Option<Timeout>,
    limiter: &str,
) -> PyResult<Option<Lease>> {
    let max_wait = max_wait_ns(timeout);
    if max_wait != 0 {
        refuse_in_event_loop(py, limiter)?;
    }
    let started = Instant::now();
    let left = || max_wait.saturating_sub(started.elapsed().as_nanos());
    loop {
        let wake = (max_wait != 0).then(|| Wake::Thread(std::thread::current()));
        match table.ask(key, n, wake)? {
            Asked::Seated(grant) => return Ok(Some(Lease::new(table, key, grant))),
            Asked::Busy => return Ok(None),
            Asked::InLine(ticket) => {
                let waiter = Waiter {
                    table: Arc::clone(table),
                    key: key.cloned(),
                    ticket,
                    open: AtomicBool::new(true),
                };
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
                while table.lock().forgotten() == forgotten {
                    if left() == 0 {
                        return Ok(None);
                    }
                    park(py, left())?;
                }
            }
        }
    }
}

/// `_ask`: what `acquire_async` asks, given a callable that wakes its task: a `Lease` if
/// seated at once, a `_Waiter` in line (the callable is called once it is decided), or None
/// for a new key in a full table (the callable is called when a key is forgotten).
fn ask_for_task(
    py: Python<'_>,
    table: &Arc<Table>,
    key: Option<&Key>,
    n: u64,
    wake: Py<PyAny>,
) -> PyResult<Option<Py<PyAny>>> {
    Ok(match table.ask(key, n, Some(Wake::Task(wake)))? {
        Asked::Seated(grant) => Some(Py::new(py, Lease::new(table, key, grant))?.into_any()),
        Asked::InLine(ticket) => {
            let waiter = Waiter {
                table: Arc::clone(table),
                key: key.cloned(),
                ticket,
                open: AtomicBool::new(true),
            };
            Some(Py::new(py, waiter)?.into_any())
        }
        Asked::Busy | Asked::NoRoom(_) => None,
    })
}

/// How many seats are held, and how many callers wait, over every line.
fn counts(table: &Table) -> (u64, usize) {
    let state = table.lock();
    state.each_line().fold((0, 0), |(held, waiting), line| {
        (
            held + line.seats.in_flight(),
            waiting + line.seats.waiting(),
        )
    })
}

/// At most `limit` seats held at once, by threads and asyncio tasks alike, in one process.
///
/// ConcurrencyLimiter(limit)
///
/// acquire(n=1, timeout=None) waits for n seats (None if timeout passes first), try_acquire(n=1)
/// never waits, await acquire_async(n=1, timeout=None) is the asyncio form; each gives a Lease
/// to release (or use as a context manager). Waiters are seated first come, first seated, a
/// large request never overtaken by a smaller one. `with limiter:` and `async with limiter:`
/// hold one seat for the block; as a decorator, the limiter holds one seat while the function
/// runs. resize(limit) takes effect at once and evicts nobody.
#[pyclass(frozen, module = "protocol_in_code.qos.concurrency")]
pub struct ConcurrencyLimiter {
    table: Arc<Table>,
}

#[pymethods]
impl ConcurrencyLimiter {
    #[new]
    fn new(limit: &Bound<'_, PyAny>) -> PyResult<Self> {
        let table = Table::new(seats_limit(limit)?, None)?;
        Ok(ConcurrencyLimiter {
            table: Arc::new(table),
        })
    }

    /// n seats, waiting (the interpreter released) until they are free or `timeout` seconds
    /// have passed: a Lease, or None holding nothing. ValueError for n more than the limit.
    #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
    fn acquire(
        &self,
        py: Python<'_>,
        n: Option<N>,
        timeout: Option<Timeout>,
    ) -> PyResult<Option<Lease>> {
        acquire(
            py,
            &self.table,
            None,
            tokens(n),
            timeout,
            "ConcurrencyLimiter",
        )
    }

    /// n seats now, if they are free and nobody waits: a Lease, or None.
    #[pyo3(signature = (n = None), text_signature = "($self, n=1)")]
    fn try_acquire(&self, n: Option<N>) -> PyResult<Option<Lease>> {
        match self.table.ask(None, tokens(n), None)? {
            Asked::Seated(grant) => Ok(Some(Lease::new(&self.table, None, grant))),
            _ => Ok(None),
        }
    }

    /// The asyncio form of acquire(): awaits a Lease, or None once `timeout` has passed. A
    /// waiter cancelled meanwhile holds nothing and passes its turn on.
    #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        n: Option<Bound<'py, PyAny>>,
        timeout: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
        conveniences(py)?.call_method1("await_lease", (slf, (n,), timeout))
    }

    fn _ask(&self, py: Python<'_>, n: N, wake: Py<PyAny>) -> PyResult<Option<Py<PyAny>>> {
        ask_for_task(py, &self.table, None, n.0, wake)
    }

    /// Give back `n` seats held with no Lease (those of `with limiter:`).
    fn _release(&self, py: Python<'_>, n: N) -> PyResult<()> {
        Ok(self.table.release(py, None, n.0)?)
    }

    /// How many seats are held now (more than the limit just after it shrank).
    #[getter]
    fn in_flight(&self) -> u64 {
        counts(&self.table).0
    }

    /// How many callers wait for seats.
    #[getter]
    fn waiting(&self) -> usize {
        counts(&self.table).1
    }

    /// How many seats there are.
    #[getter]
    fn limit(&self) -> u64 {
        self.table.lock().limit
    }

    /// A new limit, at once: holders keep their seats; waiters that now fit are seated, and
    /// those asking for more than the new limit get ValueError.
    fn resize(&self, py: Python<'_>, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.table.resize(py, seats_limit(limit)?)?)
    }

    /// Hold one seat while the decorated function runs (awaited for an async def).
    fn __call__<'py>(
        slf: &Bound<'py, Self>,
        function: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method1("hold_while_running", (slf, function))
    }

    /// `with limiter:` holds one seat for the block, waiting as acquire() does.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let lease = slf.get().acquire(slf.py(), None, None)?;
        if let Some(lease) = lease {
            lease.keep();
        }
        Ok(slf.clone())
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_info: &Bound<'_, pyo3::types::PyTuple>,
    ) -> PyResult<()> {
        Ok(self.table.release(py, None, 1)?)
    }

    /// `async with limiter:` holds one seat for the block, awaiting as acquire_async() does.
    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method1("enter_held_async", (slf,))
    }

    #[pyo3(signature = (*_exc_info))]
    fn __aexit__<'py>(
        slf: &Bound<'py, Self>,
        _exc_info: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        conveniences(slf.py())?.call_method1("exit_held_async", (slf,))
    }

    fn __repr__(&self) -> String {
        let (held, waiting) = counts(&self.table);
        format!(
            "ConcurrencyLimiter(limit={}, in_flight={held}, waiting={waiting})",
            self.table.lock().limit
        )
    }
}

/// One in-flight limit per key, at most `max_keys` keys at once, in one process.
///
/// KeyedConcurrencyLimiter(limit, *, max_keys=100000)
///
/// The calls of ConcurrencyLimiter, each taking the key first. A key is forgotten as soon as
/// nobody holds or waits for its seats; a new key finding max_keys keys in use is refused
/// (try_acquire gives None; acquire waits until a key is forgotten, while its timeout lasts),
/// and nobody is evicted. Keys are str, bytes, ints, floats and tuples of these.
#[pyclass(frozen, module = "protocol_in_code.qos.concurrency")]
pub struct KeyedConcurrencyLimiter {
    table: Arc<Table>,
    max_keys: u64,
    seed: (u64, u64),
}

impl KeyedConcurrencyLimiter {
    fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<Key> {
        table_key(key, self.seed)
    }
}

#[pymethods]
impl KeyedConcurrencyLimiter {
    #[new]
    #[pyo3(signature = (limit, *, max_keys = None), text_signature = "(limit, *, max_keys=100000)")]
    fn new(limit: &Bound<'_, PyAny>, max_keys: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let limit = seats_limit(limit)?;
        let max_keys = max_keys.map_or(Ok(100_000), |m| count(m, "max_keys"))?;
        if max_keys == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "max_keys must be at least 1, not 0",
            ));
        }
        let table = Table::new(limit, Some(usize::try_from(max_keys).unwrap_or(usize::MAX)))?;
        Ok(KeyedConcurrencyLimiter {
            table: Arc::new(table),
            max_keys,
            seed: random_seed(),
        })
    }

    /// n seats of `key`, waiting as ConcurrencyLimiter.acquire() does (and, for a new key in
    /// a full table, until a key is forgotten): a Lease, or None once `timeout` has passed.
    #[pyo3(signature = (key, n = None, timeout = None), text_signature = "($self, key, n=1, timeout=None)")]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        timeout: Option<Timeout>,
    ) -> PyResult<Option<Lease>> {
        let key = self.key(key)?;
        acquire(
            py,
            &self.table,
            Some(&key),
            tokens(n),
            timeout,
            "KeyedConcurrencyLimiter",
        )
    }

    /// n seats of `key` now, if free, nobody waits, and the key has room: a Lease, or None.
    #[pyo3(signature = (key, n = None), text_signature = "($self, key, n=1)")]
    fn try_acquire(&self, key: &Bound<'_, PyAny>, n: Option<N>) -> PyResult<Option<Lease>> {
        let key = self.key(key)?;
        match self.table.ask(Some(&key), tokens(n), None)? {
            Asked::Seated(grant) => Ok(Some(Lease::new(&self.table, Some(&key), grant))),
            _ => Ok(None),
        }
    }

    /// The asyncio form of acquire(key): awaits a Lease, or None once `timeout` has passed.
    #[pyo3(signature = (key, n = None, timeout = None), text_signature = "($self, key, n=1, timeout=None)")]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        n: Option<Bound<'py, PyAny>>,
        timeout: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
        conveniences(py)?.call_method1("await_lease", (slf, (key, n), timeout))
    }

    fn _ask(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: N,
        wake: Py<PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let key = self.key(key)?;
        ask_for_task(py, &self.table, Some(&key), n.0, wake)
    }

    /// How many seats are held now, over every key.
    #[getter]
    fn in_flight(&self) -> u64 {
        counts(&self.table).0
    }

    /// How many callers wait for seats, over every key.
    #[getter]
    fn waiting(&self) -> usize {
        counts(&self.table).1
    }

    /// How many seats each key has.
    #[getter]
    fn limit(&self) -> u64 {
        self.table.lock().limit
    }

    /// How many keys may be in use at once.
    #[getter]
    fn max_keys(&self) -> u64 {
        self.max_keys
    }

    /// A new limit for every key, at once, as ConcurrencyLimiter.resize().
    fn resize(&self, py: Python<'_>, limit: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(self.table.resize(py, seats_limit(limit)?)?)
    }

    /// How many keys are in use (held or waited for).
    fn __len__(&self) -> usize {
        match &self.table.lock().lines {
            Lines::One(_) => 1,
            Lines::PerKey { lines, .. } => lines.len(),
        }
    }

    fn __repr__(&self) -> String {
        let (held, waiting) = counts(&self.table);
        format!(
            "KeyedConcurrencyLimiter(limit={}, max_keys={}, in_flight={held}, waiting={waiting})",
            self.table.lock().limit,
            self.max_keys
        )
    }
}
