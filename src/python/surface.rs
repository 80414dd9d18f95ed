//! Every limiter's Python methods, written once.
//!
//! Four classes put a limiter in Python's hands: `RateLimiter` and `KeyedRateLimiter` in this
//! process, `SharedRateLimiter` and `SharedKeyedRateLimiter` shared by the processes of one
//! host. They take the same calls (`try_acquire`, `check`, `peek`, `refund`, `available`,
//! `band_levels`, a blocking `acquire` and an awaitable one), read their arguments the same way
//! and answer with the same `Decision`s, because the core decides for all four through one trait,
//! [`Limit`]. What differs is only how a class reaches the core limiter it decides on, and
//! [`PyLimit`] is that:
//!
//! * **which core limiter** a call decides on: its plan's table, for a class with plans;
//! * **the clock** a call reads when it is given no time;
//! * **the key**: how a Python key becomes the core's (none, a table key, or a digest).
//!
//! Each class implements [`PyLimit`]; the functions here are the methods' bodies, written once
//! over it, in the order every call takes: the plan, the time, the key, then the core's one step
//! (its clock, then its decision). [`methods`] writes the `#[pymethods]` that call them into each
//! class, and [`tables`] holds what only the keyed classes have.

pub mod methods;
pub mod tables;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyModule, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::core::exact::config::Config;
use crate::core::exact::keyed::KeyedDecision;
use crate::core::exact::limit::{Limit, OffTheClock};
use crate::core::exact::limiter::Decision as CoreDecision;
use crate::core::exact::plans::{Named, Plans};
use crate::core::exact::waiting::{max_wait_ns, NeverEnough, Reserved};
use crate::python::args::{tokens, ActualCost, NowNs, ReservedCost, Timeout, N};
use crate::python::clock::Clock;
use crate::python::config::{bands_tuple, plans_dict};
use crate::python::decision::Decision;
use crate::python::errors::{off_the_clock, shown, OfClock};
use crate::python::waiting::wait_for_turn;

/// A limiter class, as its methods reach the core. `Sync`, as a frozen class is, so that a
/// trace can be decided with the interpreter released.
pub trait PyLimit: Sync {
    /// The core limiter a call decides on.
    type Core: Limit + Sync;
    /// What a call reaches once its plan is known: a core limiter and what the class keeps
    /// beside it (its configuration, its keys' objects). One per plan.
    type Part: Sync;
    /// How a Python call names its key: `()` for a limiter of one key, the key object for a
    /// keyed one.
    type Key<'a>: Copy;
    /// The class's name, for errors and warnings.
    const NAME: &'static str;
    /// Whose clock a time too far from it is said to be far from.
    const CLOCK: OfClock;

    /// Every part: one per plan (one in all without plans), by the index the plans name.
    fn parts(&self) -> &[Self::Part];

    /// Each plan's name and its part's index; `None` without plans.
    fn plans(&self) -> Option<&[(String, usize)]> {
        None
    }

    /// The core limiter of `part`.
    fn core<'a>(&'a self, part: &'a Self::Part) -> &'a Self::Core;

    /// The bands of `part`, as configured.
    fn config<'a>(&'a self, part: &'a Self::Part) -> &'a Config;

    /// The clock a call reads when it is given no time.
    fn clock(&self) -> &Clock;

