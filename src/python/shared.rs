//! `protocol_in_code.qos.shared` for Python: a limit shared by the processes of one host.
//!
//! Both classes open (or make) a table in a file that every process maps (`shared_memory`), and
//! decide on it with `core::exact::shared::Table`. `SharedKeyedRateLimiter` is
//! `KeyedRateLimiter`'s interface on such a table; `SharedRateLimiter` is `RateLimiter`'s, on a
//! table of one key. Arguments are checked as the in-process classes check them, and answers are
//! the same `Decision`s.

use std::path::PathBuf;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::config::Config;
use crate::core::exact::key::plain_int;
use crate::core::exact::keyed::KeyedDecision;
use crate::core::exact::limiter::Decision as CoreDecision;
use crate::core::exact::plans::Plans;
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::shared::{Table, THE_KEY};
use crate::host::fresh_seed;
use crate::python::args::{count, tokens, NowNs, Timeout, N};
use crate::python::buffers::{code_array, IntBuffer};
use crate::python::clock::Clock;
use crate::python::config::{
    bands_repr, bands_tuple, plans_dict, plans_repr, read_config, read_plans,
};
use crate::python::errors::{clock_error, never, OfClock};
use crate::python::fork;
use crate::python::keyed::{
    code, decision, is_iterable, no_bands, plan_index, stats_record, KeyedStats,
};
use crate::python::keys::classify;
use crate::python::limiter::{conveniences, max_wait_ns, only_the_rate_by_position, Decision};
use crate::python::waiting::{wait_for_turn, Reserved};
use crate::shared_memory::{self, Mapped};

/// `max_keys` unless given.
const DEFAULT_MAX_KEYS: u64 = 100_000;

/// A table, where it lives, and the clock its calls read.
struct Shared {
    table: Table<Mapped>,
    path: PathBuf,
    name: String,
    clock: Clock,
}

