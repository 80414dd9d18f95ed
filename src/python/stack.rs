//! `_check_together` for Python: one request under several limiters of this host (in-process,
//! or shared by its processes), decided by `core::exact::stack` (taken from all of them or from
//! none).
//!
//! Each part is read as its limiter's own `check` reads its arguments, in the same order (the
//! plan, `n`, the time, the key), and every part is read before anything is decided, so a bad
//! part raises with nothing taken. An error names its part in a note.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyModule, PyTuple};
use pyo3::PyTypeInfo;

use std::sync::Mutex;

use crate::core::exact::key::{Key, KeyRef};
use crate::core::exact::keyed::KeyedLimiter;
use crate::core::exact::keyed::{Answer, KeyedDecision};
use crate::core::exact::limiter::Limiter;
use crate::core::exact::shared::Table;
use crate::core::exact::shared::THE_KEY;
use crate::core::exact::stack::{combined, decide_together, ClockGap, Limit, Part, Then};
use crate::python::args::{tokens, NowNs, N};
use crate::python::decision::{Decision, LIMIT_OUTCOME};
use crate::python::errors::{clock_error, off_the_clock, OfClock};
use crate::python::keyed::KeyedRateLimiter;
use crate::python::keys::{classify, Classified};
use crate::python::limiter::RateLimiter;
use crate::python::record::{defaults, frozen_record};
use crate::python::shared::{key_digest, SharedKeyedRateLimiter, SharedRateLimiter};
use crate::python::surface::PyLimit;
use crate::shared_memory::Mapped;

frozen_record! {
    /// A stacked request, decided: the request's Decision, and each part's (a tuple). True
    /// when allowed (every part took its tokens), as a Decision is. `leases` holds the seats
    /// its in-flight parts took, one Lease per such part in the request's order (empty when
    /// refused): `release()`, or leaving a `with` (`async with`) block, gives them all back.
    pub struct Stacked as "Stacked" in "protocol_in_code.qos.stack" {
        decision,
        parts,
        leases = defaults::empty_tuple(),
    }
    text_signature = "(decision, parts, leases=())";
    methods {
        /// Whether the request was allowed: every part took its tokens.
        #[getter]
        fn allowed(&self, py: Python<'_>) -> PyResult<bool> {
            let decision = self.decision.bind(py).cast::<Decision>()?;
            let allowed = LIMIT_OUTCOME.member(py, 0)?;
            Ok(decision.get().outcome.bind(py).is(allowed.bind(py)))
        }

        fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
            self.allowed(py)
        }

        /// Give back the seats of every lease, the last first (twice is harmless). A lease
        /// given back by awaiting (an asyncio limiter's) needs `await release_async()`.
        fn release(&self, py: Python<'_>) -> PyResult<()> {
            leases_given_back(py, "release", self.leases.bind(py))?;
            Ok(())
        }

        /// Awaitable: give back the seats of every lease, awaiting those given back so; run to
        /// its end even if the awaiting task is cancelled meanwhile.
        fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            leases_given_back(py, "release_async", self.leases.bind(py))
        }

        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
            slf
        }

        #[pyo3(signature = (*_exc_info))]
        fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, PyTuple>) -> PyResult<()> {
            self.release(py)
        }

        fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            leases_given_back(slf.py(), "itself_async", slf.as_any())
        }

        #[pyo3(signature = (*_exc_info))]
        fn __aexit__<'py>(
            &self,
            py: Python<'py>,
            _exc_info: &Bound<'py, PyTuple>,
        ) -> PyResult<Bound<'py, PyAny>> {
            self.release_async(py)
        }
    }
}

/// `protocol_in_code.qos._seat_parts.<name>(argument)`: how a stacked request's leases are
/// given back (written once, in Python, for leases of every store).
fn leases_given_back<'py>(
    py: Python<'py>,
    name: &str,
    argument: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("protocol_in_code.qos._seat_parts")?.unbind())
    })?;
    module.bind(py).call_method1(name, (argument,))
}

/// One part, read: its limit, the time it is asked at, and its tokens.
struct Read<'a> {
    limit: Limit<'a, Key, Mapped>,
    now: i64,
    n: u64,
}