    /// Run `decide` on the core's key for `key` in `part`. `stores` says whether the call may
    /// remember a new key (the keyed table registers a new object key only then).
    ///
    /// # Errors
    ///
    /// A key the part cannot hold (a shared table's key must be a value).
    fn with_key<R>(
        &self,
        part: &Self::Part,
        key: Self::Key<'_>,
        stores: bool,
        decide: impl for<'k> FnOnce(<Self::Core as Limit>::Key<'k>) -> R,
    ) -> PyResult<R>;

    /// Before a call decides: warn if this limiter was made before a fork and is used in the
    /// child (see `fork::Lineage`). Nothing for a shared limiter, which is made for that.
    ///
    /// # Errors
    ///
    /// The warning, where warnings are errors.
    fn lineage(&self, _py: Python<'_>) -> PyResult<()> {
        Ok(())
    }

    /// Run `read` while a trace's plain keys are read (the keyed table holds off a restore
    /// meanwhile).
    fn reading_plain<R>(&self, _part: &Self::Part, read: impl FnOnce() -> R) -> R {
        read()
    }

    /// Whether `part`'s state can be read whole (a shared table's file, not truncated).
    ///
    /// # Errors
    ///
    /// What is wrong with it.
    fn intact(&self, _part: &Self::Part) -> PyResult<()> {
        Ok(())
    }

    /// The part of `plan`: the only one without plans (then `plan` must not be given), else
    /// the named plan's, which must be one of them.
    ///
    /// # Errors
    ///
    /// A plan given without plans, missing with them, or not one of them.
    #[inline]
    fn part(&self, plan: Option<&Bound<'_, PyAny>>) -> PyResult<&Self::Part> {
        match (self.plans(), plan) {
            (None, None) => Ok(&self.parts()[0]),
            (plans, plan) => plan_index(plans, plan).map(|index| &self.parts()[index]),
        }
    }
}

/// The core's key type of a class.
type CoreKey<'k, L> = <<L as PyLimit>::Core as Limit>::Key<'k>;

/// One call on `key` under `plan`, at `now_ns` (else the clock's reading): `ask` run on the
/// core limiter with the core's key and the time. `stores` as for [`PyLimit::with_key`].
fn call<L: PyLimit, R>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    now_ns: Option<NowNs>,
    stores: bool,
    ask: impl for<'k> FnOnce(&L::Core, CoreKey<'k, L>, i64) -> Result<R, OffTheClock>,
) -> PyResult<R> {
    let part = this.part(plan)?;
    call_on(this, py, part, key, now_ns, stores, ask)
}

/// [`call`] on a part already chosen.
fn call_on<L: PyLimit, R>(
    this: &L,
    py: Python<'_>,
    part: &L::Part,
    key: L::Key<'_>,
    now_ns: Option<NowNs>,
    stores: bool,
    ask: impl for<'k> FnOnce(&L::Core, CoreKey<'k, L>, i64) -> Result<R, OffTheClock>,
) -> PyResult<R> {
    let now = this.clock().now(py, now_ns)?;
    this.lineage(py)?;
    let core = this.core(part);
    this.with_key(part, key, stores, |key| ask(core, key, now))?
        .map_err(|gap| off_the_clock(L::CLOCK, now_ns.is_some(), now, gap))
}

/// `try_acquire`: take `n` tokens if allowed; `True` if taken. `Never` (more than a burst) is
/// an error: a loop retrying on `False` would spin for ever.
pub fn try_acquire<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    now_ns: Option<NowNs>,
) -> PyResult<bool> {
    let n = tokens(n);
    let decided = call(this, py, key, plan, now_ns, true, |core, key, now| {
        core.acquire(key, n, now)
    })?;
    match decided {
        KeyedDecision::Decided(CoreDecision::Allowed) => Ok(true),
        KeyedDecision::Decided(CoreDecision::Never) => Err(NeverEnough { n }.into()),
        _ => Ok(false),
    }
}

/// `check`: take `n` tokens if allowed, and say what happened.
pub fn check<'py, L: PyLimit>(
    this: &L,
    py: Python<'py>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    now_ns: Option<NowNs>,
) -> PyResult<Bound<'py, Decision>> {
    let n = tokens(n);
    let answer = call(this, py, key, plan, now_ns, true, |core, key, now| {
        core.check(key, n, now)
    })?;
    Decision::of(py, answer)
}

/// `peek`: what `check` would answer, taking nothing.
pub fn peek<'py, L: PyLimit>(
    this: &L,
    py: Python<'py>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    now_ns: Option<NowNs>,
) -> PyResult<Bound<'py, Decision>> {
    let n = tokens(n);
    let answer = call(this, py, key, plan, now_ns, false, |core, key, now| {
        core.peek(key, n, now)
    })?;
    Decision::of(py, answer)
}