impl Shared {
    /// Open the tables of one limiter, `name`: one per configuration (one per plan, with
    /// plans), all together, so that opening one never takes another for a stale file.
    fn open(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        configs: &[Config],
        max_keys: Option<u64>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Self>> {
        let name: String = name.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "name must be a str naming the table, not {}",
                name.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        let folder = given_folder(py, path)?;
        let tables: Vec<(&Config, Option<u64>)> =
            configs.iter().map(|config| (config, max_keys)).collect();
        let opened = py
            .detach(|| {
                let folder = match folder {
                    Some(folder) => folder,
                    None => shared_memory::default_folder()?,
                };
                shared_memory::open(&folder, &name, &tables, fresh_seed)
            })
            .map_err(PyErr::from)?;
        opened
            .into_iter()
            .map(|(table, path)| {
                Ok(Self {
                    table: table.with_park(fork::park),
                    path,
                    name: name.clone(),
                    clock: Clock::checked(py, None)?,
                })
            })
            .collect()
    }

    /// The table's time for a call at `now`; a `now` too far from the table's clock to be a
    /// reading of it is refused.
    fn at(&self, now: i64, now_ns: Option<NowNs>) -> PyResult<i64> {
        match self.table.off_the_clock(now) {
            None => Ok(now),
            Some(gap) => {
                let given = now_ns.is_some();
                let name = if given {
                    "now_ns"
                } else {
                    "the clock's reading"
                };
                Err(clock_error(OfClock::Table, name, now, gap))
            }
        }
    }

    fn request(&self, py: Python<'_>, n: Option<N>, now_ns: Option<NowNs>) -> PyResult<(u64, i64)> {
        let (n, now) = self.clock.request(py, n, now_ns)?;
        Ok((n, self.at(now, now_ns)?))
    }

    fn now(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<i64> {
        let now = self.clock.now(py, now_ns)?;
        self.at(now, now_ns)
    }

    fn reserve(
        &self,
        py: Python<'_>,
        digest: Digest,
        n: u64,
        max_wait: u128,
    ) -> PyResult<Reserved> {
        let now = self.now(py, None)?;
        Reserved::of_keyed(self.table.reserve(digest, n, now, max_wait), now, n)
    }

    fn give_back(&self, py: Python<'_>, digest: Digest, n: u64, turn: (i64, i64)) {
        let (reserved_ns, at_ns) = turn;
        // Given back as of the reservation's time if the clock cannot be read now.
        let now = self.now(py, None).unwrap_or(reserved_ns);
        self.table.give_back(digest, n, now, at_ns);
    }

    /// A blocking `acquire` of the key of `digest` (see `waiting::wait_for_turn`).
    fn acquire(
        &self,
        py: Python<'_>,
        digest: Digest,
        n: u64,
        timeout: Option<Timeout>,
        limiter: &str,
    ) -> PyResult<bool> {
        wait_for_turn(
            py,
            limiter,
            max_wait_ns(timeout),
            |left| self.reserve(py, digest, n, left),
            |at| self.clock.until(py, at),
            |turn| self.give_back(py, digest, n, turn),
        )
    }

    fn repr(&self, py: Python<'_>, class: &str, extra: &str) -> PyResult<String> {
        Ok(format!(
            "{class}({:?}, bands={}{extra})",
            self.name,
            bands_repr(py, self.table.config())?
        ))
    }

    /// What `copy` and `pickle` rebuild: the same table, opened again by name (in another
    /// process, that is how it is shared).
    fn new_args<'py>(
        &self,
        py: Python<'py>,
        max_keys: Option<u64>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("bands", bands_tuple(py, self.table.config())?)?;
        if let Some(max_keys) = max_keys {
            kwargs.set_item("max_keys", max_keys)?;
        }
        kwargs.set_item("path", self.path.parent())?;
        Ok((PyTuple::new(py, [self.name.as_str()])?, kwargs))
    }
}

/// The folder `path=` names (any path-like), or `None` for the default folder.
fn given_folder(py: Python<'_>, path: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PathBuf>> {
    match path.filter(|path| !path.is_none()) {
        None => Ok(None),
        Some(path) => Ok(Some(
            py.import("os")?
                .call_method1("fspath", (path,))?
                .extract::<PathBuf>()?,
        )),
    }
}

/// `_host_secret(path=None)`: the secret every process of this user on this host reads alike
/// (`shared_memory::host_secret`), in the folder `path` or the shared tables' default folder.
/// The web middleware key their `pk` hash with it, so that every worker, and every restart,
/// tells a client by the same `pk`.
#[pyfunction]
#[pyo3(name = "_host_secret", signature = (path = None))]
pub fn host_secret_py<'py>(
    py: Python<'py>,
    path: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let folder = given_folder(py, path)?;
    let secret = py
        .detach(|| {
            let folder = match folder {
                Some(folder) => folder,
                None => shared_memory::default_folder()?,
            };
            shared_memory::host_secret(&folder)
        })
        .map_err(PyErr::from)?;
    Ok(PyBytes::new(py, &secret))
}

/// `_host_folder()`: the shared tables' default folder, made and checked as for a table.
#[pyfunction]
#[pyo3(name = "_host_folder")]
pub fn host_folder_py(py: Python<'_>) -> PyResult<PathBuf> {
    py.detach(shared_memory::default_folder)
        .map_err(PyErr::from)
}

/// The digest of a Python key in `table` (see `Table::digest_of`): the plain key it is, or
/// equals, as the in-process table reads it. Every process reads the same key to the same
/// digest, so only keys whose value says what they are can be shared: an object's identity
/// cannot.
fn key_digest(table: &Table<Mapped>, key: &Bound<'_, PyAny>) -> PyResult<Digest> {
    match classify(key)?.as_key() {
        Some(plain) => Ok(table.digest_of(plain)),
        None => Err(PyTypeError::new_err(format!(
            "a shared limiter's key must be an int, float, str, bytes, or a tuple of these, not \
             {}: other processes cannot tell an object apart by its identity",
            key.get_type().name()?
        ))),
    }
}

