//! The two in-flight limiter classes: their arguments read at the door, and each call handed
//! to the table (`super`) or to the lease and the wait (`lease.rs`). The methods all four
//! in-flight classes (these and the shared ones) have alike are written here once, by
//! `seats_methods!`, over the [`Seats`] each class keeps.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3::IntoPyObjectExt;

use super::lease::{ask_for_task, Lease};
use super::{Locked, Seats};
use crate::core::exact::key::Key;
use crate::core::exact::keyed::random_seed;
use crate::python::args::{count, N};
use crate::python::keys::classify;

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
pub(super) fn seats_limit(limit: &Bound<'_, PyAny>) -> PyResult<u64> {
    count(limit, "limit")
}

/// The awaitable `acquire_async` gives for `n` seats (1 if not given) of `key` (none for a
/// limiter of one limit), from the Python function its `seats` name.
pub(super) fn await_lease<'py>(
    limiter: &Bound<'py, PyAny>,
    seats: &impl Seats,
    key: Option<Bound<'py, PyAny>>,
    n: Option<Bound<'py, PyAny>>,
    timeout: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = limiter.py();
    let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
    let args = match key {
        Some(key) => PyTuple::new(py, [key, n])?,
        None => PyTuple::new(py, [n])?,
    };
    seats.awaiting(py)?.call1((limiter, args, timeout))
}

/// Write an in-flight limiter class's `#[pymethods]`: the methods every in-flight limiter has
/// alike, through the [`Seats`] in its field `$seats`, whose leases are `$lease`s; for a
/// limiter of one limit (`unkeyed:`) those holding one seat for a `with` or `async with` block
/// or a decorated function's run too; then the class's own methods, as given. A keyed class
/// reads a key with its own `key` method. The four classes, in one process and shared by a
/// host, all use it. `_ask` (what `acquire_async` asks) stays with each class: the in-process
/// form takes the callable that wakes its task, the shared form none (its task looks at its
/// place now and then).
///
/// PyO3 makes a class's methods from one `#[pymethods]` block, so the shared methods cannot
/// live in a block of their own; this macro writes them into each class's block. A doc comment
/// here is the Python docstring of every class's method.
macro_rules! seats_methods {
    (unkeyed: $class:ty, $seats:ident, $lease:ty { $($own:tt)* }) => {
        seats_methods! { @all $class, $seats {
            /// n seats, waiting (the interpreter released) until they are free or `timeout`
            /// seconds have passed: a lease, or None holding nothing. ValueError for n more
            /// than the limit.
            #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
            fn acquire(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
            ) -> PyResult<Option<$lease>> {
                use $crate::python::seats::Seats;
                let n = $crate::python::args::tokens(n);
                Seats::acquire(&self.$seats, py, None, n, timeout, stringify!($class))
            }

            /// n seats now, if they are free and nobody waits: a lease, or None.
            #[pyo3(signature = (n = None), text_signature = "($self, n=1)")]
            fn try_acquire(
                &self,
                py: Python<'_>,
                n: Option<$crate::python::args::N>,
            ) -> PyResult<Option<$lease>> {
                use $crate::python::seats::Seats;
                let n = $crate::python::args::tokens(n);
                Seats::try_acquire(&self.$seats, py, None, n)
            }

            /// The asyncio form of acquire(): awaits a lease, or None once `timeout` has passed.
            /// A waiter cancelled meanwhile holds nothing and passes its turn on.
            #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                n: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let seats = &*slf.get().$seats;
                $crate::python::seats::limiters::await_lease(slf.as_any(), seats, None, n, timeout)
            }

            /// Hold one seat while the decorated function runs (awaited for an async def).
            fn __call__<'py>(
                slf: &Bound<'py, Self>,
                function: &Bound<'py, PyAny>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?
                    .call_method1("hold_while_running", (slf, function))
            }

            /// `with limiter:` holds one seat for the block, waiting as acquire() does.
            fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
                if let Some(lease) = slf.get().acquire(slf.py(), None, None)? {
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
                $crate::python::seats::Seats::give_back_kept(&*self.$seats, py)
            }

            /// `async with limiter:` holds one seat for the block, awaiting as acquire_async()
            /// does.
            fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?
                    .call_method1("enter_held_async", (slf,))
            }

            #[pyo3(signature = (*_exc_info))]
            fn __aexit__<'py>(
                slf: &Bound<'py, Self>,
                _exc_info: &Bound<'py, pyo3::types::PyTuple>,
            ) -> PyResult<Bound<'py, PyAny>> {
                $crate::python::surface::conveniences(slf.py())?
                    .call_method1("exit_held_async", (slf,))
            }

            $($own)*
        }}
    };
    (keyed: $class:ty, $seats:ident, $lease:ty { $($own:tt)* }) => {
        seats_methods! { @all $class, $seats {
            /// n seats of `key`, waiting as the unkeyed limiter's acquire() does (and, for a
            /// new key in a full table, until a key is forgotten): a lease, or None once
            /// `timeout` has passed.
            #[pyo3(signature = (key, n = None, timeout = None), text_signature = "($self, key, n=1, timeout=None)")]
            fn acquire(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
                timeout: Option<$crate::python::args::Timeout>,
            ) -> PyResult<Option<$lease>> {
                use $crate::python::seats::Seats;
                let key = self.key(key)?;
                let n = $crate::python::args::tokens(n);
                Seats::acquire(&self.$seats, py, Some(&key), n, timeout, stringify!($class))
            }

            /// n seats of `key` now, if free, nobody waits, and the key has room: a lease, or
            /// None.
            #[pyo3(signature = (key, n = None), text_signature = "($self, key, n=1)")]
            fn try_acquire(
                &self,
                py: Python<'_>,
                key: &Bound<'_, PyAny>,
                n: Option<$crate::python::args::N>,
            ) -> PyResult<Option<$lease>> {
                use $crate::python::seats::Seats;
                let key = self.key(key)?;
                let n = $crate::python::args::tokens(n);
                Seats::try_acquire(&self.$seats, py, Some(&key), n)
            }

            /// The asyncio form of acquire(key): awaits a lease, or None once `timeout` has
            /// passed.
            #[pyo3(signature = (key, n = None, timeout = None), text_signature = "($self, key, n=1, timeout=None)")]
            fn acquire_async<'py>(
                slf: &Bound<'py, Self>,
                key: Bound<'py, PyAny>,
                n: Option<Bound<'py, PyAny>>,
                timeout: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let seats = &*slf.get().$seats;
                $crate::python::seats::limiters::await_lease(slf.as_any(), seats, Some(key), n, timeout)
            }

            $($own)*
        }}
    };
    (@all $class:ty, $seats:ident { $($own:tt)* }) => {
        #[pymethods]
        impl $class {
            /// How many seats are held now, over every key of a keyed limiter (more than the
            /// limit just after it shrank). A shared limiter counts those of every process of
            /// the host, once the seats of processes that are gone are given back.
            #[getter]
            fn in_flight(&self, py: Python<'_>) -> PyResult<u64> {
                $crate::python::seats::Seats::in_flight(&*self.$seats, py)
            }

            /// How many callers wait for seats, over every key of a keyed limiter (and every
            /// process, for a shared limiter).
            #[getter]
            fn waiting(&self) -> u64 {
                $crate::python::seats::Seats::waiting(&*self.$seats)
            }

            /// How many seats there are (for each key, in a keyed limiter).
            #[getter]
            fn limit(&self) -> u64 {
                $crate::python::seats::Seats::limit(&*self.$seats)
            }

            /// A new limit (for every key, in a keyed limiter, and every process, for a
            /// shared limiter), at once: holders keep their seats; waiters that now fit are
            /// seated, and those asking for more than the new limit get ValueError.
            fn resize(&self, py: Python<'_>, limit: &Bound<'_, PyAny>) -> PyResult<()> {
                let limit = $crate::python::seats::limiters::seats_limit(limit)?;
                $crate::python::seats::Seats::set_limit(&*self.$seats, py, limit)
            }

            $($own)*
        }
    };
}
pub(super) use seats_methods;

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
    table: Arc<Locked>,
}