/// Decide `parts`, each a `(limiter, key, n, plan)` of a `RateLimiter` or `SharedRateLimiter`
/// (key and plan None), a `KeyedRateLimiter` or a `SharedKeyedRateLimiter`, together: a
/// `Stacked`, the request's decision and one per part; `None` if some part's limiter is of
/// another kind (nothing is read or decided then). If every part
/// allows, every part's tokens are taken and each decision is what its `check` would say;
/// otherwise nothing is taken and each decision is what its `peek` would say. With `peek`,
/// nothing is taken either way (the request's decision says what would be). With `refused`,
/// nothing is taken and the keyed tables count the request as refused: another store's part
/// of it refused it (`Then::Refuse`).
#[pyfunction]
#[pyo3(
    name = "_check_together",
    signature = (parts, now_ns = None, peek = false, refused = false)
)]
pub fn check_together<'py>(
    py: Python<'py>,
    parts: &Bound<'py, PyList>,
    now_ns: Option<NowNs>,
    peek: bool,
    refused: bool,
) -> PyResult<Option<Bound<'py, Stacked>>> {
    let then = match (peek, refused) {
        (false, false) => Then::Take,
        (true, false) => Then::Peek,
        (false, true) => Then::Refuse,
        (true, true) => {
            return Err(PyValueError::new_err(
                "peek and refused: a peek counts nothing, a refusal is counted; give one",
            ))
        }
    };
    let parts: Vec<Bound<'py, PyTuple>> = parts
        .iter()
        .map(|part| part.cast_into::<PyTuple>().map_err(PyErr::from))
        .collect::<PyResult<_>>()?;
    for part in &parts {
        if !of_this_host(part.get_borrowed_item(0)?)? {
            return Ok(None);
        }
    }
    // Each part's limiter and key, held here: what is read borrows from them.
    let limiters: Vec<Bound<'py, PyAny>> = parts
        .iter()
        .map(|p| p.get_item(0))
        .collect::<PyResult<_>>()?;
    let keys: Vec<Bound<'py, PyAny>> = parts
        .iter()
        .map(|p| p.get_item(1))
        .collect::<PyResult<_>>()?;
    let mut read = Vec::with_capacity(parts.len());
    let mut classified = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let (n, plan) = (part.get_item(2)?, part.get_item(3)?);
        let one = read_part(py, &limiters[index], &keys[index], &n, &plan, now_ns)
            .map_err(|error| in_part(py, error, index))?;
        classified.push(one.1);
        read.push(one.0);
    }
    // The keys, borrowed from what was read, each as its table keeps it.
    let kept: Vec<Option<KeyRef<'_>>> = classified
        .iter()
        .zip(&read)
        .map(|(key, part)| {
            let Limit::Keyed(table) = &part.limit else {
                return None;
            };
            key.as_ref()
                .and_then(Classified::as_key)
                .map(|key| key.kept(|| table.seed()))
        })
        .collect();
    let core_parts: Vec<Part<'_, Key, KeyRef<'_>, Mapped>> = read
        .into_iter()
        .zip(&kept)
        .map(|(part, key)| Part {
            limit: part.limit,
            key: key.as_ref(),
            n: part.n,
            now_ns: part.now,
        })
        .collect();
    let stacked = decide_together(&core_parts, then).map_err(|ClockGap { part, gap }| {
        let what = if now_ns.is_some() {
            "now_ns"
        } else {
            "the clock's reading"
        };
        in_part(
            py,
            clock_error(OfClock::Limiter, what, core_parts[part].now_ns, gap),
            part,
        )
    })?;
    let request = combined(&stacked.answers).ok_or_else(no_parts)?;
    let decisions = stacked
        .answers
        .into_iter()
        .map(|answer| Decision::of(py, answer))
        .collect::<PyResult<Vec<_>>>()?;
    let made = Stacked::make(
        py,
        Decision::of(py, request)?.into_any(),
        PyTuple::new(py, decisions)?.into_any(),
        PyTuple::empty(py).into_any(),
    )?;
    Ok(Some(made))
}