/// An exact rate limiter shared by every process of this host that opens it by name.
///
/// SharedRateLimiter(name, rate=None, *, burst=None, per=None, bands=None, path=None): the
/// limit of RateLimiter (the same bands, calls and answers), kept in a table that every
/// process opening `name` with the same bands maps from one file: in the folder `path`, or in
/// this user's own folder, protocol-in-code-qos-<uid>, in /dev/shm where there is one, else in
/// the temporary folder. A file or folder of another user's, or open to others, is refused
/// (PermissionError); a table that does not fit its file system is an OSError at once, never a
/// crash at a later write. Processes that open the table
/// independently, or inherit it across a fork, share one limit: together they are admitted no
/// more than it allows. A table of other bands under the same name is another table (a deploy
/// that changes the limit starts afresh). Times are the host's monotonic clock.
#[pyclass(
    frozen,
    name = "SharedRateLimiter",
    module = "protocol_in_code.qos.shared"
)]
pub struct SharedRateLimiter {
    shared: Shared,
}

impl SharedRateLimiter {
    /// This limiter as a part of a stacked request (see `python::stack`): its table, and the
    /// time of the call, checked against the table's clock.
    pub(crate) fn stacked(
        &self,
        py: Python<'_>,
        now_ns: Option<NowNs>,
    ) -> PyResult<(&Table<Mapped>, i64)> {
        Ok((&self.shared.table, self.shared.now(py, now_ns)?))
    }
}

