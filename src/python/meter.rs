//! `protocol_in_code.qos.meter` for Python: the three-colour meters of `core::meter`.
//!
//! Each meter class holds its core meter behind a mutex (plain Rust state: no Python code runs
//! while it is locked). `mark` colours one packet; `mark_many` colours a whole trace from any
//! buffer of integers (numpy arrays, `array.array`, `memoryview`, or a plain list): it copies
//! the buffers, then marks them with the interpreter released, holding the meter for the whole
//! trace so that single marks from other threads queue behind it instead of starving it.

use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::core::exact::settle::Balance;
use crate::core::meter::bucket::ByteRate;
use crate::core::meter::rfc4115::Rfc4115;
use crate::core::meter::srtcm::SrTcm;
use crate::core::meter::trace::{mark_trace, same_lengths};
use crate::core::meter::trtcm::TrTcm;
use crate::core::meter::{Color, Meter};
use crate::python::args::{count, fraction_class, nanoseconds, rational, rational_object, NowNs};
use crate::python::buffers::{code_array, IntBuffer};
use crate::python::clock::Clock;
use crate::python::enums::StrEnum;
use crate::python::fork;

/// The colours, in the order of their codes in `mark_many`'s arrays (0, 1, 2).
pub static COLOR: StrEnum = StrEnum::new(
    "Color",
    "protocol_in_code.qos.meter",
    "A packet's colour: GREEN (within the committed rate), YELLOW (within the excess or peak \
     allowance) or RED (beyond both). In arrays, 0, 1 and 2.",
    &[("GREEN", "Green"), ("YELLOW", "Yellow"), ("RED", "Red")],
);

/// A `Color` member (or its value string) as a core colour.
fn color_of(value: &Bound<'_, PyAny>) -> PyResult<Color> {
    let py = value.py();
    for color in Color::ALL {
        if value.eq(COLOR.member(py, usize::from(color.code()))?)? {
            return Ok(color);
        }
    }
    Err(PyValueError::new_err(format!(
        "color must be a Color (or None for colour-blind marking), not {}",
        value.repr()?
    )))
}

/// A core meter shared between threads, with its clock.
///
/// The meter's lock is taken with the interpreter held, or inside a detached section that a
/// fork waits for (see `fork`), never in between: a fork from another thread then never copies
/// it held. `mark_many` reads the caller's buffers first, with the interpreter held, and then
/// takes the lock and marks the whole trace in one detached section.
struct Shared<M> {
    meter: Mutex<M>,
    clock: Clock,
}

impl<M: Meter + Clone + Send> Shared<M> {
    fn new(meter: M, clock: Clock) -> Self {
        Self {
            meter: Mutex::new(meter),
            clock,
        }
    }

    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, M> {
        // A mark either completes or does not start, so a poisoned lock guards a whole meter.
        loop {
            match self.meter.try_lock() {
                Ok(meter) => return meter,
                Err(TryLockError::Poisoned(poisoned)) => return poisoned.into_inner(),
                // Busy (a trace is being marked): wait until it is free with the interpreter
                // released, then take it with the interpreter held.
                Err(TryLockError::WouldBlock) => fork::detach(py, || drop(self.meter.lock())),
            }
        }
    }

    fn mark<'py>(
        &self,
        py: Python<'py>,
        nbytes: &Bound<'py, PyAny>,
        now_ns: Option<NowNs>,
        color: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let bytes = count(nbytes, "nbytes")?;
        let arrived = color.filter(|c| !c.is_none()).map(color_of).transpose()?;
        let now = self.clock.now(py, now_ns)?;
        let marked = self.lock(py).mark(bytes, now, arrived);
        COLOR.member(py, usize::from(marked.code()))
    }

    fn mark_many<'py>(
        &self,
        py: Python<'py>,
        sizes: &Bound<'py, PyAny>,
        times_ns: &Bound<'py, PyAny>,
        colors: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sizes = IntBuffer::new(sizes, "sizes")?;
        let times = IntBuffer::new(times_ns, "times_ns")?;
        let colors = colors
            .filter(|c| !c.is_none())
            .map(|c| IntBuffer::new(c, "colors"))
            .transpose()?;
        same_lengths(
            sizes.len(),
            times.len(),
            colors.as_ref().map(IntBuffer::len),
        )?;
        let trace = Trace::read(&sizes, &times, colors.as_ref())?;
        let marked = fork::detach(py, || {
            let mut meter = self.meter.lock().unwrap_or_else(PoisonError::into_inner);
            mark_trace(
                &mut *meter,
                &trace.sizes,
                &trace.times,
                trace.colors.as_deref(),
            )
        })?;
        code_array(py, marked.iter().map(|&color| color.code()))
    }

    /// The level of the bucket at `index` as bytes: an int, or a Fraction when not whole.
    fn level<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyAny>> {
        let (units, per_byte) = self.lock(py).buckets()[index].1.level();
        if units % per_byte == 0 {
            return Ok((units / per_byte).into_pyobject(py)?.into_any());
        }
        fraction_class(py)?.call1((units, per_byte))
    }

    fn repr(&self, py: Python<'_>, head: String) -> PyResult<String> {
        let names: Vec<_> = self.lock(py).buckets().map(|(name, _)| name).to_vec();
        let mut text = head;
        for (i, name) in names.iter().enumerate() {
            text = format!("{text}, {name}={}", self.level(py, i)?.repr()?);
        }
        text.push(')');
        Ok(text)
    }

    /// Each bucket's balance, as a pickle keeps it (see `Meter::balances`).
    fn state(&self, py: Python<'_>) -> Vec<(u128, Option<i64>)> {
        let balances = self.lock(py).balances();
        balances.map(Balance::into).to_vec()
    }

    /// A pickle's balances put back, all or none (see `Meter::restore`).
    fn restore(&self, py: Python<'_>, state: Vec<(u128, Option<i64>)>) -> PyResult<()> {
        let saved: Vec<Balance> = state.into_iter().map(Balance::from).collect();
        self.lock(py).restore(&saved).map_err(PyErr::from)
    }
}