/// The request's decision from its parts' decisions, made apart (by limiters of several
/// stores): see `core::exact::stack::combined`.
#[pyfunction]
#[pyo3(name = "_combined")]
pub fn combined_py<'py>(
    py: Python<'py>,
    decisions: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, Decision>> {
    let answers = decisions
        .try_iter()?
        .map(|decision| Ok::<_, PyErr>(decision?.cast_into::<Decision>()?))
        .collect::<PyResult<Vec<_>>>()?;
    let answers = answers
        .iter()
        .map(|decision| answer_of(py, decision.get()))
        .collect::<PyResult<Vec<_>>>()?;
    Decision::of(py, combined(&answers).ok_or_else(no_parts)?)
}

/// A decision made in Python (by any limiter) read back as the core's answer.
fn answer_of(py: Python<'_>, decision: &Decision) -> PyResult<Answer> {
    let outcome = decision.outcome.bind(py);
    let index = (0..4)
        .map(|index| LIMIT_OUTCOME.member(py, index))
        .position(|member| member.is_ok_and(|member| outcome.is(member.bind(py))))
        .ok_or_else(|| PyTypeError::new_err("a decision's outcome must be a LimitOutcome"))?;
    let code = u8::try_from(index).expect("one of four outcomes");
    Ok(Answer {
        decision: KeyedDecision::from_code(code, || decision.wait_ns.bind(py).extract())?,
        remaining: decision.remaining.bind(py).extract()?,
    })
}

fn no_parts() -> PyErr {
    pyo3::exceptions::PyValueError::new_err("parts: a stacked request needs at least one part")
}

/// One part read as its limiter's `check` reads its arguments, and its key classified (`None`
/// but for a keyed table in this process, whose key is hashed once the table is known).
fn read_part<'a, 'py>(
    py: Python<'py>,
    limiter: &'a Bound<'py, PyAny>,
    key: &'a Bound<'py, PyAny>,
    n: &Bound<'py, PyAny>,
    plan: &Bound<'py, PyAny>,
    now_ns: Option<NowNs>,
) -> PyResult<(Read<'a>, Option<Classified<'a>>)> {
    let args = (key, n, plan, now_ns);
    if let Ok(limiter) = limiter.cast::<RateLimiter>() {
        return read(py, limiter.get(), args);
    }
    if let Ok(limiter) = limiter.cast::<KeyedRateLimiter>() {
        return read(py, limiter.get(), args);
    }
    if let Ok(limiter) = limiter.cast::<SharedRateLimiter>() {
        return read(py, limiter.get(), args);
    }
    let limiter = limiter
        .cast::<SharedKeyedRateLimiter>()
        .expect("every part's limiter was checked to be of this host");
    read(py, limiter.get(), args)
}

/// [`read_part`] for a limiter of class `L`: the plan, `n` and the time, read as every call of
/// `L` reads them (`surface`), then the part's limit for its key.
fn read<'a, 'py, L: Stacks>(
    py: Python<'py>,
    limiter: &'a L,
    (key, n, plan, now_ns): (
        &'a Bound<'py, PyAny>,
        &Bound<'py, PyAny>,
        &Bound<'py, PyAny>,
        Option<NowNs>,
    ),
) -> PyResult<(Read<'a>, Option<Classified<'a>>)> {
    let plan = (!plan.is_none()).then_some(plan);
    if L::ONE_LIMIT && (!key.is_none() || plan.is_some()) {
        return Err(PyTypeError::new_err(format!(
            "a {} is one limit: its part takes no key and no plan",
            L::NAME
        )));
    }
    let part = limiter.part(plan)?;
    let n = tokens(n.extract::<Option<N>>()?);
    let now = limiter.reading_plain(part, || limiter.clock().now(py, now_ns))?;
    limiter.lineage(py)?;
    let core = limiter.core(part);
    if let Some(gap) = L::clock_gap(core, now) {
        return Err(off_the_clock(L::CLOCK, now_ns.is_some(), now, gap));
    }
    let (limit, key) = L::limit(core, key)?;
    Ok((Read { limit, now, n }, key))
}

/// A part's limit, and its key classified where the table hashes it later.
type PartLimit<'a> = (Limit<'a, Key, Mapped>, Option<Classified<'a>>);

/// A limiter class whose parts a stacked request can hold: its core limiter as one of the
/// core stack's limits.
trait Stacks: PyLimit {
    /// Whether it is one limit, whose part takes no key and no plan.
    const ONE_LIMIT: bool;

