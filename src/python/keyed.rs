//! `protocol_in_code.qos.keyed` for Python: the keyed limiter of `core::exact::keyed`.
//!
//! Arguments are checked as the single limiter checks them (and before any key is looked at),
//! each key is turned into a table key by [`keys`](super::keys), and the table decides with no
//! Python code running under its locks. A whole trace of integer keys is decided with the
//! interpreter released, after every item has been read and checked, so a bad trace changes
//! nothing.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::config::Config;
use crate::core::exact::key::{plain_int, Key, KeyRef};
use crate::core::exact::keyed::{off_the_clock, Answer, KeyedDecision, KeyedLimiter, Stats};
use crate::core::exact::limiter::{Balances, Decision as CoreDecision};
use crate::core::exact::plans::Plans;
use crate::core::exact::rate::BandSpec;
use crate::core::exact::settle::Balance;
use crate::python::args::{count, tokens, NowNs, Timeout, N};
use crate::python::buffers::{code_array, IntBuffer};
use crate::python::clock::{shifted, Clock};
use crate::python::config::{
    bands_repr, bands_tuple, plans_dict, plans_repr, read_config, read_plans,
};
use crate::python::errors::{clock_error, never, OfClock};
use crate::python::fork::{self, Lineage};
use crate::python::keys::{classify, key_object, Classified, Registry};
use crate::python::limiter::{
    conveniences, max_wait_ns, only_the_rate_by_position, rebuilder, restore_attributes,
    with_attributes, Decision,
};
use crate::python::record::frozen_record;
use crate::python::waiting::{wait_for_turn, Reserved};

frozen_record! {
    /// What a keyed limiter has done since it was made: requests allowed, denied (including
    /// never), refused because the table was full, and keys forgotten.
    pub struct KeyedStats as "KeyedStats" in "protocol_in_code.qos.keyed" {
        allowed,
        denied,
        refused,
        forgotten,
    }
}

/// `max_keys` unless given.
const DEFAULT_MAX_KEYS: KeyCount = KeyCount(100_000);

/// A `max_keys` argument, checked as a count (so None, a bool or a float is refused).
#[derive(Clone, Copy)]
struct KeyCount(u64);

impl<'a, 'py> FromPyObject<'a, 'py> for KeyCount {
    type Error = PyErr;

    fn extract(value: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        count(&value, "max_keys").map(Self)
    }
}

/// The most shards a table may have: far more locks than threads gains nothing.
const MAX_SHARDS: u64 = 65_536;

/// The most shards a table is split into by default: enough that threads on different keys
/// rarely meet. (The shards share one count of keys, so their number does not change when a
/// new key is refused.)
const DEFAULT_SHARDS: u64 = 16;

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
struct PlanTable {
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

impl KeyedRateLimiter {
    /// The table of `plan`: the only one without plans (then `plan` must not be given), else
    /// the named plan's, which must be one of them.
    #[inline]
    fn plan(&self, plan: Option<&Bound<'_, PyAny>>) -> PyResult<&PlanTable> {
        match (&self.plans, plan) {
            (None, None) => Ok(&self.tables[0]),
            (plans, plan) => self.named(plans.as_deref(), plan),
        }
    }

