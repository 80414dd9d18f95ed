//! In-flight limits in one process: `ConcurrencyLimiter`, `KeyedConcurrencyLimiter` and the
//! `Lease` a holder gets, over the rules of `core::seats`.
//!
//! The core decides who is seated and when (`core::seats`), and keeps the waiters' places
//! (`core::seats::table`); this file keeps that table under a lock and wakes the waiters. A
//! waiter is either a thread parked in `acquire` or an asyncio task awaiting a future; both
//! stand in the same line, so they are seated in the order they came. No Python code runs
//! under the lock: a change only collects the waiters to wake, and wakes them (a thread by
//! `unpark`, a task by the callable it gave, which hands the news to its loop with
//! `call_soon_threadsafe`) once the lock is released.
//!
//! A keyed limiter's table keeps seats per key only while the key is in use, at most
//! `max_keys` keys; a caller refused for want of room is woken when a key is forgotten, to ask
//! again.
//!
//! After `os.fork()` the child has a copy of the table, holding the seats of the parent's
//! holders, who are not in the child to give them back. So the child's first look at the table
//! finds it fresh, with no seat held and nobody in line, and a lease taken before the fork gives
//! nothing back in the child: the child's count is only ever of the child's own leases (the
//! limiter warns once, `fork::Lineage`).
//!
//! This file holds the table under its lock, and the `Seats` every in-flight class asks;
//! `lease.rs` the seats held, the places waited in and the blocking wait; `limiters.rs` the two
//! limiter classes. `shared.rs` and
//! `shared_limiters.rs` are the same for every process of a host, on `core::seats::shared`.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::Thread;

use pyo3::prelude::*;

use crate::core::exact::key::Key;
use crate::core::seats::table::{Asked, Table, Told};
use crate::core::seats::{Grant, SeatsError, Ticket};
use crate::python::args::Timeout;
use crate::python::fork::{forks, Lineage};

mod lease;
mod limiters;
mod shared;
mod shared_limiters;

pub use lease::{Lease, Waiter};
pub use limiters::{ConcurrencyLimiter, KeyedConcurrencyLimiter};
pub use shared::{forget_owners_in_child, SharedLease, SharedWaiter};
pub use shared_limiters::{SharedConcurrencyLimiter, SharedKeyedConcurrencyLimiter};

