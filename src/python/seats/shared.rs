//! In-flight limits for every process of a host: the table each limiter opens, the owner slot
//! its process holds in it, the leases and places it hands out, and the blocking wait.
//!
//! The rules and the table are `core::seats::shared`; the file and the owner slot are
//! `shared_memory::seats` (the slot's byte locked with `owner_lock`). This file adds what a
//! process needs around them:
//!
//! * **An owner per process.** A `Host` (one per limiter object) claims its owner slot when
//!   opened. A child of `os.fork()` inherits the parent's descriptor, and with it the parent's
//!   byte lock: the fork hook closes the child's copy at once ([`forget_owners_in_child`]), so
//!   a parent that dies is seen dead even while its child lives, and the child claims a slot
//!   of its own at its first call. A lease the child inherited is the parent's: in the child
//!   its release does nothing.
//! * **Looking for the dead.** A caller that finds no seat, or waits, asks the kernel at most
//!   every [`SCAN_EVERY`] which owners are gone and gives back their seats (`Owner::
//!   reclaim_the_dead`), so the seats of a process that died come back within that time of
//!   someone wanting them.
//! * **Waiting.** Seats given back go to the head of the line at once, in the giver's process;
//!   a waiter learns it by looking at its record, asleep between looks (the interpreter
//!   released), from [`FIRST_PAUSE`] doubling to [`LONGEST_PAUSE`]: no process wakes another.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use super::Seats;
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::waiting::max_wait_ns;
use crate::core::seats::shared::{Asked, Held, Layout, SharedSeats, THE_KEY};
use crate::core::seats::SeatsError;
use crate::host;
use crate::python::args::Timeout;
use crate::python::fork;
use crate::python::keys::classify;
use crate::python::waiting::refuse_in_event_loop;
use crate::shared_memory::seats::{open_seats, Owner};
use crate::shared_memory::Mapped;

/// A waiter's first sleep between looks at its record; each sleep after doubles it.
pub const FIRST_PAUSE: Duration = Duration::from_micros(50);

/// A waiter's longest sleep between looks: seats given to it are noticed this late at most.
pub const LONGEST_PAUSE: Duration = Duration::from_millis(2);

/// How often at most a process asks which owners are gone.
pub const SCAN_EVERY: Duration = Duration::from_millis(10);

/// Records of a table: leases and waiters at once over the whole host.
const MOST_RECORDS: u64 = 65_536;

/// One limiter object's table, and its process's owner slot in it.
pub struct Host {
    pub seats: SharedSeats<Mapped>,
    pub path: PathBuf,
    pub name: String,
    /// The owner slot, claimed in the process (fork) it is used in; None in a child until its
    /// first call.
    owner: Mutex<Option<Owner>>,
    /// The slot, and the fork count it was claimed at, read without the mutex.
    slot: AtomicUsize,
    forks: AtomicU64,
    /// When this process last asked which owners are gone (host nanoseconds).
    scanned: AtomicU64,
    /// Leases kept by `with limiter:`, as (record, token), given back by its exit.
    kept: Mutex<Vec<(usize, u64)>>,
}

/// Whether something made at fork count `forks` was made in this process (not inherited).
fn made_here(forks: u64) -> bool {
    forks == fork::forks()
}

/// Every open host of this process, for the fork hook.
static HOSTS: Mutex<Vec<Weak<Host>>> = Mutex::new(Vec::new());

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// After a fork, in the child: close the child's copies of every owner descriptor, so that
/// the parent's byte locks are the parent's alone (see the module's docs). Runs in the fork
/// hook, holding the interpreter, as every use of these mutexes does.
pub fn forget_owners_in_child() {
    for host in locked(&HOSTS).iter().filter_map(Weak::upgrade) {
        drop(locked(&host.owner).take());
    }
}