    #[cold]
    fn named(
        &self,
        plans: Option<&[(String, usize)]>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<&PlanTable> {
        plan_index(plans, plan).map(|index| &self.tables[index])
    }

    /// The table of `plan` as a part of a stacked request (see `python::stack`), and the time
    /// of the call, checked against the table's clock. From here on no restore may re-seed the
    /// table: the stack hashes its key once, then decides under the shard's lock.
    pub(crate) fn stacked(
        &self,
        py: Python<'_>,
        plan: Option<&Bound<'_, PyAny>>,
        now_ns: Option<NowNs>,
    ) -> PyResult<(&KeyedLimiter<Key>, i64)> {
        let plan = self.plan(plan)?;
        let now = plan.registry.with_plain(|| self.clock.now(py, now_ns))?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        Ok((&plan.table, now))
    }

    /// A call's time, `now`, read from `now_ns` if given (else from the clock), unless it is
    /// too far from the table's clock to be a reading of it (see `MAX_CLOCK_GAP_NS`).
    /// The first call in a child process of the one that made the table warns (see `Lineage`).
    fn on_the_clock(
        &self,
        py: Python<'_>,
        plan: &PlanTable,
        now: i64,
        now_ns: Option<NowNs>,
    ) -> PyResult<i64> {
        self.lineage.check(py, "KeyedRateLimiter")?;
        match plan.table.off_the_clock(now) {
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
}

#[pymethods]
impl KeyedRateLimiter {
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
        only_the_rate_by_position("KeyedRateLimiter", rate, more)?;
        let (names, configs) = match plans {
            None => (None, vec![read_config(py, rate, burst, per, bands)?]),
            Some(plans) => {
                let Plans { names, configs } = read_plans(py, plans, rate, burst, per, bands)?;
                (Some(names.into_boxed_slice()), configs)
            }
        };
        let KeyCount(max_keys) = max_keys;
        if max_keys == 0 {
            return Err(PyValueError::new_err("max_keys must be at least 1, not 0"));
        }
        let shards = shards.map_or(Ok(DEFAULT_SHARDS.min(max_keys)), |s| count(s, "shards"))?;
        if !(1..=max_keys.min(MAX_SHARDS)).contains(&shards) {
            return Err(PyValueError::new_err(format!(
                "shards must be between 1 and max_keys ({max_keys}), at most {MAX_SHARDS}, not \
                 {shards}"
            )));
        }
        let too_many = |name: &str, value: u64| {
            PyValueError::new_err(format!(
                "{name}={value} is more than this machine can address"
            ))
        };
        let max_keys = usize::try_from(max_keys).map_err(|_| too_many("max_keys", max_keys))?;
        let shards = usize::try_from(shards).map_err(|_| too_many("shards", shards))?;
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

    /// Take `n` tokens for `key` if its every band holds them; True if taken, False if not
    /// (denied, or refused because the table is full). Raises ValueError if `n` exceeds a
    /// band's burst, since no wait would ever be enough.
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn try_acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let plan = self.plan(plan)?;
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        let decision = plan.with_key(key, true, |key| plan.table.acquire(key, n, now))?;
        match decision {
            KeyedDecision::Decided(CoreDecision::Allowed) => Ok(true),
            // No wait would ever be enough: a loop retrying on False would spin for ever.
            KeyedDecision::Decided(CoreDecision::Never) => Err(never(n)),
            _ => Ok(false),
        }
    }

    /// Take `n` tokens for `key` if allowed, and say exactly what happened: a Decision that is
    /// ALLOWED, DENIED (with the exact wait_ns), NEVER (n exceeds a burst) or REFUSED (a new
    /// key and a full table; wait_ns says when room may appear).
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn check<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, Decision>> {
        let plan = self.plan(plan)?;
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        let answer = plan.with_key(key, true, |key| plan.table.check(key, n, now))?;
        decision(py, answer)
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
        let plan = self.plan(plan)?;
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        let answer = plan.with_key(key, false, |key| plan.table.peek(key, n, now))?;
        decision(py, answer)
    }

    /// Give `n` tokens back to `key` (each band capped at its burst; a key not remembered is
    /// already full).
    #[pyo3(signature = (key, n = None, now_ns = None, *, plan = None), text_signature = "($self, key, n=1, now_ns=None, *, plan=None)")]
    fn refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let plan = self.plan(plan)?;
        let (n, now) = self.clock.request(py, n, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        plan.with_key(key, false, |key| plan.table.refund(key, n, now))
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
        let plan = self.plan(plan)?;
        let now = self.clock.now(py, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        plan.with_key(key, false, |key| plan.table.available(key, now))
    }

    /// Each band's whole tokens for `key` now, and the nanoseconds until it can give one more
    /// (for a full band, once it is spent from): `[(tokens, next_ns), ...]` in the order of
    /// `bands` (of `plan`'s, with plans). A key not remembered is full. Takes and stores
    /// nothing.
    #[pyo3(signature = (key, now_ns = None, *, plan = None))]
    fn band_levels(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        now_ns: Option<NowNs>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(u128, u128)>> {
        let plan = self.plan(plan)?;
        let now = self.clock.now(py, now_ns)?;
        let now = self.on_the_clock(py, plan, now, now_ns)?;
        let levels = plan.with_key(key, false, |key| plan.table.levels(key, now))?;
        Ok(levels.iter().map(|l| (l.tokens, l.next_ns)).collect())
    }

    /// Take `n` tokens for `key`, sleeping (without holding the interpreter) until allowed.
    /// True once taken, or False at once if they would only be there after `timeout` seconds;
    /// ValueError if `n` exceeds a burst.
    ///
    /// Waiters on one key are served in the order they arrive: each reserves its tokens at the
    /// moment they will be there, and whoever comes later queues behind it, so a large request
    /// is never starved by small ones. A refusal (a new key and a full table) sleeps until room
    /// may appear and tries again, within `timeout`. Ctrl-C ends the wait with
    /// KeyboardInterrupt (signals are looked at every 50 ms), and the waiter gives its tokens
    /// back. The sleep assumes the limiter's clock keeps pace with real time, as a monotonic
    /// clock does.
    #[pyo3(signature = (key, n = None, timeout = None, *, plan = None), text_signature = "($self, key, n=1, timeout=None, *, plan=None)")]
    fn acquire(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        timeout: Option<Timeout>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let plan = self.plan(plan)?;
        let n = tokens(n);
        // The key is read at each attempt: its registered form is looked up each time.
        wait_for_turn(
            py,
            "KeyedRateLimiter",
            max_wait_ns(timeout),
            |left| self.reserve(py, plan, key, n, left),
            |at| self.clock.until(py, at),
            |turn| self.give_back(py, plan, key, n, turn),
        )
    }

    /// Reserve `n` tokens for `key` as `acquire` does, without sleeping, for `acquire_async`:
    /// `(True, at_ns)` once reserved (the time, on the limiter's clock, from which they are the
    /// caller's), `(False, retry_ns)` if refused (a new key and a full table: try again after
    /// that long), or None, taking nothing, if they would only be there after `timeout`
    /// seconds. Raises ValueError if `n` exceeds a burst.
    #[pyo3(signature = (key, n = None, timeout = None, *, plan = None))]
    fn _reserve(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: Option<N>,
        timeout: Option<Timeout>,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<(bool, i128)>> {
        let plan = self.plan(plan)?;
        let n = tokens(n);
        Ok(self
            .reserve(py, plan, key, n, max_wait_ns(timeout))?
            .for_python())
    }

    /// Give back `n` tokens that `_reserve` booked for `key` at `at_ns` and that were not
    /// used (a cancelled waiter): undone if no waiter on the key queued behind them, else
    /// forfeited, so nobody is ever let in before a turn already promised (see
    /// `KeyedLimiter::give_back`).
    #[pyo3(signature = (key, n, at_ns, *, plan = None))]
    fn _give_back(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        n: N,
        at_ns: i64,
        plan: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let plan = self.plan(plan)?;
        let N(n) = n;
        let now = self.clock.now(py, None)?;
        let now = self.on_the_clock(py, plan, now, None)?;
        plan.with_key(key, false, |key| plan.table.give_back(key, n, now, at_ns))
    }

    /// Nanoseconds from the limiter's clock until `at_ns` (0 once it is there).
    fn _until(&self, py: Python<'_>, at_ns: i64) -> PyResult<u128> {
        self.clock.until(py, at_ns)
    }

    /// Decide a whole trace of integer keys: request `i` is `n[i]` tokens (or `n` for each, 1
    /// by default) for `keys[i]` at `now_ns[i]`. Returns an `array('B')` of outcome codes (0
    /// allowed, 1 denied, 2 never, 3 refused), exactly what `check` would have said one call at
    /// a time, with the same effect. Any buffer of integers works (numpy, array.array,
    /// memoryview), or a list. A bad trace raises, naming the index, and changes nothing.
    #[pyo3(signature = (keys, now_ns, n = None, *, plan = None))]
    fn try_acquire_many<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        now_ns: &Bound<'py, PyAny>,
        n: Option<&Bound<'py, PyAny>>,
        plan: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let plan = self.plan(plan)?;
        let keys = IntBuffer::new(keys, "keys")?;
        let times = IntBuffer::new(now_ns, "now_ns")?;
        let length = keys.len();
        let counts = match n.filter(|n| !n.is_none()) {
            None => Counts::Each(1),
            // A single number (an int, a numpy integer: not iterable) is the count for all.
            Some(n) if n.is_instance_of::<PyInt>() || !is_iterable(n)? => {
                Counts::Each(count(n, "n")?)
            }
            Some(n) => Counts::Items(IntBuffer::new(n, "n")?),
        };
        let counts_length = match &counts {
            Counts::Items(buffer) => Some(buffer.len()),
            Counts::Each(_) => None,
        };
        if times.len() != length || counts_length.is_some_and(|c| c != length) {
            return Err(PyValueError::new_err(format!(
                "keys ({length}), now_ns ({}){} must have the same length",
                times.len(),
                counts_length.map_or_else(String::new, |c| format!(" and n ({c})"))
            )));
        }
        // Every int a buffer holds (from -2**63 to 2**64 - 1) is a plain key, as `check` sees
        // it; each is made one when its turn comes, so the trace is copied once, compactly.
        let keys: Vec<i128> = keys.narrowed("keys", "be a 64-bit int")?;
        let times: Vec<i64> = times.narrowed("now_ns", "fit in 64 bits")?;
        // Each time is checked against the table's clock as it will be when its turn comes.
        let mut clock = plan.table.latest();
        for (index, &now) in times.iter().enumerate() {
            if let Some(gap) = clock.and_then(|latest| off_the_clock(latest, now)) {
                return Err(clock_error(
                    OfClock::Table,
                    &format!("now_ns[{index}]"),
                    now,
                    gap,
                ));
            }
            clock = Some(clock.map_or(now, |latest| latest.max(now)));
        }
        let counts = match counts {
            Counts::Each(n) => Counts::Each(n),
            Counts::Items(buffer) => {
                Counts::Items(buffer.narrowed("n", "be between 0 and 2**64 - 1")?)
            }
        };
        let mut codes = Vec::with_capacity(length);
        fork::detach(py, || {
            let requests = (0..length).map(|i| {
                let key = plain_int(keys[i]);
                (key, counts.at(i), times[i])
            });
            // Waited for with the interpreter released: only a restore holds it long.
            plan.registry.with_plain(|| {
                plan.table
                    .acquire_many::<KeyRef<'_>, _>(requests, |decision| codes.push(code(decision)));
            });
        });
        code_array(py, codes.into_iter())
    }

    /// What the table has done: a KeyedStats(allowed, denied, refused, forgotten); with plans,
    /// the sums over every plan's table.
    #[getter]
    fn stats(&self, py: Python<'_>) -> PyResult<KeyedStats> {
        let mut sum = Stats::default();
        for plan in &self.tables {
            let Stats {
                allowed,
                denied,
                refused,
                forgotten,
            } = plan.table.stats();
            sum.allowed += allowed;
            sum.denied += denied;
            sum.refused += refused;
            sum.forgotten += forgotten;
        }
        stats_record(py, sum)
    }

    /// The most keys the table remembers at once (with plans, each plan's table).
    #[getter]
    fn max_keys(&self) -> usize {
        self.tables[0].table.max_keys()
    }

    /// The bands every key is limited by, each a `Band` as it was written. A limiter with
    /// plans has no bands of its own: it raises AttributeError, pointing to `plans`.
    #[getter]
    fn bands<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        match &self.plans {
            None => bands_tuple(py, &self.tables[0].config),
            Some(names) => Err(no_bands("KeyedRateLimiter", names)),
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

    /// How many keys are remembered now (with plans, in every plan's table: a key remembered
    /// under two plans counts twice).
    fn __len__(&self) -> usize {
        self.tables.iter().map(|plan| plan.table.len()).sum()
    }

    /// Always True, however many keys are remembered. Without it an empty table would be
    /// false through `__len__`, and `limiter or KeyedRateLimiter(...)` would quietly put a new
    /// table in place of one that simply has no throttled client at the moment.
    fn __bool__(_slf: &Bound<'_, Self>) -> bool {
        true
    }

    /// Whether `key` is remembered now (a key not remembered is full); with plans, under any
    /// plan.
    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        for plan in &self.tables {
            if plan.with_key(key, false, |key| plan.table.contains(key))? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The keys remembered now (a snapshot); a key longer than 128 bytes as its `KeyDigest`.
    /// With plans, each key once, whichever plans it is remembered under.
    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut all = Vec::new();
        for plan in &self.tables {
            let keys = plan.registry.reading(|| plan.table.keys());
            for key in &keys {
                if let Some(key) = key_object(py, key, &plan.registry)? {
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
        let limits = match &this.plans {
            None => format!("bands={}", bands_repr(py, &this.tables[0].config)?),
            Some(names) => format!("plans={}", plans_repr(py, names, &this.configs())?),
        };
        Ok(format!(
            "{}({limits}, max_keys={}, keys={})",
            slf.get_type().qualname()?,
            this.tables[0].table.max_keys(),
            this.__len__()
        ))
    }

    /// Pickle and copy: rebuilt from its configuration, then given back every remembered
    /// key's balances, the table's clock and its counts (with plans, each plan's table's).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let this = slf.get();
        let kwargs = PyDict::new(py);
        let first = &this.tables[0].table;
        match &this.plans {
            None => kwargs.set_item("bands", bands_tuple(py, &this.tables[0].config)?)?,
            Some(names) => kwargs.set_item("plans", plans_dict(py, names, &this.configs())?)?,
        }
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

    /// Take `n` tokens for `key`, awaiting (asyncio) until allowed. True once taken, False at
    /// once if they would only be there after `timeout` seconds; ValueError if `n` exceeds a
    /// burst. Served in order of arrival, as `acquire`; a cancelled waiter gives its tokens
    /// back. A refusal (full table) awaits until room may appear, then tries again.
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

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        self.clock.traverse(&visit)?;
        for plan in &self.tables {
            plan.registry.traverse(&visit)?;
        }
        Ok(())
    }
}

/// A table's counts as the Python record.
pub fn stats_record(py: Python<'_>, stats: Stats) -> PyResult<KeyedStats> {
    let Stats {
        allowed,
        denied,
        refused,
        forgotten,
    } = stats;
    Ok(KeyedStats::from_fields(
        allowed.into_py_any(py)?,
        denied.into_py_any(py)?,
        refused.into_py_any(py)?,
        forgotten.into_py_any(py)?,
    ))
}

impl KeyedRateLimiter {
    /// Reserve `n` tokens for `key` at the clock's time, `max_wait` nanoseconds from it at
    /// most (see `KeyedLimiter::reserve`).
    fn reserve(
        &self,
        py: Python<'_>,
        plan: &PlanTable,
        key: &Bound<'_, PyAny>,
        n: u64,
        max_wait: u128,
    ) -> PyResult<Reserved> {
        let now = self.clock.now(py, None)?;
        let now = self.on_the_clock(py, plan, now, None)?;
        let reservation =
            plan.with_key(key, true, |key| plan.table.reserve(key, n, now, max_wait))?;
        Reserved::of_keyed(reservation, now, n)
    }

    /// A waiter that stops waiting (interrupted, or its clock failed) gives back the `n`
    /// tokens it reserved for `key` at `reserved_ns` for `at_ns` (see
    /// `KeyedLimiter::give_back`).
    fn give_back(
        &self,
        py: Python<'_>,
        plan: &PlanTable,
        key: &Bound<'_, PyAny>,
        n: u64,
        turn: (i64, i64),
    ) {
        let (reserved_ns, at_ns) = turn;
        let now = self.clock.now(py, None).unwrap_or(reserved_ns);
        let now = self
            .on_the_clock(py, plan, now, None)
            .unwrap_or(reserved_ns);
        // A key that cannot be read again keeps its reservation: the error still goes on.
        let _ = plan.with_key(key, false, |key| plan.table.give_back(key, n, now, at_ns));
    }

    /// Every table's configuration, by the index the plans name.
    fn configs(&self) -> Vec<&Config> {
        self.tables.iter().map(|plan| &plan.config).collect()
    }
}

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
            let number = match key {
                Key::Object(number) => Some(number),
                _ => None,
            };
            let Some(key) = key_object(py, &key, &self.registry)? else {
                continue;
            };
            let balances: Vec<_> = limiter
                .iter()
                .map(|balance| (balance.units, balance.settled_at))
                .collect();
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
        let unused = || {
            if self.table.is_empty() && self.table.latest().is_none() {
                Ok(())
            } else {
                Err(PyValueError::new_err(
                    "a keyed limiter's state can only be restored into a new limiter",
                ))
            }
        };
        unused()?;
        // Everything is checked, and every key read (running any Python code it has), before
        // anything is registered or stored.
        let specs = self.table.specs();
        let mut entries = Vec::new();
        let mut objects = Vec::new();
        for (key, number, balances) in saved {
            let balances = balances
                .into_iter()
                .map(|(units, at)| (units, shifted(at, by)))
                .collect();
            let limiter = saved_limiter(specs, balances, latest)?;
            // Read as the saved table read it: a long key as its digest under the saved seed.
            match (classify(&key)?.into_key(seed), number) {
                // A number saved with a key now read natively (by an older version) is not
                // needed.
                (Some(plain), _) => entries.push((plain, limiter)),
                (None, Some(number)) => {
                    entries.push((Key::Object(number), limiter));
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

/// A saved key's limiter, checked against the bands and the table's saved clock.
fn saved_limiter(
    specs: &[BandSpec],
    balances: Vec<(u128, Option<i64>)>,
    latest: Option<i64>,
) -> PyResult<Balances> {
    if balances.len() != specs.len() {
        return Err(PyValueError::new_err(
            "the saved state has a different number of bands",
        ));
    }
    let bands = specs
        .iter()
        .zip(balances)
        .map(|(&spec, (units, settled_at))| {
            if units > spec.capacity_units() {
                return Err(PyValueError::new_err(
                    "a saved balance exceeds its band's burst",
                ));
            }
            // A key is stored only by a call, so a table with a key has a clock. A key with a
            // waiter is settled ahead of it, at the end of its reservations, but never as far
            // as a time read on another clock would be.
            if settled_at.is_some_and(|at| {
                latest.is_none_or(|latest| off_the_clock(latest, at).is_some_and(|gap| gap > 0))
            }) {
                return Err(PyValueError::new_err(
                    "a saved balance is settled later than the saved table's clock allows",
                ));
            }
            Ok(Balance { units, settled_at })
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(bands.into())
}

/// Whether `value` can be iterated: False only for a TypeError from `iter()`, so that any
/// other error (a KeyboardInterrupt in `__iter__`) reaches the caller.
pub fn is_iterable(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    match value.try_iter() {
        Ok(_) => Ok(true),
        Err(error) if error.is_instance_of::<pyo3::exceptions::PyTypeError>(value.py()) => {
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// The tokens of each request in a trace: one count for all, or one each (a buffer, then its
/// values).
enum Counts<Items> {
    Each(u64),
    Items(Items),
}

impl Counts<Vec<u64>> {
    fn at(&self, index: usize) -> u64 {
        match self {
            Self::Each(n) => *n,
            Self::Items(items) => items[index],
        }
    }
}

/// The Python answer for a table's answer.
pub fn decision(py: Python<'_>, answer: Answer) -> PyResult<Bound<'_, Decision>> {
    let Answer {
        decision,
        remaining,
    } = answer;
    match decision {
        KeyedDecision::Decided(decided) => Decision::new(py, decided, remaining),
        KeyedDecision::Refused { retry_in } => Decision::build(py, 3, Some(retry_in), 0),
    }
}

/// A decision's `LimitOutcome` code, as in `try_acquire_many`'s array.
pub fn code(decision: KeyedDecision) -> u8 {
    match decision {
        KeyedDecision::Decided(CoreDecision::Allowed) => 0,
        KeyedDecision::Decided(CoreDecision::Wait(_)) => 1,
        KeyedDecision::Decided(CoreDecision::Never) => 2,
        KeyedDecision::Refused { .. } => 3,
    }
}

/// The index of the table of `plan`, among `plans` (each a name and its table's index): the
/// only table, 0, without plans (then `plan` must not be given); else the named plan's, which
/// must be one of them.
pub fn plan_index(
    plans: Option<&[(String, usize)]>,
    plan: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    let shown = |plan: &Bound<'_, PyAny>| {
        plan.repr()
            .map_or_else(|_| "?".into(), |shown| shown.to_string())
    };
    match (plans, plan) {
        (None, None) => Ok(0),
        (None, Some(plan)) => Err(PyTypeError::new_err(format!(
            "plan={} was given, but this limiter has no plans: give it \
             plans={{name: rate or bands, ...}} to limit each key by its plan",
            shown(plan)
        ))),
        (Some(names), None) => Err(PyTypeError::new_err(format!(
            "plan= is required: this limiter's plans are {}",
            Plans::listed(names)
        ))),
        (Some(names), Some(plan)) => {
            let Ok(text) = plan.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "plan must be a str naming one of this limiter's plans ({}), not {}",
                    Plans::listed(names),
                    shown(plan)
                )));
            };
            Plans::index_of(names, &text.to_cow()?).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown plan {}: this limiter's plans are {}",
                    shown(plan),
                    Plans::listed(names)
                ))
            })
        }
    }
}

/// What `bands` raises on a limiter with plans.
pub fn no_bands(class: &str, names: &[(String, usize)]) -> PyErr {
    pyo3::exceptions::PyAttributeError::new_err(format!(
        "a {class} with plans has no bands of its own: read .plans, each plan's bands ({})",
        Plans::listed(names)
    ))
}