/// A trace read from the caller's buffers. They are copied once, with the interpreter held (so
/// no Python code changes them while they are read), and then marked in one go with it
/// released: taking the interpreter back part-way would make the trace wait behind any other
/// busy Python thread.
struct Trace {
    sizes: Vec<u64>,
    times: Vec<i64>,
    colors: Option<Vec<Color>>,
}

impl Trace {
    fn read(sizes: &IntBuffer, times: &IntBuffer, colors: Option<&IntBuffer>) -> PyResult<Self> {
        let sizes: Vec<u64> = sizes.narrowed("sizes", "be between 0 and 2**64 - 1")?;
        let colors = colors
            .map(|colors| colors.narrowed("colors", "be 0 (green), 1 (yellow) or 2 (red)"))
            .transpose()?;
        let times: Vec<i64> = times.narrowed("times_ns", "fit in 64 bits")?;
        Ok(Self {
            sizes,
            times,
            colors,
        })
    }
}

/// A rate argument: bytes per second, exact, possibly zero; with its normalized Python value.
fn rate(py: Python<'_>, value: &Bound<'_, PyAny>, name: &str) -> PyResult<(ByteRate, Py<PyAny>)> {
    let (numerator, denominator) = rational(py, value, name)?;
    let rate = ByteRate::new(numerator, denominator).map_err(PyErr::from)?;
    let shown = rational_object(py, rate.numerator, rate.denominator)?;
    Ok((rate, shown.unbind()))
}

/// A size argument: whole bytes.
fn size(py: Python<'_>, value: &Bound<'_, PyAny>, name: &str) -> PyResult<(u64, Py<PyAny>)> {
    let bytes = count(value, name)?;
    Ok((bytes, bytes.into_pyobject(py)?.into_any().unbind()))
}