/// `refund`: give `n` tokens back.
pub fn refund<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    now_ns: Option<NowNs>,
) -> PyResult<()> {
    let n = tokens(n);
    call(this, py, key, plan, now_ns, false, |core, key, now| {
        core.refund(key, n, now)
    })
}

/// `settle`: a cost taken as `reserved` tokens is now known to be `actual`. Only an overage
/// can make a key worth remembering.
pub fn settle<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    ReservedCost(reserved): ReservedCost,
    ActualCost(actual): ActualCost,
    now_ns: Option<NowNs>,
) -> PyResult<()> {
    call(
        this,
        py,
        key,
        plan,
        now_ns,
        actual > reserved,
        |core, key, now| core.settle_cost(key, reserved, actual, now),
    )
}

/// `available`: the whole tokens held now.
pub fn available<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    now_ns: Option<NowNs>,
) -> PyResult<u128> {
    call(this, py, key, plan, now_ns, false, |core, key, now| {
        core.available(key, now)
    })
}

/// `band_levels`: each band's whole tokens now, and the nanoseconds until it gives one more.
pub fn band_levels<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    now_ns: Option<NowNs>,
) -> PyResult<Vec<(u128, u128)>> {
    let levels = call(this, py, key, plan, now_ns, false, |core, key, now| {
        core.levels(key, now)
    })?;
    Ok(levels.iter().map(|l| (l.tokens, l.next_ns)).collect())
}

/// The blocking `acquire`: reserve `n` tokens, then sleep until they are there (see
/// `waiting::wait_for_turn`). The key is read again at each attempt (an object key's registered
/// form is looked up each time).
pub fn acquire<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    timeout: Option<Timeout>,
) -> PyResult<bool> {
    let part = this.part(plan)?;
    let n = tokens(n);
    wait_for_turn(
        py,
        L::NAME,
        max_wait_ns(timeout.map(|Timeout(wait)| wait)),
        |left| reserve_on(this, py, part, key, n, left),
        |at| this.clock().until(py, at),
        |reserved_ns, at_ns| give_up(this, py, part, key, n, reserved_ns, at_ns),
    )
}

/// Reserve `n` tokens at the clock's time, `max_wait` nanoseconds from it at most: what
/// `acquire` waits for, and what `_reserve` tells `acquire_async`.
pub fn reserve<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: Option<N>,
    timeout: Option<Timeout>,
) -> PyResult<Reserved> {
    let part = this.part(plan)?;
    reserve_on(
        this,
        py,
        part,
        key,
        tokens(n),
        max_wait_ns(timeout.map(|Timeout(wait)| wait)),
    )
}

fn reserve_on<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    part: &L::Part,
    key: L::Key<'_>,
    n: u64,
    max_wait: u128,
) -> PyResult<Reserved> {
    let (now, reservation) = call_on(this, py, part, key, None, true, |core, key, now| {
        Ok((now, core.reserve(key, n, now, max_wait)?))
    })?;
    Ok(Reserved::of_keyed(reservation, now, n)?)
}

/// `_give_back`: hand back `n` tokens reserved for `at_ns` and not used (a cancelled waiter):
/// undone if no waiter queued behind them, else forfeited, so nobody is ever let in before a
/// turn already promised.
pub fn give_back<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    key: L::Key<'_>,
    plan: Option<&Bound<'_, PyAny>>,
    n: N,
    at_ns: i64,
) -> PyResult<()> {
    let N(n) = n;
    call(this, py, key, plan, None, false, |core, key, now| {
        core.give_back(key, n, now, at_ns)
    })
}

/// A blocking waiter that stops waiting (interrupted, or its clock failed) hands back the `n`
/// tokens it reserved at `reserved_ns` for `at_ns`, as of now, or as of the reservation if the
/// clock cannot be read or is off. A key that cannot be read again keeps its reservation: the
/// error that stopped the wait goes on either way.
fn give_up<L: PyLimit>(
    this: &L,
    py: Python<'_>,
    part: &L::Part,
    key: L::Key<'_>,
    n: u64,
    reserved_ns: i64,
    at_ns: i64,
) {
    let now = this.clock().now(py, None).unwrap_or(reserved_ns);
    let core = this.core(part);
    let _ = this.with_key(part, key, false, |key| {
        core.give_back(key, n, now, at_ns)
            .or_else(|_| core.give_back(key, n, reserved_ns, at_ns))
    });
}

