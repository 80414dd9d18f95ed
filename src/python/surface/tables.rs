//! What only the keyed classes have: their keys, their counts, their plans, and whole traces.
//!
//! `KeyedRateLimiter` and `SharedKeyedRateLimiter` hold keys in a table per plan; the core's
//! [`KeyedLimit`] answers for each table, and these functions sum or search over the plans.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt};
use pyo3::IntoPyObjectExt;

use super::PyLimit;
use crate::core::exact::keyed::Stats;
use crate::core::exact::limit::{Counts, KeyedLimit, TraceLengths};
use crate::python::args::{count, is_iterable};
use crate::python::buffers::{code_array, IntBuffer};
use crate::python::config::plans_dict;
use crate::python::errors::{clock_error, OfClock};
use crate::python::fork;
use crate::python::record::frozen_record;

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

/// `try_acquire_many`: decide a whole trace of integer keys, request `i` being `n[i]` tokens
/// (or `n` for each, 1 by default) for `keys[i]` at `now_ns[i]`, with the interpreter released
/// once every item has been read and checked: a bad trace raises, naming the index, and
/// changes nothing. An `array('B')` of outcome codes (see `KeyedDecision::code`).
pub fn try_acquire_many<'py, L: PyLimit>(
    this: &L,
    py: Python<'py>,
    keys: &Bound<'py, PyAny>,
    now_ns: &Bound<'py, PyAny>,
    n: Option<&Bound<'py, PyAny>>,
    plan: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>>
where
    L::Core: KeyedLimit,
{
    let part = this.part(plan)?;
    let keys = IntBuffer::new(keys, "keys")?;
    let times = IntBuffer::new(now_ns, "now_ns")?;
    let length = keys.len();
    let counts = match n.filter(|n| !n.is_none()) {
        None => None,
        // A single number (an int, a numpy integer: not iterable) is the count for all.
        Some(n) if n.is_instance_of::<PyInt>() || !is_iterable(n)? => Some(Err(count(n, "n")?)),
        Some(n) => Some(Ok(IntBuffer::new(n, "n")?)),
    };
    let counts_length = match &counts {
        Some(Ok(buffer)) => Some(buffer.len()),
        _ => None,
    };
    TraceLengths::check(length, times.len(), counts_length)?;
    // Every int a buffer holds (from -2**63 to 2**64 - 1) is a plain key, as `check` reads it;
    // each is made one when its turn comes, so the trace is copied once, compactly.
    let keys: Vec<i128> = keys.narrowed("keys", "be a 64-bit int")?;
    let times: Vec<i64> = times.narrowed("now_ns", "fit in 64 bits")?;
    let counts = match counts {
        None => Counts::Each(1),
        Some(Err(n)) => Counts::Each(n),
        Some(Ok(buffer)) => Counts::Items(buffer.narrowed("n", "be between 0 and 2**64 - 1")?),
    };
    let core = this.core(part);
    let mut codes = Vec::with_capacity(length);
    let decided = fork::detach(py, || {
        this.reading_plain(part, || {
            core.acquire_trace(&keys, &counts, &times, |decision| {
                codes.push(decision.code());
            })
        })
    });
    decided.map_err(|(index, gap)| {
        clock_error(
            OfClock::Table,
            &format!("now_ns[{index}]"),
            times[index],
            gap,
        )
    })?;
    code_array(py, codes.into_iter())
}

/// `stats`: what the table has decided, a `KeyedStats`; with plans, the sums over every plan's.
pub fn stats<L: PyLimit>(this: &L, py: Python<'_>) -> PyResult<KeyedStats>
where
    L::Core: KeyedLimit,
{
    let mut sum = Stats::default();
    for part in this.parts() {
        this.intact(part)?;
        sum.add(&this.core(part).stats());
    }
    let Stats {
        allowed,
        denied,
        refused,
        forgotten,
    } = sum;
    Ok(KeyedStats::from_fields(
        allowed.into_py_any(py)?,
        denied.into_py_any(py)?,
        refused.into_py_any(py)?,
        forgotten.into_py_any(py)?,
    ))
}

/// `len()`: how many keys are held now (with plans, in every plan's table: a key held under
/// two plans counts twice).
pub fn len<L: PyLimit>(this: &L) -> PyResult<usize>
where
    L::Core: KeyedLimit,
{
    let mut len = 0;
    for part in this.parts() {
        this.intact(part)?;
        len += this.core(part).held();
    }
    Ok(len)
}

/// `key in limiter`: whether `key` is held now (a key not held is full); with plans, under any
/// plan.
pub fn contains<L: PyLimit>(this: &L, key: L::Key<'_>) -> PyResult<bool>
where
    L::Core: KeyedLimit,
{
    for part in this.parts() {
        this.intact(part)?;
        let core = this.core(part);
        if this.with_key(part, key, false, |key| core.contains(key))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `max_keys`: the most keys a table holds at once (with plans, each plan's table).
pub fn max_keys<L: PyLimit>(this: &L) -> usize
where
    L::Core: KeyedLimit,
{
    this.core(&this.parts()[0]).capacity()
}

/// `plans`: each plan's bands, a dict of plan name to a tuple of `Band`; None without plans.
pub fn plans<'py, L: PyLimit>(this: &L, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let configs: Vec<_> = this.parts().iter().map(|part| this.config(part)).collect();
    this.plans()
        .map(|names| plans_dict(py, names, &configs))
        .transpose()
}
