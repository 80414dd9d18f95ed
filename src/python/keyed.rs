//! `protocol_in_code.qos.keyed` for Python: the keyed limiter of `core::exact::keyed`.
//!
//! Arguments are checked as the single limiter checks them (and before any key is looked at),
//! each key is turned into a table key by [`keys`](super::keys), and the table decides with no
//! Python code running under its locks. A whole trace of integer keys is decided with the
//! interpreter released, after every item has been read and checked, so a bad trace changes
//! nothing.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::core::exact::clock_gap::shifted;
use crate::core::exact::config::Config;
use crate::core::exact::key::{Key, KeyRef};
use crate::core::exact::keyed::{KeyedLimiter, Stats};
use crate::core::exact::settle::Balance;
use crate::core::exact::table_size::{self, InProcess};
use crate::python::args::count;
use crate::python::clock::Clock;
use crate::python::config::read_limits;
use crate::python::errors::OfClock;
use crate::python::fork::Lineage;
use crate::python::keys::{classify, key_object, Classified, Registry};
use crate::python::limiter::{
    only_the_rate_by_position, rebuilder, restore_attributes, with_attributes,
};
use crate::python::surface::methods::limiter_methods;
use crate::python::surface::{limits_repr, pickled_kwargs, PyLimit};

/// A `max_keys` argument, checked as a count (so None, a bool or a float is refused).
#[derive(Clone, Copy)]
struct KeyCount(u64);

impl<'a, 'py> FromPyObject<'a, 'py> for KeyCount {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        count(&value, "max_keys").map(Self)
    }
}

/// `max_keys` unless given.
const DEFAULT_MAX_KEYS: KeyCount = KeyCount(table_size::DEFAULT_MAX_KEYS);

/// One exact rate limiter per key, at most max_keys keys remembered.
///
/// KeyedRateLimiter(rate, *, burst=None, per=1, bands=None, plans=None, max_keys=100_000,
/// shards=None, clock=None): every key is limited by the same bands, given as for RateLimiter.
/// Each key starts full.
///
/// Or plans={"free": "100/hour", "pro": [Band("10/second", burst=20)]}, in place of
/// rate/bands: every per-key call then names the key's plan (plan="pro", required), and each
/// plan keeps its own state per key, in a table of its own (max_keys and shards hold per
/// plan). A key's first request under a plan finds that plan's full burst; back on an earlier
/// plan, it finds its state there as it left it. Plans of the same bands are one plan. bands
/// then raises AttributeError: read plans. The table is split into shards locks (default min(16, max_keys)), which share
/// one count of keys: a new key is refused only when the table holds max_keys keys and none
/// of them has refilled.
///
/// Per key (each takes now_ns= to override the clock): try_acquire(key, n=1) -> bool,
/// check(key, n=1) -> Decision, peek(key, n=1) -> Decision, refund(key, n=1),
/// available(key) -> int, blocking acquire(key, n=1, timeout=None) and
/// await acquire_async(key, n=1, timeout=None). The table: len(), iteration over the keys
/// remembered, key in limiter, stats, and try_acquire_many(keys, now_ns, n=None) for whole
/// traces of integer keys.
///
/// The table has one clock that never goes backwards: a call made at a time before the
/// latest one the table has seen is decided at that latest time (its wait_ns still counts
/// from the caller's time). A time more than ten years from that clock, either way, was read
/// on another clock (time.time_ns() on a monotonic table): it raises ValueError and changes
/// nothing. With the default monotonic clock neither ever matters.
#[pyclass(
    frozen,
    subclass,
    dict,
    weakref,
    name = "KeyedRateLimiter",
    module = "protocol_in_code.qos.keyed"
)]
pub struct KeyedRateLimiter {
    /// One table per plan (one in all without plans), each with its own keys, registry and
    /// clock: a key's state under one plan is never seen by another.
    tables: Box<[PlanTable]>,
    /// Each plan's name and its table's index; `None` without plans.
    plans: Option<Box<[(String, usize)]>>,
    clock: Clock,
    lineage: Lineage,
}