/// Defines a meter pyclass: its constructor, and mark, mark_many, levels, repr and pickle.
macro_rules! meter_class {
    (
        $(#[doc = $doc:expr])*
        $rust:ident as $name:literal, core $core:ty,
        params ($($arg:ident: $kind:ident),+),
        build = |$start:ident| $build:expr,
        text_signature = $text:literal,
        levels ($first:ident, $second:ident),
    ) => {
        $(#[doc = $doc])*
        #[pyclass(frozen, name = $name, module = "protocol_in_code.qos.meter")]
        pub struct $rust {
            shared: Shared<$core>,
            /// The constructor's arguments, normalized, in order: for repr and pickle.
            config: Vec<(&'static str, Py<PyAny>)>,
        }

        #[pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = ($($arg),+, *, start_ns = None, clock = None), text_signature = $text)]
            fn __new__(
                py: Python<'_>,
                $($arg: &Bound<'_, PyAny>,)+
                start_ns: Option<&Bound<'_, PyAny>>,
                clock: Option<Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                let mut config = Vec::new();
                $(
                    let ($arg, shown) = $kind(py, $arg, stringify!($arg))?;
                    config.push((stringify!($arg), shown));
                )+
                let $start = start_ns.map(|t| nanoseconds(t, "start_ns")).transpose()?;
                let meter: $core = $build.map_err(PyErr::from)?;
                Ok(Self {
                    shared: Shared::new(meter, Clock::new(clock)?),
                    config,
                })
            }

            /// Settle the buckets to `now_ns` (default: the clock) and colour a packet of
            /// `nbytes` bytes; colour-aware when `color` is the colour it arrived with.
            #[pyo3(signature = (nbytes, now_ns = None, color = None))]
            fn mark(
                &self,
                py: Python<'_>,
                nbytes: &Bound<'_, PyAny>,
                now_ns: Option<NowNs>,
                color: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Py<PyAny>> {
                self.shared.mark(py, nbytes, now_ns, color)
            }

            /// Colour a whole trace: `sizes[i]` bytes at `times_ns[i]` (and arrived as
            /// `colors[i]`: 0 green, 1 yellow, 2 red), in order. Returns an `array('B')` of
            /// colour codes, the same colours `mark` would give one packet at a time. Any
            /// buffer of integers works (numpy, array.array, memoryview), or a list. A bad trace
            /// raises, naming the index, and the meter is left as it was.
            #[pyo3(signature = (sizes, times_ns, colors = None))]
            fn mark_many<'py>(
                &self,
                py: Python<'py>,
                sizes: &Bound<'py, PyAny>,
                times_ns: &Bound<'py, PyAny>,
                colors: Option<&Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                self.shared.mark_many(py, sizes, times_ns, colors)
            }

            /// The first bucket's level in bytes (exact: an int, or a Fraction).
            #[getter]
            fn $first<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shared.level(py, 0)
            }

            /// The second bucket's level in bytes (exact: an int, or a Fraction).
            #[getter]
            fn $second<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shared.level(py, 1)
            }

            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                let py = slf.py();
                let this = slf.get();
                let parts = this
                    .config
                    .iter()
                    .map(|(name, value)| Ok(format!("{name}={}", value.bind(py).repr()?)))
                    .collect::<PyResult<Vec<_>>>()?;
                let head = format!("{}({}", slf.get_type().qualname()?, parts.join(", "));
                this.shared.repr(py, head)
            }

            /// Pickle and copy: rebuilt from its arguments and clock, then given its levels.
            fn __reduce__<'py>(
                slf: &Bound<'py, Self>,
            ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>, Bound<'py, PyList>)> {
                let py = slf.py();
                let this = slf.get();
                let kwargs = pyo3::types::PyDict::new(py);
                for (name, value) in &this.config {
                    kwargs.set_item(*name, value.bind(py))?;
                }
                kwargs.set_item("clock", this.shared.clock.callable(py))?;
                let rebuild = py
                    .import("functools")?
                    .getattr("partial")?
                    .call((slf.get_type(),), Some(&kwargs))?;
                Ok((rebuild, PyTuple::empty(py), PyList::new(py, this.shared.state(py))?))
            }

            fn __setstate__(&self, py: Python<'_>, state: Vec<(u128, Option<i64>)>) -> PyResult<()> {
                self.shared.restore(py, state)
            }

            fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
                for (_, value) in &self.config {
                    visit.call(value)?;
                }
                self.shared.clock.traverse(&visit)
            }
        }
    };
}

meter_class! {
    /// RFC 2697, the single rate three colour marker: rate `cir` (bytes per second) fills the
    /// committed bucket (`cbs` bytes), whose overflow fills the excess bucket (`ebs` bytes).
    /// Levels: `tc`, `te`.
    SingleRateMeter as "SingleRateMeter", core SrTcm,
    params (cir: rate, cbs: size, ebs: size),
    build = |start| SrTcm::new(cir, cbs, ebs, start),
    text_signature = "(cir, cbs, ebs, *, start_ns=None, clock=None)",
    levels (tc, te),
}

meter_class! {
    /// RFC 2698, the two rate three colour marker: the committed bucket (`cir`, `cbs`) and
    /// the peak bucket (`pir`, `pbs`), independent. Levels: `tp`, `tc`.
    TwoRateMeter as "TwoRateMeter", core TrTcm,
    params (cir: rate, cbs: size, pir: rate, pbs: size),
    build = |start| TrTcm::new(cir, cbs, pir, pbs, start),
    text_signature = "(cir, cbs, pir, pbs, *, start_ns=None, clock=None)",
    levels (tp, tc),
}

meter_class! {
    /// RFC 4115: committed (`cir`, `cbs`) and excess (`eir`, `ebs`) buckets filling
    /// independently, decided like RFC 2697; either rate may be 0. Levels: `tc`, `te`.
    ExcessRateMeter as "ExcessRateMeter", core Rfc4115,
    params (cir: rate, cbs: size, eir: rate, ebs: size),
    build = |start| Rfc4115::new(cir, cbs, eir, ebs, start),
    text_signature = "(cir, cbs, eir, ebs, *, start_ns=None, clock=None)",
    levels (tc, te),
}
