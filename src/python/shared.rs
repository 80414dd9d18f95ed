//! `protocol_in_code.qos.shared` for Python: a limit shared by the processes of one host.
//!
//! Both classes open (or make) a table in a file that every process maps (`shared_memory`), and
//! decide on it with `core::exact::shared::Table`. `SharedKeyedRateLimiter` is
//! `KeyedRateLimiter`'s interface on such a table; `SharedRateLimiter` is `RateLimiter`'s, on a
//! table of one key. Arguments are checked as the in-process classes check them, and answers are
//! the same `Decision`s.

use std::path::{Path, PathBuf};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::core::exact::config::Config;
use crate::core::exact::shared::slot::Digest;
use crate::core::exact::shared::{Table, THE_KEY};
use crate::core::exact::table_size::{self, DEFAULT_MAX_KEYS};
use crate::host::fresh_seed;
use crate::python::args::count;
use crate::python::clock::Clock;
use crate::python::config::{read_config, read_limits};
use crate::python::errors::OfClock;
use crate::python::fork;
use crate::python::keys::classify;
use crate::python::limiter::only_the_rate_by_position;
use crate::python::surface::methods::limiter_methods;
use crate::python::surface::{limits_repr, pickled_kwargs, PyLimit};
use crate::shared_memory::{self, Mapped, OpenError};

/// A table, where it lives, and the clock its calls read.
pub struct Shared {
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
        let name = limit_name(name)?;
        let tables: Vec<(&Config, Option<u64>)> =
            configs.iter().map(|config| (config, max_keys)).collect();
        let opened = in_folder(py, path, |folder| {
            shared_memory::open(folder, &name, &tables, fresh_seed)
        })?;
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
}

/// What `copy` and `pickle` rebuild a shared limiter from: its tables, opened again by name (in
/// another process, that is how they are shared), with its limits, and its `max_keys` if it has
/// one.
fn new_args<'py, L: PyLimit<Part = Shared>>(
    this: &L,
    py: Python<'py>,
    max_keys: Option<u64>,
) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
    let first = &this.parts()[0];
    let kwargs = pickled_kwargs(this, py)?;
    if let Some(max_keys) = max_keys {
        kwargs.set_item("max_keys", max_keys)?;
    }
    kwargs.set_item("path", first.path.parent())?;
    Ok((PyTuple::new(py, [first.name.as_str()])?, kwargs))
}

/// The `name=` of a limit shared by the processes of a host (of its rate tables or in-flight
/// table): a str, which names its files.
pub(crate) fn limit_name(name: &Bound<'_, PyAny>) -> PyResult<String> {
    name.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "name must be a str naming the limit, not {}",
            name.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })
}

/// Run `open` on the folder of a host's shared files: the one `path=` names (any path-like), or
/// by default this user's own (`shared_memory::default_folder`, made and checked first). The
/// path is read holding the interpreter; the folder is made and `open` runs with it released,
/// since the file system, or a lock another process holds, may keep them waiting. Every shared
/// file is found here: the rate tables, the in-flight tables and the host's secret.
pub(crate) fn in_folder<T: Send>(
    py: Python<'_>,
    path: Option<&Bound<'_, PyAny>>,
    open: impl FnOnce(&Path) -> Result<T, OpenError> + Send,
) -> PyResult<T> {
    let given = match path.filter(|path| !path.is_none()) {
        None => None,
        Some(path) => Some(
            py.import("os")?
                .call_method1("fspath", (path,))?
                .extract::<PathBuf>()?,
        ),
    };
    py.detach(|| {
        let folder = match given {
            Some(folder) => folder,
            None => shared_memory::default_folder()?,
        };
        open(&folder)
    })
    .map_err(PyErr::from)
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
    let secret = in_folder(py, path, shared_memory::host_secret)?;
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
pub(crate) fn key_digest(table: &Table<Mapped>, key: &Bound<'_, PyAny>) -> PyResult<Digest> {
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

/// The one limiter, shared: its part is its table, and its key the table's one key.
impl PyLimit for SharedRateLimiter {
    type Core = Table<Mapped>;
    type Part = Shared;
    type Key<'a> = ();
    const NAME: &'static str = "SharedRateLimiter";
    const CLOCK: OfClock = OfClock::Table;

    fn parts(&self) -> &[Shared] {
        std::slice::from_ref(&self.shared)
    }

    fn core<'a>(&'a self, part: &'a Shared) -> &'a Table<Mapped> {
        &part.table
    }

    fn config<'a>(&'a self, part: &'a Shared) -> &'a Config {
        part.table.config()
    }

    fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    fn with_key<R>(
        &self,
        _: &Shared,
        (): (),
        _: bool,
        decide: impl FnOnce(Digest) -> R,
    ) -> PyResult<R> {
        Ok(decide(THE_KEY))
    }
}

limiter_methods! { one key: SharedRateLimiter {
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
        only_the_rate_by_position(Self::NAME, rate, more)?;
        let config = read_config(py, rate, burst, per, bands)?;
        let mut opened = Shared::open(py, name, &[config], None, path)?;
        Ok(Self {
            shared: opened.remove(0),
        })
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

    /// Remove the table's file (for tests and tooling): processes using it keep their table;
    /// the next one to open the name makes a new one.
    fn remove(&self) -> PyResult<()> {
        shared_memory::remove(&self.shared.path).map_err(PyErr::from)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "SharedRateLimiter({:?}, {})",
            self.shared.name,
            limits_repr(self, py)?
        ))
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        new_args(self, py, None)
    }
}}

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