impl Host {
    /// Open (or make, with `limit` seats) the in-flight table `name` of `max_keys` keys
    /// (`None`: one limit) in `path` or the default folder, and claim an owner slot in it.
    pub fn open(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        limit: u64,
        max_keys: Option<u64>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Arc<Self>> {
        let name = crate::python::shared::limit_name(name)?;
        if limit == 0 {
            return Err(SeatsError::Limit(0).into());
        }
        let records = MOST_RECORDS.max(max_keys.unwrap_or(1).saturating_mul(2));
        let layout = Layout::new(max_keys.unwrap_or(1), records);
        let (opened, owner) = crate::python::shared::in_folder(py, path, |folder| {
            let opened = open_seats(folder, &name, layout, max_keys, limit, host::fresh_seed)?;
            let owner = Owner::claim(&opened.seats, &opened.path)?;
            Ok((opened, owner))
        })?;
        let host = Arc::new(Host {
            seats: opened.seats.with_park(fork::park),
            path: opened.path,
            name,
            slot: AtomicUsize::new(owner.slot),
            owner: Mutex::new(Some(owner)),
            forks: AtomicU64::new(fork::forks()),
            scanned: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
        });
        let mut hosts = locked(&HOSTS);
        hosts.retain(|host| host.strong_count() > 0);
        hosts.push(Arc::downgrade(&host));
        Ok(host)
    }

    /// This process's owner slot, claimed again in a child of a fork.
    pub fn owner(&self, py: Python<'_>) -> PyResult<usize> {
        let forks = fork::forks();
        if self.forks.load(Ordering::Acquire) == forks {
            return Ok(self.slot.load(Ordering::Acquire));
        }
        let mut owner = locked(&self.owner);
        if self.forks.load(Ordering::Acquire) != forks {
            drop(owner.take()); // the parent's: closed here, never given back from here
            let claimed = py
                .detach(|| Owner::claim(&self.seats, &self.path))
                .map_err(PyErr::from)?;
            self.slot.store(claimed.slot, Ordering::Release);
            *owner = Some(claimed);
            self.forks.store(forks, Ordering::Release);
        }
        Ok(self.slot.load(Ordering::Acquire))
    }

    /// Give back what processes that are gone held, if [`SCAN_EVERY`] has passed since this
    /// process last looked: true if any was gone.
    pub fn reclaim_the_dead(&self, py: Python<'_>) -> PyResult<bool> {
        let now = u64::try_from(host::monotonic_ns()).unwrap_or(0);
        let last = self.scanned.load(Ordering::Relaxed);
        let every = u64::try_from(SCAN_EVERY.as_nanos()).unwrap_or(u64::MAX);
        if now.saturating_sub(last) < every
            || self
                .scanned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Ok(false);
        }
        self.owner(py)?;
        let owner = locked(&self.owner);
        let Some(owner) = owner.as_ref() else {
            return Ok(false);
        };
        let gone = py
            .detach(|| owner.reclaim_the_dead(&self.seats))
            .map_err(PyErr::from)?;
        Ok(gone > 0)
    }

    /// The digest of a key: a value every process reads alike.
    pub fn digest(&self, key: &Bound<'_, PyAny>) -> PyResult<Digest> {
        match classify(key)?.as_key() {
            Some(plain) => Ok(self.seats.digest_of(plain)),
            None => Err(PyTypeError::new_err(format!(
                "a shared limiter's key must be an int, float, str, bytes, or a tuple of these, \
                 not {}: other processes cannot tell an object apart by its identity",
                key.get_type().name()?
            ))),
        }
    }

    /// Keep a lease's seats for `with limiter:`, given back by [`Seats::give_back_kept`].
    pub fn keep(&self, held: Held) {
        locked(&self.kept).push((held.record, held.grant.token));
    }
}

impl Seats for Host {
    type Key = Digest;
    type Lease = SharedLease;