/// One plan's keys: a table, the registry of its object keys, and the bands it limits by.
pub struct PlanTable {
    table: KeyedLimiter<Key>,
    registry: Registry,
    config: Config,
}

impl PlanTable {
    /// Run `decide` on the table key of `key`; `stores` says whether it may remember a new key.
    fn with_key<R>(
        &self,
        key: &Bound<'_, PyAny>,
        stores: bool,
        decide: impl FnOnce(&KeyRef<'_>) -> R,
    ) -> PyResult<R> {
        // A long key is digested under the gate: a restore may not re-seed the table between
        // its digest and its lookup.
        let seed = || self.table.seed();
        match classify(key)? {
            Classified::Plain(plain) => Ok(self.registry.with_plain(|| decide(&plain.kept(seed)))),
            Classified::Tuple(items) => Ok(self
                .registry
                .with_plain(|| decide(&KeyRef::Tuple(&items).kept(seed)))),
            Classified::Huge(bytes) => Ok(self
                .registry
                .with_plain(|| decide(&KeyRef::Huge(&bytes).kept(seed)))),
            Classified::Object => self.registry.with_object(key, &self.table, stores, decide),
        }
    }
}

/// A keyed limiter in this process: a part per plan, and keys of every kind Python hashes.
impl PyLimit for KeyedRateLimiter {
    type Core = KeyedLimiter<Key>;
    type Part = PlanTable;
    type Key<'a> = &'a Bound<'a, PyAny>;
    const NAME: &'static str = "KeyedRateLimiter";
    const CLOCK: OfClock = OfClock::Table;

    fn parts(&self) -> &[PlanTable] {
        &self.tables
    }

    fn plans(&self) -> Option<&[(String, usize)]> {
        self.plans.as_deref()
    }

    fn core<'a>(&'a self, part: &'a PlanTable) -> &'a KeyedLimiter<Key> {
        &part.table
    }

    fn config<'a>(&'a self, part: &'a PlanTable) -> &'a Config {
        &part.config
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    #[inline]
    fn with_key<R>(
        &self,
        part: &PlanTable,
        key: &Bound<'_, PyAny>,
        stores: bool,
        decide: impl for<'k> FnOnce(&'k KeyRef<'k>) -> R,
    ) -> PyResult<R> {
        part.with_key(key, stores, |key| decide(key))
    }

    fn lineage(&self, py: Python<'_>) -> PyResult<()> {
        self.lineage.check(py, Self::NAME)
    }

    fn reading_plain<R>(&self, part: &PlanTable, read: impl FnOnce() -> R) -> R {
        part.registry.with_plain(read)
    }
}

limiter_methods! { keyed: KeyedRateLimiter {
    #[new]
    #[pyo3(
        signature = (rate = None, *more, burst = None, per = None, bands = None, plans = None, max_keys = DEFAULT_MAX_KEYS, shards = None, clock = None),
        text_signature = "(rate=None, *, burst=None, per=None, bands=None, plans=None, max_keys=100000, shards=None, clock=None)"
    )]
    #[allow(clippy::too_many_arguments)] // the constructor's keywords are its interface
    fn __new__(
        py: Python<'_>,
        rate: Option<&Bound<'_, PyAny>>,
        more: &Bound<'_, PyTuple>,
        burst: Option<&Bound<'_, PyAny>>,
        per: Option<&Bound<'_, PyAny>>,
        bands: Option<&Bound<'_, PyAny>>,
        plans: Option<&Bound<'_, PyAny>>,
        max_keys: KeyCount,
        shards: Option<&Bound<'_, PyAny>>,
        clock: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        only_the_rate_by_position(Self::NAME, rate, more)?;
        let (names, configs) = read_limits(py, rate, burst, per, bands, plans)?;
        let KeyCount(max_keys) = max_keys;
        let shards = shards.map(|shards| count(shards, "shards")).transpose()?;
        let InProcess { max_keys, shards } = table_size::in_process(max_keys, shards)?;
        let tables = configs
            .into_iter()
            .map(|config| PlanTable {
                table: KeyedLimiter::new(&config.specs(), max_keys, shards)
                    .watching(Key::is_registered),
                registry: Registry::new(),
                config,
            })
            .collect();
        Ok(Self {
            tables,
            plans: names,
            clock: Clock::checked(py, clock)?,
            lineage: Lineage::new(),
        })
    }