#[pymethods]
impl SharedRateLimiter {
    #[new]
    #[pyo3(
        signature = (name, rate = None, *more, burst = None, per = None, bands = None, path = None),
        text_signature = "(name, rate=None, *, burst=None, per=None, bands=None, path=None)"
    )]
    #[allow(clippy::too_many_arguments)] // the constructor's keywords are its interface
    fn __new__(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        rate: Option<&Bound<'_, PyAny>>,
        more: &Bound<'_, PyTuple>,
        burst: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
        bands: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        only_the_rate_by_position("SharedRateLimiter", rate, more)?;
        let config = read_config(py, rate, burst, per, bands)?;
        let mut opened = Shared::open(py, name, &[config], None, path)?;
        Ok(Self {
            shared: opened.remove(0),
        })
    }

    /// Take `n` tokens if every band holds them; True if taken, False if not (nothing taken).
    /// Raises ValueError if `n` exceeds a band's burst.
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn try_acquire(&self, py: Python<'_>, n: Option<N>, now_ns: Option<NowNs>) -> PyResult<bool> {
        let (n, now) = self.shared.request(py, n, now_ns)?;
        match self.shared.table.acquire(THE_KEY, n, now) {
            KeyedDecision::Decided(CoreDecision::Allowed) => Ok(true),
            KeyedDecision::Decided(CoreDecision::Never) => Err(never(n)),
            _ => Ok(false),
        }
    }

    /// Take `n` tokens if allowed, and say exactly what happened (a Decision).
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn check<'py>(
        &self,
        py: Python<'py>,
        n: Option<N>,
        now_ns: Option<NowNs>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (n, now) = self.shared.request(py, n, now_ns)?;
        decision(py, self.shared.table.check(THE_KEY, n, now))
    }

    /// What check(n) would answer now, taking nothing.
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn peek<'py>(
        &self,
        py: Python<'py>,
        n: Option<N>,
        now_ns: Option<NowNs>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (n, now) = self.shared.request(py, n, now_ns)?;
        decision(py, self.shared.table.peek(THE_KEY, n, now))
    }

    /// Give `n` tokens back to every band (each capped at its burst).
    #[pyo3(signature = (n = None, now_ns = None), text_signature = "($self, n=1, now_ns=None)")]
    fn refund(&self, py: Python<'_>, n: Option<N>, now_ns: Option<NowNs>) -> PyResult<()> {
        let (n, now) = self.shared.request(py, n, now_ns)?;
        self.shared.table.refund(THE_KEY, n, now);
        Ok(())
    }

    /// Whole tokens every band holds now.
    #[pyo3(signature = (now_ns = None))]
    fn available(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<u128> {
        let now = self.shared.now(py, now_ns)?;
        Ok(self.shared.table.available(THE_KEY, now))
    }

    /// Each band's whole tokens now, and the nanoseconds until it can give one more, as
    /// `RateLimiter.band_levels` says them. Takes nothing.
    #[pyo3(signature = (now_ns = None))]
    fn band_levels(&self, py: Python<'_>, now_ns: Option<NowNs>) -> PyResult<Vec<(u128, u128)>> {
        let now = self.shared.now(py, now_ns)?;
        let levels = self.shared.table.levels(THE_KEY, now);
        Ok(levels.iter().map(|l| (l.tokens, l.next_ns)).collect())
    }

    /// Take `n` tokens, sleeping until every band holds them; False at once if they would
    /// only be there after `timeout` seconds. Waiters in every process are served in the order
    /// they reserved; an interrupted waiter gives its tokens back.
    #[pyo3(signature = (n = None, timeout = None), text_signature = "($self, n=1, timeout=None)")]
    fn acquire(&self, py: Python<'_>, n: Option<N>, timeout: Option<Timeout>) -> PyResult<bool> {
        let n = tokens(n);
        self.shared
            .acquire(py, THE_KEY, n, timeout, "SharedRateLimiter")
    }

    /// Reserve `n` tokens as `acquire` does, without sleeping (for `acquire_async`): the
    /// time from which they are the caller's, or None if that is more than `timeout` away.
    #[pyo3(signature = (n = None, timeout = None))]
    fn _reserve(
        &self,
        py: Python<'_>,
        n: Option<N>,
        timeout: Option<Timeout>,
    ) -> PyResult<Option<i64>> {
        let n = tokens(n);
        match self.shared.reserve(py, THE_KEY, n, max_wait_ns(timeout))? {
            Reserved::At(_, at) => Ok(Some(at)),
            // One key, in a table of one slot made for it: never refused.
            Reserved::TooLate | Reserved::Refused(_) => Ok(None),
        }
    }

    /// Give back `n` tokens `_reserve` booked for `at_ns` (a cancelled waiter).
    fn _give_back(&self, py: Python<'_>, n: N, at_ns: i64) -> PyResult<()> {
        let N(n) = n;
        let now = self.shared.now(py, None)?;
        self.shared.table.give_back(THE_KEY, n, now, at_ns);
        Ok(())
    }

    /// Nanoseconds from the clock until `at_ns` (0 once it is there).
    fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
        self.shared.clock.until(py, at_ns)
    }

    /// Take `n` tokens, awaiting (asyncio) until allowed, as `acquire` does.
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

    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        &self.shared.name
    }

    /// The file the table lives in.
    #[getter]
    fn path(&self) -> &PathBuf {
        &self.shared.path
    }

    /// The bands, each a `Band`.
    #[getter]
    fn bands<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        bands_tuple(py, self.shared.table.config())
    }

    /// Remove the table's file (for tests and tooling): processes using it keep their table;
    /// the next one to open the name makes a new one.
    fn remove(&self) -> PyResult<()> {
        shared_memory::remove(&self.shared.path).map_err(PyErr::from)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        self.shared.repr(py, "SharedRateLimiter", "")
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        self.shared.new_args(py, None)
    }

    /// Use as a decorator: each call takes one token, as `RateLimiter` does.
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
}