    /// Seated now, if the seats are free and nobody waits (the dead are looked for first if
    /// they are not).
    fn try_acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Digest>,
        n: u64,
    ) -> PyResult<Option<SharedLease>> {
        let digest = key.copied().unwrap_or(THE_KEY);
        let slot = self.owner(py)?;
        let mut asked = self.seats.ask(slot, digest, n, false)?;
        if matches!(asked, Asked::Busy | Asked::NoRoom) && self.reclaim_the_dead(py)? {
            asked = self.seats.ask(slot, digest, n, false)?;
        }
        Ok(match asked {
            Asked::Seated(held) => Some(SharedLease::new(self, slot, held)),
            Asked::InLine(_) | Asked::Busy | Asked::NoRoom => None,
        })
    }

    /// Seated at once, or in line until seated or `timeout` passes (None then, holding
    /// nothing). A place is given up on any error (a signal's), by the waiter's drop.
    fn acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Digest>,
        n: u64,
        timeout: Option<Timeout>,
        limiter: &str,
    ) -> PyResult<Option<SharedLease>> {
        let digest = key.copied().unwrap_or(THE_KEY);
        let max_wait = max_wait_ns(timeout.map(|Timeout(wait)| wait));
        if max_wait == 0 {
            return self.try_acquire(py, key, n);
        }
        refuse_in_event_loop(py, limiter)?;
        let started = Instant::now();
        let left = || max_wait.saturating_sub(started.elapsed().as_nanos());
        let slot = self.owner(py)?;
        let mut sleep = FIRST_PAUSE;
        loop {
            match self.seats.ask(slot, digest, n, true)? {
                Asked::Seated(held) => return Ok(Some(SharedLease::new(self, slot, held))),
                Asked::InLine(record) => {
                    let waiter = SharedWaiter::new(self, slot, record);
                    loop {
                        if let Some(lease) = waiter.take(py)? {
                            return Ok(Some(lease));
                        }
                        if left() == 0 {
                            return waiter.leave();
                        }
                        pause(py, &mut sleep, left())?;
                    }
                }
                Asked::Busy | Asked::NoRoom => {
                    self.reclaim_the_dead(py)?;
                    if left() == 0 {
                        return Ok(None);
                    }
                    pause(py, &mut sleep, left())?;
                }
            }
        }
    }

    /// The seats of processes that are gone are given back first.
    fn in_flight(&self, py: Python<'_>) -> PyResult<u64> {
        self.reclaim_the_dead(py)?;
        Ok(self.seats.in_flight())
    }

    fn waiting(&self) -> u64 {
        self.seats.waiting()
    }

    /// The table's, which every process shares.
    fn limit(&self) -> u64 {
        self.seats.limit()
    }

    fn set_limit(&self, _py: Python<'_>, limit: u64) -> PyResult<()> {
        Ok(self.seats.resize(limit)?)
    }

    /// Give back one lease kept by `with limiter:`.
    fn give_back_kept(&self, py: Python<'_>) -> PyResult<()> {
        let slot = self.owner(py)?;
        if let Some((record, token)) = locked(&self.kept).pop() {
            self.seats.release(slot, record, token);
        }
        Ok(())
    }

    fn awaiting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("protocol_in_code.qos._shared_seats")?
            .getattr("await_shared_lease")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let owner = self
            .owner
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let forks = *self.forks.get_mut();
        if let Some(owner) = owner {
            if made_here(forks) {
                owner.let_go(&self.seats);
            }
        }
    }
}

/// Seats held on a table shared by the processes of this host: `n` of them, and the fencing
/// token of this holder, strictly greater than every earlier holder's of the same limit.
///
/// The seats are given back by release() (twice is harmless), by leaving a `with lease:` block,
/// when the lease is dropped without either, or, if this process dies or execs first, by the
/// next process that finds them taken. In a child of os.fork(), a lease inherited from the
/// parent stays the parent's: releasing it there does nothing.
#[pyclass(frozen, module = "protocol_in_code.qos.shared")]
pub struct SharedLease {
    host: Arc<Host>,
    held: Held,
    slot: usize,
    forks: u64,
    holding: AtomicBool,
}

impl SharedLease {
    pub fn new(host: &Arc<Host>, slot: usize, held: Held) -> Self {
        SharedLease {
            host: Arc::clone(host),
            held,
            slot,
            forks: fork::forks(),
            holding: AtomicBool::new(true),
        }
    }

    fn give_back(&self) {
        if self.holding.swap(false, Ordering::AcqRel) && made_here(self.forks) {
            self.host
                .seats
                .release(self.slot, self.held.record, self.held.grant.token);
        }
    }
}

#[pymethods]
impl SharedLease {
    /// How many seats this lease holds.
    #[getter]
    fn n(&self) -> u64 {
        self.held.grant.n
    }

    /// The fencing token: strictly increasing per limit, across every process of the host.
    #[getter]
    fn token(&self) -> u64 {
        self.held.grant.token
    }

    /// Whether the seats were given back (by this lease).
    #[getter]
    fn released(&self) -> bool {
        !self.holding.load(Ordering::Acquire)
    }