    /// How far `now` is from a table's clock, if too far. A limiter of one limit puts the time
    /// on its clock when it decides, under its lock (`stack::decide_together`).
    fn clock_gap(_core: &Self::Core, _now: i64) -> Option<i128> {
        None
    }

    /// The part's limit for `key`.
    fn limit<'a>(core: &'a Self::Core, key: &'a Bound<'_, PyAny>) -> PyResult<PartLimit<'a>>;
}

impl Stacks for RateLimiter {
    const ONE_LIMIT: bool = true;

    fn limit<'a>(core: &'a Mutex<Limiter>, _: &'a Bound<'_, PyAny>) -> PyResult<PartLimit<'a>> {
        Ok((Limit::One(core), None))
    }
}

impl Stacks for KeyedRateLimiter {
    const ONE_LIMIT: bool = false;

    fn clock_gap(core: &KeyedLimiter<Key>, now: i64) -> Option<i128> {
        core.off_the_clock(now)
    }

    fn limit<'a>(
        core: &'a KeyedLimiter<Key>,
        key: &'a Bound<'_, PyAny>,
    ) -> PyResult<PartLimit<'a>> {
        let classified = classify(key)?;
        if matches!(classified, Classified::Object) {
            return Err(PyTypeError::new_err(format!(
                "a stacked request's keys are values (int, float, str, bytes, or tuples of \
                 these), not {}",
                key.get_type().name()?
            )));
        }
        Ok((Limit::Keyed(core), Some(classified)))
    }
}

impl Stacks for SharedRateLimiter {
    const ONE_LIMIT: bool = true;

    fn clock_gap(core: &Table<Mapped>, now: i64) -> Option<i128> {
        core.off_the_clock(now)
    }

    fn limit<'a>(core: &'a Table<Mapped>, _: &'a Bound<'_, PyAny>) -> PyResult<PartLimit<'a>> {
        Ok((Limit::Shared(core, THE_KEY), None))
    }
}

impl Stacks for SharedKeyedRateLimiter {
    const ONE_LIMIT: bool = false;

    fn clock_gap(core: &Table<Mapped>, now: i64) -> Option<i128> {
        core.off_the_clock(now)
    }

    fn limit<'a>(core: &'a Table<Mapped>, key: &'a Bound<'_, PyAny>) -> PyResult<PartLimit<'a>> {
        Ok((Limit::Shared(core, key_digest(core, key)?), None))
    }
}

/// Whether `limiter` is one of this host's, which `_check_together` decides: a shared limiter,
/// or a `RateLimiter` or `KeyedRateLimiter` that keeps its native `check` (a subclass with a
/// `check` of its own is asked through it, as a limiter of another kind is). Python groups a
/// stacked request's parts by this same answer.
fn of_this_host(limiter: Borrowed<'_, '_, PyAny>) -> PyResult<bool> {
    Ok(limiter.is_instance_of::<SharedRateLimiter>()
        || limiter.is_instance_of::<SharedKeyedRateLimiter>()
        || decided_natively::<RateLimiter>(limiter)?
        || decided_natively::<KeyedRateLimiter>(limiter)?)
}

/// [`of_this_host`] for Python.
#[pyfunction]
#[pyo3(name = "_of_this_host")]
pub fn of_this_host_py(limiter: &Bound<'_, PyAny>) -> PyResult<bool> {
    of_this_host(limiter.as_borrowed())
}

/// Whether `limiter` is a `T` whose decisions this call may make itself: a `T`, or a subclass
/// that keeps `T`'s `check` (one that has its own is asked through it, in Python).
fn decided_natively<T: PyTypeInfo>(limiter: Borrowed<'_, '_, PyAny>) -> PyResult<bool> {
    if limiter.is_exact_instance_of::<T>() {
        return Ok(true);
    }
    if !limiter.is_instance_of::<T>() {
        return Ok(false);
    }
    let py = limiter.py();
    let check = intern!(py, "check");
    Ok(limiter
        .get_type()
        .getattr(check)?
        .is(T::type_object(py).getattr(check)?))
}

/// `error`, with a note saying which part of the request raised it.
fn in_part(py: Python<'_>, error: PyErr, index: usize) -> PyErr {
    let note = format!("in part {index} of a stacked request");
    // A note is only a help: if adding it fails, the error itself still stands.
    let _ = error.value(py).call_method1("add_note", (note,));
    error
}