/// One exact limiter per key, shared by every process of this host that opens it by name.
///
/// SharedKeyedRateLimiter(name, rate=None, *, burst=None, per=None, bands=None,
/// max_keys=100000, path=None): KeyedRateLimiter's limits, calls and answers, on a table of a
/// fixed size (max_keys keys, rounded up to whole buckets of eight) in a file every process
/// opening `name` maps (see SharedRateLimiter). Keys are ints, floats, text, bytes and tuples
/// of these, stored as seeded 128-bit digests. A key is forgotten only when it is full again,
/// and a new key that finds no room is REFUSED with a wait, never let in by evicting anyone.
///
/// plans={"free": "100/hour", "pro": [...]} in place of rate/bands limits each key by its plan
/// (plan= on every per-key call), as KeyedRateLimiter does: each plan is the table of its
/// bands under the name, a file of its own (see paths).
#[pyclass(
    frozen,
    name = "SharedKeyedRateLimiter",
    module = "protocol_in_code.qos.shared"
)]
pub struct SharedKeyedRateLimiter {
    /// One table per plan (one in all without plans), each in its own file.
    tables: Box<[Shared]>,
    /// Each plan's name and its table's index; `None` without plans.
    plans: Option<Box<[(String, usize)]>>,
}

#[pymethods]
impl SharedKeyedRateLimiter {
    #[new]
    #[pyo3(
        signature = (name, rate = None, *more, burst = None, per = None, bands = None, plans = None, max_keys = None, path = None),
        text_signature = "(name, rate=None, *, burst=None, per=None, bands=None, plans=None, max_keys=100000, path=None)"
    )]
    #[allow(clippy::too_many_arguments)] // the constructor's keywords are its interface
    fn __new__(
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        rate: Option<&Bound<'_, PyAny>>,
        more: &Bound<'_, PyTuple>,
        burst: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
        bands: Option<&Bound<'_, PyAny>>,
        plans: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        path: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        only_the_rate_by_position("SharedKeyedRateLimiter", rate, more)?;
        let (names, configs) = match plans {
            None => (None, vec![read_config(py, rate, burst, per, bands)?]),
            Some(plans) => {
                let Plans { names, configs } = read_plans(py, plans, rate, burst, per, bands)?;
                (Some(names.into_boxed_slice()), configs)
            }
        };
        let max_keys = max_keys.map_or(Ok(DEFAULT_MAX_KEYS), |keys| count(keys, "max_keys"))?;
        if !(1..=crate::core::exact::shared::layout::MOST_KEYS).contains(&max_keys) {
            return Err(PyValueError::new_err(format!(
                "max_keys must be between 1 and 2**32, not {max_keys}"
            )));
        }
        // Each plan's table is the table of its bands under the name: its own file, since the
        // bands' fingerprint is in the file's name; the plans are opened as one set.
        let tables = Shared::open(py, name, &configs, Some(max_keys), path)?;
        Ok(Self {
            tables: tables.into_boxed_slice(),
            plans: names,
        })
    }

    /// Take `n` tokens for `key` if its every band holds them; True if taken, False if not
    /// (denied, or refused because the table is full). Raises ValueError if `n` exceeds a
    /// band's burst.
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let (shared, digest, n, now) = self.request(py, key, n, now_ns, plan)?;
        match shared.table.acquire(digest, n, now) {
            KeyedDecision::Decided(CoreDecision::Allowed) => Ok(true),
            KeyedDecision::Decided(CoreDecision::Never) => Err(never(n)),
            _ => Ok(false),
        }
    }

    /// Take `n` tokens for `key` if allowed, and say exactly what happened: ALLOWED, DENIED,
    /// NEVER, or REFUSED (a new key and no room; wait_ns says when room may appear).
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn check<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (shared, digest, n, now) = self.request(py, key, n, now_ns, plan)?;
        decision(py, shared.table.check(digest, n, now))
    }

    /// What check(key, n) would answer now, taking nothing.
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn peek<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, Decision>> {
        let (shared, digest, n, now) = self.request(py, key, n, now_ns, plan)?;
        decision(py, shared.table.peek(digest, n, now))
    }

    /// Give `n` tokens back to `key` (each band capped at its burst).
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (shared, digest, n, now) = self.request(py, key, n, now_ns, plan)?;
        shared.table.refund(digest, n, now);
        Ok(())
    }

    /// Whole tokens `key` holds now (every band's least).
    #[pyo3(signature = (key, now_ns = None, *, plan = None))]
    fn available(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u128> {
        let (shared, digest, now) = self.at_key(py, key, now_ns, plan)?;
        Ok(shared.table.available(digest, now))
    }

    /// Each band's whole tokens for `key` now, and the nanoseconds until it can give one more,
    /// as `KeyedRateLimiter.band_levels` says them (of `plan`'s bands, with plans). Takes
    /// nothing.
    #[pyo3(signature = (key, now_ns = None, *, plan = None))]
    fn band_levels(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(u128, u128)>> {
        let (shared, digest, now) = self.at_key(py, key, now_ns, plan)?;
        let levels = shared.table.levels(digest, now);
        Ok(levels.iter().map(|l| (l.tokens, l.next_ns)).collect())
    }

    /// Take `n` tokens for `key`, sleeping until allowed; False at once if they would only be
    /// there after `timeout` seconds. A key's waiters in every process are served in the order
    /// they reserved; a refusal (no room) sleeps until room may appear, within `timeout`.
    #[pyo3(signature = (key, n = None, timeout = None, *, plan = None), text_signature = "($self, key, n=1, timeout=None, *, plan=None)")]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        timeout: Option<Timeout>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let shared = self.plan(plan)?;
        let n = tokens(n);
        let digest = key_digest(&shared.table, key)?;
        shared.acquire(py, digest, n, timeout, "SharedKeyedRateLimiter")
    }

    /// Reserve `n` tokens for `key` as `acquire` does, without sleeping (for `acquire_async`):
    /// `(True, at_ns)` once reserved, `(False, retry_ns)` if refused, None if too late.
    #[pyo3(signature = (key, n = None, timeout = None, *, plan = None))]
    fn _reserve(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        timeout: Option<Timeout>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(bool, i128)>> {
        let shared = self.plan(plan)?;
        let n = tokens(n);
        let digest = key_digest(&shared.table, key)?;
        Ok(shared
            .reserve(py, digest, n, max_wait_ns(timeout))?
            .for_python())
    }

    /// Give back `n` tokens `_reserve` booked for `key` at `at_ns` (a cancelled waiter).
    #[pyo3(signature = (key, n, at_ns, *, plan = None))]
    fn _give_back(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: N,
        at_ns: i64,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let shared = self.plan(plan)?;
        let digest = key_digest(&shared.table, key)?;
        let N(n) = n;
        let now = shared.now(py, None)?;
        shared.table.give_back(digest, n, now, at_ns);
        Ok(())
    }

    /// Nanoseconds from the clock until `at_ns` (0 once it is there).
    fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
        // Every plan's table reads the host's one monotonic clock.
        self.tables[0].clock.until(py, at_ns)
    }

    /// Take `n` tokens for `key`, awaiting (asyncio) until allowed, as `acquire` does.
    #[pyo3(signature = (key, n = None, timeout = None, *, plan = None), text_signature = "($self, key, n=1, timeout=None, *, plan=None)")]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        key: Bound<'py, PyAny>,
        n: Option<Bound<'py, PyAny>>,
        timeout: Option<Bound<'py, PyAny>>,
        plan: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // A bad plan raises here, not when the coroutine first runs.
        slf.get().plan(plan.as_ref())?;
        let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
        conveniences(py)?.call_method1("await_reserved_for", (slf, key, &n, timeout, plan))
    }

    /// Decide a whole trace of integer keys, as `KeyedRateLimiter.try_acquire_many` does:
    /// request `i` is `n[i]` tokens (or `n` for each, 1 by default) for `keys[i]` at
    /// `now_ns[i]`; an `array('B')` of outcome codes (0 allowed, 1 denied, 2 never, 3 refused).
    #[pyo3(signature = (keys, now_ns, n = None, *, plan = None))]
    fn try_acquire_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        now_ns: &Bound<'py, PyAny>,
        n: Option<&Bound<'py, PyAny>>,
        plan: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let shared = self.plan(plan)?;
        let keys: Vec<i128> = IntBuffer::new(keys, "keys")?.narrowed("keys", "be a 64-bit int")?;
        let times: Vec<i64> =
            IntBuffer::new(now_ns, "now_ns")?.narrowed("now_ns", "fit in 64 bits")?;
        let counts: Vec<u64> = match n.filter(|n| !n.is_none()) {
            None => vec![1; keys.len()],
            Some(n) if n.extract::<u64>().is_ok() || !is_iterable(n)? => {
                vec![count(n, "n")?; keys.len()]
            }
            Some(n) => IntBuffer::new(n, "n")?.narrowed("n", "be between 0 and 2**64 - 1")?,
        };
        if times.len() != keys.len() || counts.len() != keys.len() {
            return Err(PyValueError::new_err(format!(
                "keys ({}), now_ns ({}) and n ({}) must have the same length",
                keys.len(),
                times.len(),
                counts.len()
            )));
        }
        for (index, &now) in times.iter().enumerate() {
            shared
                .at(now, None)
                .map_err(|_| Self::gap_error(shared, index, now))?;
        }
        let table = &shared.table;
        let codes: Vec<u8> = fork::detach(py, || {
            keys.iter()
                .zip(&times)
                .zip(&counts)
                .map(|((&key, &now), &n)| {
                    code(table.acquire(table.digest_of(plain_int(key)), n, now))
                })
                .collect()
        });
        code_array(py, codes.into_iter())
    }

    /// What every process has decided on this table: a KeyedStats(allowed, denied, refused,
    /// forgotten); with plans, the sums over every plan's table.
    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<KeyedStats> {
        let mut sum = crate::core::exact::keyed::Stats::default();
        for shared in &self.tables {
            shared.table.words().intact()?;
            sum.add(&shared.table.stats());
        }
        stats_record(py, sum)
    }

    /// The most keys the table holds (max_keys rounded up to whole buckets); with plans, each
    /// plan's table.
    #[getter]
    fn max_keys(&self) -> usize {
        self.tables[0].table.shape().capacity()
    }

    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        &self.tables[0].name
    }

    /// The file the table lives in. A limiter with plans has one file per plan: it raises
    /// AttributeError, pointing to `paths`.
    #[getter]
    fn path(&self) -> PyResult<&PathBuf> {
        match &self.plans {
            None => Ok(&self.tables[0].path),
            Some(_) => Err(pyo3::exceptions::PyAttributeError::new_err(
                "a SharedKeyedRateLimiter with plans keeps each plan's table in a file of its \
                 own: read .paths",
            )),
        }
    }

    /// Each plan's file, a dict of plan name to path; None without plans.
    #[getter]
    fn paths<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(names) = &self.plans else {
            return Ok(None);
        };
        let paths = PyDict::new(py);
        for (name, index) in names {
            paths.set_item(name, &self.tables[*index].path)?;
        }
        Ok(Some(paths))
    }

    /// The bands, each a `Band`. A limiter with plans has no bands of its own: it raises
    /// AttributeError, pointing to `plans`.
    #[getter]
    fn bands<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.plans {
            None => bands_tuple(py, self.tables[0].table.config()),
            Some(names) => Err(no_bands("SharedKeyedRateLimiter", names)),
        }
    }

    /// Each plan's bands, a dict of plan name to a tuple of `Band`; None without plans.
    #[getter]
    fn plans<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.plans
            .as_deref()
            .map(|names| plans_dict(py, names, &self.configs()))
            .transpose()
    }

    /// Remove the table's file (with plans, every plan's), for tests and tooling: processes
    /// using it keep their table; the next one to open the name makes a new one.
    fn remove(&self) -> PyResult<()> {
        for shared in &self.tables {
            shared_memory::remove(&shared.path).map_err(PyErr::from)?;
        }
        Ok(())
    }

    /// How many keys the table holds now (with plans, every plan's table: a key stored under
    /// two plans counts twice).
    fn __len__(&self) -> PyResult<usize> {
        let mut len = 0;
        for shared in &self.tables {
            shared.table.words().intact()?;
            len += shared.table.len();
        }
        Ok(len)
    }

    /// Always True, however many keys are stored, as for every other limiter: without it an
    /// empty table would be false through `__len__`, and `limiter or default` would quietly
    /// put another limiter in its place.
    fn __bool__(_slf: &Bound<'_, Self>) -> bool {
        true
    }

    /// Whether `key` is stored (a key not stored is a full, fresh one); with plans, under any
    /// plan.
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        for shared in &self.tables {
            shared.table.words().intact()?;
            if shared.table.contains(key_digest(&shared.table, key)?) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let first = &self.tables[0];
        let extra = format!(", max_keys={}", first.table.shape().max_keys);
        match &self.plans {
            None => first.repr(py, "SharedKeyedRateLimiter", &extra),
            Some(names) => Ok(format!(
                "SharedKeyedRateLimiter({:?}, plans={}{extra})",
                first.name,
                plans_repr(py, names, &self.configs())?
            )),
        }
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let first = &self.tables[0];
        let (args, kwargs) = first.new_args(py, Some(first.table.shape().max_keys))?;
        if let Some(names) = &self.plans {
            kwargs.del_item("bands")?;
            kwargs.set_item("plans", plans_dict(py, names, &self.configs())?)?;
        }
        Ok((args, kwargs))
    }
}