seats_methods! { unkeyed: ConcurrencyLimiter, table, Lease {
    #[new]
    fn new(limit: &Bound<'_, PyAny>) -> PyResult<Self> {
        let table = Locked::new(seats_limit(limit)?, None, "ConcurrencyLimiter")?;
        Ok(ConcurrencyLimiter {
            table: Arc::new(table),
        })
    }

    fn _ask(&self, py: Python<'_>, n: N, wake: Py<PyAny>) -> PyResult<Option<Py<PyAny>>> {
        ask_for_task(py, &self.table, None, n.0, wake)
    }

    /// Give back `n` seats held with no Lease (those of `with limiter:`).
    fn _release(&self, py: Python<'_>, n: N) -> PyResult<()> {
        Ok(self.table.release(py, None, n.0)?)
    }

    fn __repr__(&self) -> String {
        let (held, waiting) = self.table.lock().counts();
        format!(
            "ConcurrencyLimiter(limit={}, in_flight={held}, waiting={waiting})",
            self.table.lock().limit()
        )
    }
}}

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
    table: Arc<Locked>,
    max_keys: u64,
    seed: (u64, u64),
}

impl KeyedConcurrencyLimiter {
    fn key(&self, key: &Bound<'_, PyAny>) -> PyResult<Key> {
        table_key(key, self.seed)
    }
}

seats_methods! { keyed: KeyedConcurrencyLimiter, table, Lease {
    #[new]
    #[pyo3(signature = (limit, *, max_keys = None), text_signature = "(limit, *, max_keys=100000)")]
    fn new(limit: &Bound<'_, PyAny>, max_keys: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let limit = seats_limit(limit)?;
        let max_keys = max_keys.map_or(Ok(100_000), |m| count(m, "max_keys"))?;
        if max_keys == 0 {
            return Err(PyValueError::new_err("max_keys must be at least 1, not 0"));
        }
        let max_keys_kept = Some(usize::try_from(max_keys).unwrap_or(usize::MAX));
        let table = Locked::new(limit, max_keys_kept, "KeyedConcurrencyLimiter")?;
        Ok(KeyedConcurrencyLimiter {
            table: Arc::new(table),
            max_keys,
            seed: random_seed(),
        })
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

    /// How many keys may be in use at once.
    #[getter]
    fn max_keys(&self) -> u64 {
        self.max_keys
    }

    /// How many keys are in use (held or waited for).
    fn __len__(&self) -> usize {
        self.table.lock().keys()
    }

    fn __repr__(&self) -> String {
        let (held, waiting) = self.table.lock().counts();
        format!(
            "KeyedConcurrencyLimiter(limit={}, max_keys={}, in_flight={held}, waiting={waiting})",
            self.table.lock().limit(),
            self.max_keys
        )
    }
}}