    /// Give the seats back (the first call does; later ones do nothing).
    fn release(&self) {
        self.give_back();
    }

    /// Keep the seats past this lease: the limiter gives them back (`with limiter:`).
    #[pyo3(name = "_keep")]
    pub(super) fn keep(&self) {
        if self.holding.swap(false, Ordering::AcqRel) {
            self.host.keep(self.held);
        }
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, _exc_info: &Bound<'_, pyo3::types::PyTuple>) {
        self.give_back();
    }

    fn __repr__(&self) -> String {
        let released = if self.released() { ", released" } else { "" };
        format!(
            "SharedLease(n={}, token={}{released})",
            self.held.grant.n, self.held.grant.token
        )
    }
}

impl Drop for SharedLease {
    fn drop(&mut self) {
        self.give_back();
    }
}

/// A place in a shared limiter's line, kept by `acquire_async` while it waits: given up when
/// dropped, giving back any seats it was granted meanwhile.
#[pyclass(frozen, module = "protocol_in_code.qos.shared", name = "_SharedWaiter")]
pub struct SharedWaiter {
    host: Arc<Host>,
    record: usize,
    slot: usize,
    forks: u64,
    open: AtomicBool,
}

impl SharedWaiter {
    fn new(host: &Arc<Host>, slot: usize, record: usize) -> Self {
        SharedWaiter {
            host: Arc::clone(host),
            record,
            slot,
            forks: fork::forks(),
            open: AtomicBool::new(true),
        }
    }

    fn lease(&self, outcome: Option<Result<Held, SeatsError>>) -> PyResult<Option<SharedLease>> {
        let Some(outcome) = outcome else {
            return Ok(None);
        };
        self.open.store(false, Ordering::Release);
        Ok(Some(SharedLease::new(&self.host, self.slot, outcome?)))
    }
}

#[pymethods]
impl SharedWaiter {
    /// The lease once seated, None while in line; ValueError if a smaller limit refused it.
    #[pyo3(name = "_take")]
    fn take(&self, py: Python<'_>) -> PyResult<Option<SharedLease>> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(None);
        }
        self.host.reclaim_the_dead(py)?;
        self.lease(self.host.seats.outcome(self.slot, self.record))
    }

    /// Give up the place: None if it left the line, else the lease it was granted meanwhile.
    #[pyo3(name = "_leave")]
    fn leave(&self) -> PyResult<Option<SharedLease>> {
        if !self.open.swap(false, Ordering::AcqRel) {
            return Ok(None);
        }
        self.lease(self.host.seats.leave(self.slot, self.record))
    }
}

impl Drop for SharedWaiter {
    fn drop(&mut self) {
        // A place inherited across a fork is the parent's, left by the parent.
        if *self.open.get_mut() && made_here(self.forks) {
            drop(self.leave());
        }
    }
}

/// Sleep `pause` (at most `left` nanoseconds) with the interpreter released, then run signal
/// handlers; the next pause doubles, up to [`LONGEST_PAUSE`].
fn pause(py: Python<'_>, pause: &mut Duration, left: u128) -> PyResult<()> {
    let sleep = (*pause).min(Duration::from_nanos(
        u64::try_from(left).unwrap_or(u64::MAX),
    ));
    py.detach(|| std::thread::sleep(sleep));
    *pause = (*pause * 2).min(LONGEST_PAUSE);
    py.check_signals()
}

/// `_ask`: what `acquire_async` asks: a `SharedLease` if seated at once, a `_SharedWaiter` in
/// line (to be looked at now and then), or None if there is no room for now (ask again later).
pub fn ask_for_task(
    py: Python<'_>,
    host: &Arc<Host>,
    digest: Digest,
    n: u64,
) -> PyResult<Option<Py<PyAny>>> {
    let slot = host.owner(py)?;
    Ok(match host.seats.ask(slot, digest, n, true)? {
        Asked::Seated(held) => Some(Py::new(py, SharedLease::new(host, slot, held))?.into_any()),
        Asked::InLine(record) => {
            Some(Py::new(py, SharedWaiter::new(host, slot, record))?.into_any())
        }
        Asked::Busy | Asked::NoRoom => {
            host.reclaim_the_dead(py)?;
            None
        }
    })
}
