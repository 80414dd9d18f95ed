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
//! This file holds the table under its lock; `lease.rs` the seats held, the places waited in
//! and the blocking wait; `limiters.rs` the two limiter classes. `shared.rs` and
//! `shared_limiters.rs` are the same for every process of a host, on `core::seats::shared`.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread::Thread;

use pyo3::prelude::*;

use crate::core::exact::key::Key;
use crate::core::seats::table::{Asked, Table, Told};
use crate::core::seats::{Grant, SeatsError, Ticket};

mod lease;
mod limiters;
mod shared;
mod shared_limiters;

pub use lease::{Lease, Waiter};
pub use limiters::{ConcurrencyLimiter, KeyedConcurrencyLimiter};
pub use shared::{forget_owners_in_child, SharedLease, SharedWaiter};
pub use shared_limiters::{SharedConcurrencyLimiter, SharedKeyedConcurrencyLimiter};

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
struct Locked(Mutex<Table<Key, Wake>>);

impl Locked {
    fn new(limit: u64, max_keys: Option<usize>) -> Result<Self, SeatsError> {
        Ok(Locked(Mutex::new(Table::new(limit, max_keys)?)))
    }

    fn lock(&self) -> MutexGuard<'_, Table<Key, Wake>> {
        // Every change completes without panicking or is not started.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// `Table::ask`, letting go of a waker it did not keep once unlocked.
    fn ask(&self, key: Option<&Key>, n: u64, wake: Option<Wake>) -> Result<Asked, SeatsError> {
        let mut wake = wake;
        let asked = self.lock().ask(key, n, &mut wake);
        drop(wake);
        asked
    }

    fn release(&self, py: Python<'_>, key: Option<&Key>, n: u64) -> Result<(), SeatsError> {
        self.change(py, |table, told| table.release(key, n, told))
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
