//! The two in-flight limiter classes shared by the processes of a host: their arguments read
//! at the door, and each call handed to the table (`shared.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::limiters::{seats_limit, seats_methods};
use super::shared::{ask_for_task, Host, SharedLease};
use super::Seats;
use crate::core::exact::shared::slot::Digest;
use crate::core::seats::shared::THE_KEY;
use crate::python::args::{count, N};
use crate::shared_memory;

/// The default `max_keys` of a keyed shared limit.
const DEFAULT_MAX_KEYS: u64 = 10_000;

/// Write a shared in-flight limiter class's `#[pymethods]` with `seats_methods!` (`limiters.rs`),
/// adding what both shared classes say of their table (its name and file), then the class's own
/// methods, as given.
macro_rules! shared_seats_methods {
    ($form:ident: $class:ty { $($own:tt)* }) => {
        seats_methods! { $form: $class, host, SharedLease {
            /// The limit's name.
            #[getter]
            fn name(&self) -> &str {
                &self.host.name
            }

            /// The file the table lives in.
            #[getter]
            fn path(&self) -> &PathBuf {
                &self.host.path
            }

            /// Remove the table's file (for tests and tooling): processes using it keep their
            /// table; the next one to open the name makes a new one.
            fn remove(&self) -> PyResult<()> {
                shared_memory::remove(&self.host.path).map_err(PyErr::from)
            }

            $($own)*
        }}
    };
}

/// At most `limit` seats held at once by every process of this host that opens `name`.
///
/// SharedConcurrencyLimiter(name, limit, *, path=None)
///
/// ConcurrencyLimiter's calls and promises (acquire, try_acquire, acquire_async, with, async
/// with, the decorator, resize, fencing tokens, first come first seated), on a table in a file
/// every process maps (in the folder `path`, or this user's own in /dev/shm, as for
/// SharedRateLimiter). The table's limit is shared: `limit` is the limit of a new table, and a
/// process opening a table other processes use gets the table's (resize() changes it for all).
/// The seats of a process that dies, or execs, are given back to the others.
#[pyclass(frozen, module = "protocol_in_code.qos.shared")]
pub struct SharedConcurrencyLimiter {
    host: Arc<Host>,
}

shared_seats_methods! { unkeyed: SharedConcurrencyLimiter {
    #[new]
    #[pyo3(signature = (name, limit, *, path = None))]
    fn new(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let host = Host::open(py, name, seats_limit(limit)?, None, path)?;
        Ok(SharedConcurrencyLimiter { host })
    }

    fn _ask(&self, py: Python<'_>, n: N) -> PyResult<Option<Py<PyAny>>> {
        ask_for_task(py, &self.host, THE_KEY, n.0)
    }

    /// Give back one seat held with no lease (that of `with limiter:`).
    fn _release(&self, py: Python<'_>, _n: N) -> PyResult<()> {
        self.host.give_back_kept(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedConcurrencyLimiter({:?}, limit={}, in_flight={}, waiting={})",
            self.host.name,
            self.host.seats.limit(),
            self.host.seats.in_flight(),
            self.host.seats.waiting()
        )
    }
}}

/// One in-flight limit per key, shared by every process of this host that opens `name`.
///
/// SharedKeyedConcurrencyLimiter(name, limit, *, max_keys=10000, path=None)
///
/// KeyedConcurrencyLimiter's calls, each taking the key first, on a table every process maps
/// (see SharedConcurrencyLimiter). A key has seats only while someone holds or waits for them;
/// a new key finding max_keys keys in use waits (try_acquire gives None) until one is free, and
/// nobody is evicted. Keys are ints, floats, str, bytes and tuples of these.
#[pyclass(frozen, module = "protocol_in_code.qos.shared")]
pub struct SharedKeyedConcurrencyLimiter {
    host: Arc<Host>,
    max_keys: u64,
}

impl SharedKeyedConcurrencyLimiter {
    /// The digest of `key`, by which the table finds it.
    fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<Digest> {
        self.host.digest(key)
    }
}

shared_seats_methods! { keyed: SharedKeyedConcurrencyLimiter {
    #[new]
    #[pyo3(signature = (name, limit, *, max_keys = None, path = None), text_signature = "(name, limit, *, max_keys=10000, path=None)")]
    fn new(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        limit: &Bound<'_, PyAny>,
        max_keys: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let limit = seats_limit(limit)?;
        let max_keys = max_keys.map_or(Ok(DEFAULT_MAX_KEYS), |m| count(m, "max_keys"))?;
        if max_keys == 0 || max_keys > 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "max_keys must be from 1 to {}, not {max_keys}",
                1 << 24
            )));
        }
        let host = Host::open(py, name, limit, Some(max_keys), path)?;
        Ok(SharedKeyedConcurrencyLimiter { host, max_keys })
    }

    fn _ask(&self, py: Python<'_>, key: &Bound<'_, PyAny>, n: N) -> PyResult<Option<Py<PyAny>>> {
        ask_for_task(py, &self.host, self.key(key)?, n.0)
    }

    /// How many keys may be in use at once.
    #[getter]
    fn max_keys(&self) -> u64 {
        self.max_keys
    }

    /// How many keys are in use (held or waited for) by every process.
    fn __len__(&self) -> usize {
        usize::try_from(self.host.seats.keys()).unwrap_or(usize::MAX)
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedKeyedConcurrencyLimiter({:?}, limit={}, max_keys={}, in_flight={}, waiting={})",
            self.host.name,
            self.host.seats.limit(),
            self.max_keys,
            self.host.seats.in_flight(),
            self.host.seats.waiting()
        )
    }
}}