    /// The keys remembered now (a snapshot); a key longer than 128 bytes as its `KeyDigest`.
    /// With plans, each key once, whichever plans it is remembered under.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut all = Vec::new();
        for plan in &self.tables {
            let keys = plan.registry.reading(|| plan.table.keys());
            for key in &keys {
                if let Some(key) = key_object(py, key.as_ref(), &plan.registry)? {
                    all.push(key);
                }
            }
        }
        if self.tables.len() > 1 {
            // A key under two plans is one key: kept once, in the order first seen.
            let seen = pyo3::types::PySet::empty(py)?;
            let mut once = Vec::with_capacity(all.len());
            for key in all {
                if !seen.contains(&key)? {
                    seen.add(&key)?;
                    once.push(key);
                }
            }
            all = once;
        }
        PyList::new(py, all)?.try_iter().map(Bound::into_any)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let this = slf.get();
        let py = slf.py();
        Ok(format!(
            "{}({}, max_keys={}, keys={})",
            slf.get_type().qualname()?,
            limits_repr(this, py)?,
            this.tables[0].table.max_keys(),
            crate::python::surface::tables::len(this)?
        ))
    }

    /// Pickle and copy: rebuilt from its configuration, then given back every remembered
    /// key's balances, the table's clock and its counts (with plans, each plan's table's).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        let first = &this.tables[0].table;
        let kwargs = pickled_kwargs(this, py)?;
        kwargs.set_item("max_keys", first.max_keys())?;
        kwargs.set_item("shards", first.shard_count())?;
        kwargs.set_item("clock", this.clock.callable(py))?;
        let state = if this.plans.is_none() {
            this.tables[0].saved(py, &this.clock)?
        } else {
            let tables = this
                .tables
                .iter()
                .map(|plan| plan.saved(py, &this.clock))
                .collect::<PyResult<Vec<_>>>()?;
            ("plans", tables).into_pyobject(py)?.into_any()
        };
        let state = with_attributes(slf.as_any(), state)?;
        Ok((rebuilder(slf.as_any(), &kwargs)?, PyTuple::empty(py), state))
    }

    /// Restore what `__reduce__` saved, into a table that has remembered nothing yet.
    /// Saved on another machine, or before a reboot, with the default clock, the table's times
    /// are moved to this clock (see `Clock::shift`): a restored table never waits longer than
    /// its balances need.
    fn __setstate__(
        slf: &Bound<'_, Self>,
        state: (Bound<'_, PyTuple>, Bound<'_, PyDict>),
    ) -> PyResult<()> {
        let (table, attributes) = state;
        let this = slf.get();
        let py = slf.py();
        if this.plans.is_none() {
            this.tables[0].restore_saved(py, &this.clock, &table)?;
        } else {
            let planned = table.len() == 2
                && table.get_item(0)?.extract::<String>().ok().as_deref() == Some("plans");
            if !planned {
                return Err(PyValueError::new_err(
                    "a keyed limiter with plans is restored from the state of one",
                ));
            }
            let tables: Vec<Bound<'_, PyTuple>> = table.get_item(1)?.extract()?;
            if tables.len() != this.tables.len() {
                return Err(PyValueError::new_err(
                    "the saved state has a different number of plans' tables",
                ));
            }
            for (plan, saved) in this.tables.iter().zip(&tables) {
                plan.restore_saved(py, &this.clock, saved)?;
            }
        }
        restore_attributes(slf.as_any(), &attributes)
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.clock.traverse(&visit)?;
        for plan in &self.tables {
            plan.registry.traverse(&visit)?;
        }
        Ok(())
    }
}}