/// `acquire_async`: the coroutine of `_conveniences` that reserves through `_reserve`, awaits
/// `_until` and gives back through `_give_back` if cancelled. A bad plan raises here, not when
/// the coroutine first runs.
pub fn acquire_async<'py, L: PyLimit>(
    this: &L,
    slf: &Bound<'py, PyAny>,
    key: Option<&Bound<'py, PyAny>>,
    plan: Option<&Bound<'py, PyAny>>,
    n: Option<Bound<'py, PyAny>>,
    timeout: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    this.part(plan)?;
    let n = n.map_or_else(|| 1.into_bound_py_any(py), Ok)?;
    let conveniences = conveniences(py)?;
    match key {
        None => conveniences.call_method1("await_reserved", (slf, &n, timeout)),
        Some(key) => conveniences.call_method1("await_reserved_for", (slf, key, &n, timeout, plan)),
    }
}

/// `bands`: the bands, each a `Band` as it was written. A limiter with plans has none of its
/// own: `AttributeError`, pointing to `plans`.
pub fn bands<'py, L: PyLimit>(this: &L, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
    match this.plans() {
        None => bands_tuple(py, this.config(&this.parts()[0])),
        Some(names) => Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "a {} with plans has no bands of its own: read .plans, each plan's bands ({})",
            L::NAME,
            Plans::listed(names)
        ))),
    }
}

/// The keywords a pickle rebuilds `this` from, beginning with its limits (see [`limits`]); each
/// class adds its own (its clock, its table's size, its file's folder).
pub fn pickled_kwargs<'py, L: PyLimit>(this: &L, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let kwargs = PyDict::new(py);
    let (keyword, limits) = limits(this, py)?;
    kwargs.set_item(keyword, limits)?;
    Ok(kwargs)
}

/// The keyword, and its value, that a pickle rebuilds the limits of `this` from: `bands`, a
/// tuple of `Band`, or with plans `plans`, a dict of plan name to one.
fn limits<'py, L: PyLimit>(
    this: &L,
    py: Python<'py>,
) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
    let configs: Vec<&Config> = this.parts().iter().map(|part| this.config(part)).collect();
    Ok(match this.plans() {
        None => ("bands", bands_tuple(py, configs[0])?.into_any()),
        Some(names) => ("plans", plans_dict(py, names, &configs)?.into_any()),
    })
}

/// The limits of `this` as its repr shows them: `bands=[Band(...), ...]` (a list, as a caller
/// writes it), or `plans={'free': (Band(...),), ...}`.
pub fn limits_repr<L: PyLimit>(this: &L, py: Python<'_>) -> PyResult<String> {
    let (keyword, value) = limits(this, py)?;
    let shown = match value.cast::<PyTuple>() {
        Ok(bands) => PyList::new(py, bands)?.repr()?,
        Err(_) => value.repr()?,
    };
    Ok(format!("{keyword}={shown}"))
}

/// The index of the part of `plan`, among `plans` (each a name and its part's index): see
/// `Plans::chosen`.
#[cold]
pub fn plan_index(
    plans: Option<&[(String, usize)]>,
    plan: Option<&Bound<'_, PyAny>>,
) -> PyResult<usize> {
    // A plan's text is read only where there are plans to find it among.
    let text = plan
        .filter(|_| plans.is_some())
        .and_then(|plan| plan.cast::<PyString>().ok())
        .map(PyStringMethods::to_cow)
        .transpose()?;
    let named = match (plan, &text) {
        (None, _) => Named::Not,
        (Some(_), Some(text)) => Named::Text(text),
        (Some(_), None) => Named::Other,
    };
    let shown = || plan.map(shown).unwrap_or_default();
    Ok(Plans::chosen(plans, named, shown)?)
}

/// The module that gives the limiters their asyncio and decorator forms, written in Python.
pub fn conveniences(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    Ok(MODULE
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("protocol_in_code.qos._conveniences")?.unbind())
        })?
        .bind(py))
}