/// A keyed limiter, shared: a table per plan, and keys that are values, as digests.
impl PyLimit for SharedKeyedRateLimiter {
    type Core = Table<Mapped>;
    type Part = Shared;
    type Key<'a> = &'a Bound<'a, PyAny>;
    const NAME: &'static str = "SharedKeyedRateLimiter";
    const CLOCK: OfClock = OfClock::Table;

    fn parts(&self) -> &[Shared] {
        &self.tables
    }

    fn plans(&self) -> Option<&[(String, usize)]> {
        self.plans.as_deref()
    }

    fn core<'a>(&'a self, part: &'a Shared) -> &'a Table<Mapped> {
        &part.table
    }

    fn config<'a>(&'a self, part: &'a Shared) -> &'a Config {
        part.table.config()
    }

    fn clock(&self) -> &Clock {
        // Every plan's table reads the host's one monotonic clock.
        &self.tables[0].clock
    }

    fn with_key<R>(
        &self,
        part: &Shared,
        key: &Bound<'_, PyAny>,
        _: bool,
        decide: impl FnOnce(Digest) -> R,
    ) -> PyResult<R> {
        Ok(decide(key_digest(&part.table, key)?))
    }

    fn intact(&self, part: &Shared) -> PyResult<()> {
        Ok(part.table.words().intact()?)
    }
}

limiter_methods! { keyed: SharedKeyedRateLimiter {
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
        only_the_rate_by_position(Self::NAME, rate, more)?;
        let (names, configs) = read_limits(py, rate, burst, per, bands, plans)?;
        let max_keys = max_keys.map_or(Ok(DEFAULT_MAX_KEYS), |keys| count(keys, "max_keys"))?;
        let max_keys = table_size::shared(max_keys)?;
        // Each plan's table is the table of its bands under the name: its own file, since the
        // bands' fingerprint is in the file's name; the plans are opened as one set.
        let tables = Shared::open(py, name, &configs, Some(max_keys), path)?;
        Ok(Self {
            tables: tables.into_boxed_slice(),
            plans: names,
        })
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

    /// Remove the table's file (with plans, every plan's), for tests and tooling: processes
    /// using it keep their table; the next one to open the name makes a new one.
    fn remove(&self) -> PyResult<()> {
        for shared in &self.tables {
            shared_memory::remove(&shared.path).map_err(PyErr::from)?;
        }
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let first = &self.tables[0];
        Ok(format!(
            "SharedKeyedRateLimiter({:?}, {}, max_keys={})",
            first.name,
            limits_repr(self, py)?,
            first.table.shape().max_keys
        ))
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        new_args(self, py, Some(self.tables[0].table.shape().max_keys))
    }
}}