impl PlanTable {
    /// What `__reduce__` saves of this table: its seed, every remembered key's balances, its
    /// clock, its counts and its clock's origin.
    fn saved<'py>(&self, py: Python<'py>, clock: &Clock) -> PyResult<Bound<'py, PyAny>> {
        let mut entries = Vec::new();
        let (saved, counts) = self
            .registry
            .reading(|| (self.table.entries(), self.table.stats()));
        for (key, limiter) in saved {
            // An object key keeps its number: its hash, so its shard, depends on it.
            let number = match key.as_ref() {
                KeyRef::Object(number) => Some(number),
                _ => None,
            };
            let Some(key) = key_object(py, key.as_ref(), &self.registry)? else {
                continue;
            };
            let balances: Vec<(u128, Option<i64>)> =
                limiter.iter().copied().map(Balance::into).collect();
            entries.push((key, number, balances));
        }
        let Stats {
            allowed,
            denied,
            refused,
            forgotten,
        } = counts;
        Ok((
            self.table.seed(),
            entries,
            self.table.latest(),
            (allowed, denied, refused, forgotten),
            clock.origin(),
        )
            .into_pyobject(py)?
            .into_any())
    }

    /// Restore one table's saved state (as `saved` made it).
    fn restore_saved(
        &self,
        py: Python<'_>,
        clock: &Clock,
        table: &Bound<'_, PyTuple>,
    ) -> PyResult<()> {
        if !(4..=5).contains(&table.len()) {
            return Err(PyValueError::new_err(
                "a keyed limiter's saved state has 5 parts (4 before its clock's origin was saved)",
            ));
        }
        let origin: Option<String> = match table.len() {
            4 => None,
            _ => table.get_item(4)?.extract()?,
        };
        let saved = (
            table.get_item(0)?.extract()?,
            table.get_item(1)?.extract()?,
            table.get_item(2)?.extract()?,
            table.get_item(3)?.extract()?,
        );
        self.restore(py, clock, saved, origin.as_deref())
    }

    /// Restore a saved table into this one, which must not have been used yet.
    #[allow(clippy::type_complexity)] // the saved state's shape, spelled out once
    fn restore(
        &self,
        py: Python<'_>,
        clock: &Clock,
        state: (
            (u64, u64),
            Vec<(Bound<'_, PyAny>, Option<u64>, Vec<(u128, Option<i64>)>)>,
            Option<i64>,
            (u64, u64, u64, u64),
        ),
        origin: Option<&str>,
    ) -> PyResult<()> {
        let (seed, saved, latest, (allowed, denied, refused, forgotten)) = state;
        let by = clock.shift(py, origin, latest)?;
        let latest = shifted(latest, by);
        let unused = || self.table.unused().map_err(PyErr::from);
        unused()?;
        // Everything is checked, and every key read (running any Python code it has), before
        // anything is registered or stored.
        let mut entries = Vec::new();
        let mut objects = Vec::new();
        for (key, number, balances) in saved {
            let balances = balances
                .into_iter()
                .map(|saved| Balance::from(saved).shifted(by))
                .collect();
            let limiter = self.table.saved_key(balances, latest)?;
            // Read as the saved table read it: a long key as its digest under the saved seed.
            match (classify(&key)?.into_key(seed), number) {
                // A number saved with a key now read natively (by an older version) is not
                // needed.
                (Some(plain), _) => entries.push((plain, limiter)),
                (None, Some(number)) => {
                    entries.push((Key::from(&KeyRef::Object(number)), limiter));
                    objects.push((key, number));
                }
                (None, None) => {
                    return Err(PyValueError::new_err(format!(
                        "the saved key {} does not match its saved number",
                        key.repr()?
                    )))
                }
            }
        }
        let objects = Registry::saved_objects(py, &objects)?;
        let counts = Stats {
            allowed,
            denied,
            refused,
            forgotten,
        };
        // The table is checked again, and re-seeded, with every call held off: one that
        // reached it meanwhile would be stored under the old seed, and lost.
        self.registry.restoring(py, objects, unused, || {
            self.table
                .restore(seed, entries, latest, counts)
                .map_err(PyErr::from)
        })
    }
}