impl SharedKeyedRateLimiter {
    /// The table of `plan` (see `keyed::plan_index`).
    #[inline]
    fn plan(&self, plan: Option<&Bound<'_, PyAny>>) -> PyResult<&Shared> {
        match (&self.plans, plan) {
            (None, None) => Ok(&self.tables[0]),
            (plans, plan) => plan_index(plans.as_deref(), plan).map(|index| &self.tables[index]),
        }
    }

    /// A per-key call's table (its plan's), the key's digest in it, its `n` and its time,
    /// checked in that order.
    fn request(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(&Shared, Digest, u64, i64)> {
        let shared = self.plan(plan)?;
        let (n, now) = shared.request(py, n, now_ns)?;
        Ok((shared, key_digest(&shared.table, key)?, n, now))
    }

    /// The table of `plan` as a part of a stacked request (see `python::stack`), the key's
    /// digest in it, and the time of the call, read as a per-key call reads them.
    pub(crate) fn stacked(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(&Table<Mapped>, Digest, i64)> {
        let (shared, digest, now) = self.at_key(py, key, now_ns, plan)?;
        Ok((&shared.table, digest, now))
    }

    /// [`Self::request`] for a call that takes no `n`.
    fn at_key(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(&Shared, Digest, i64)> {
        let shared = self.plan(plan)?;
        let now = shared.now(py, now_ns)?;
        Ok((shared, key_digest(&shared.table, key)?, now))
    }

    /// Every table's configuration, by the index the plans name.
    fn configs(&self) -> Vec<&Config> {
        self.tables
            .iter()
            .map(|shared| shared.table.config())
            .collect()
    }

    fn gap_error(shared: &Shared, index: usize, now: i64) -> PyErr {
        let gap = shared.table.off_the_clock(now).unwrap_or(0);
        clock_error(OfClock::Table, &format!("now_ns[{index}]"), now, gap)
    }
}