/// What an in-flight limiter class reads from its seats and asks of them, alike whether they
/// are kept in this process ([`Locked`], answering in `lease.rs`) or shared by the processes of
/// a host (`shared::Host`, in `shared.rs`). The classes' methods are written once over it
/// (`limiters.rs`, `seats_methods!`).
trait Seats {
    /// How a call names a key's seats: a [`Key`], or a shared table's digest of it.
    type Key;
    /// What a caller seated gets: a [`Lease`], or a `SharedLease`.
    type Lease;
    /// `n` seats of `key` (None: the one limit's) now, if free and nobody waits (and, for a
    /// new key, there is room).
    fn try_acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Self::Key>,
        n: u64,
    ) -> PyResult<Option<Self::Lease>>;
    /// `n` seats of `key` (None: the one limit's), waiting until seated or `timeout` passes
    /// (None then, holding nothing); `limiter` is the class's name, for errors.
    fn acquire(
        self: &Arc<Self>,
        py: Python<'_>,
        key: Option<&Self::Key>,
        n: u64,
        timeout: Option<Timeout>,
        limiter: &str,
    ) -> PyResult<Option<Self::Lease>>;
    /// How many seats are held now, over every key.
    fn in_flight(&self, py: Python<'_>) -> PyResult<u64>;
    /// How many callers wait for seats, over every key.
    fn waiting(&self) -> u64;
    /// How many seats there are (for each key).
    fn limit(&self) -> u64;
    /// A new limit (for every key), at once.
    fn set_limit(&self, py: Python<'_>, limit: u64) -> PyResult<()>;
    /// Give back the seat held for a `with limiter:` block.
    fn give_back_kept(&self, py: Python<'_>) -> PyResult<()>;
    /// The Python function `acquire_async` hands its limiter, its arguments (`(n,)` or
    /// `(key, n)`) and its timeout, which gives the awaitable of a lease.
    fn awaiting<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

/// How a waiter is told that its place was decided.
enum Wake {
    /// A thread parked in a blocking `acquire`.
    Thread(Thread),
    /// A task's callable, which wakes the task on its own loop.
    Task(Py<PyAny>),
}

/// What a change left to do, done once the lock is released: wake the waiters decided for,
/// then let go of the wakers no longer needed (a task's is a Python object).
fn tell(py: Python<'_>, told: Told<Wake>) {
    for wake in told.wake {
        match wake {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(call) => {
                if let Err(error) = call.call0(py) {
                    error.write_unraisable(py, Some(call.bind(py)));
                }
            }
        }
    }
    drop(told.drop);
}

/// A limiter's table under its lock, shared with its leases and waiters. Each change runs
/// locked and tells its waiters once unlocked.
struct Locked {
    table: Mutex<Table<Key, Wake>>,
    /// The table's keys at most (None for a limiter of one limit), to make it afresh.
    max_keys: Option<usize>,
    /// The forks behind the process whose seats the table counts (`fork::forks`).
    forks: AtomicU64,
    /// The limiter's class name, and where it was made, for the warning of a forked child.
    name: &'static str,
    lineage: Lineage,
}

impl Locked {
    fn new(limit: u64, max_keys: Option<usize>, name: &'static str) -> Result<Self, SeatsError> {
        Ok(Locked {
            table: Mutex::new(Table::new(limit, max_keys)?),
            max_keys,
            forks: AtomicU64::new(forks()),
            name,
            lineage: Lineage::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table<Key, Wake>> {
        if self.forks.load(SeqCst) != forks() {
            drop(self.renewed()); // the parent's wakers let go of unlocked
        }
        // Every change completes without panicking or is not started.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// In a child of the process whose seats the table counts: a fresh table, with the same
    /// limit, in its place; the old one is returned, to be dropped once unlocked.
    fn renewed(&self) -> Option<Table<Key, Wake>> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let forks = forks();
        if self.forks.swap(forks, SeqCst) == forks {
            return None; // renewed meanwhile
        }
        let fresh = Table::new(table.limit(), self.max_keys).ok()?; // a limit it already had
        Some(std::mem::replace(&mut *table, fresh))
    }

    /// Run `change` locked, then tell.
    fn change<R>(
        &self,
        py: Python<'_>,
        change: impl FnOnce(&mut Table<Key, Wake>, &mut Told<Wake>) -> R,
    ) -> R {
        let mut told = Told::default();
        let result = change(&mut self.lock(), &mut told);
        tell(py, told);
        result
    }

    /// `Table::ask`, letting go of a waker it did not keep once unlocked. Asked first in a
    /// forked child, the limiter warns (an error if warnings are errors).
    fn ask(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        n: u64,
        wake: Option<Wake>,
    ) -> PyResult<Asked> {
        self.lineage.check_in_flight(py, self.name)?;
        let mut wake = wake;
        let asked = self.lock().ask(key, n, &mut wake);
        drop(wake);
        Ok(asked?)
    }

    fn release(&self, py: Python<'_>, key: Option<&Key>, n: u64) -> Result<(), SeatsError> {
        self.change(py, |table, told| table.release(key, n, told))
    }

    /// [`Locked::release`] of seats granted with `granted_in` forks behind the process: seats
    /// granted before a fork are not in a child's table, and give nothing back there.
    fn release_granted(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        n: u64,
        granted_in: u64,
    ) -> Result<(), SeatsError> {
        if granted_in != forks() {
            return Ok(());
        }
        self.release(py, key, n)
    }

    fn outcome(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        ticket: Ticket,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(py, |table, told| table.outcome(key, ticket, told))
    }

    fn leave(
        &self,
        py: Python<'_>,
        key: Option<&Key>,
        ticket: Ticket,
    ) -> Option<Result<Grant, SeatsError>> {
        self.change(py, |table, told| table.leave(key, ticket, told))
    }

    fn resize(&self, py: Python<'_>, limit: u64) -> Result<(), SeatsError> {
        self.change(py, |table, told| table.resize(limit, told))
    }
}
