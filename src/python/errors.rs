//! The one place where what went wrong in the core becomes a Python exception.
//!
//! Each core error is a Rust enum; here each of its kinds is given one Python exception type
//! (`ValueError` for a value no call could use, `TypeError` for a call written wrongly,
//! `OSError` for what the file system said), and a message in Python's terms where the core's
//! own `Display` would name Rust's. Arguments are checked at the door (`args.rs`), before the
//! core sees them: their errors are not here.

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::core::exact::clock_gap::MAX_CLOCK_GAP_NS;
use crate::core::exact::config::ConfigError;
use crate::core::exact::keyed::RestoreError;
use crate::core::exact::limit::TraceLengths;
use crate::core::exact::plans::PlanError;
use crate::core::exact::table_size::SizeError;
use crate::core::exact::waiting::NeverEnough;
use crate::core::meter::trace::TraceError;
use crate::core::meter::{MeterError, SavedStateError};
use crate::core::seats::SeatsError;
use crate::shared_memory::OpenError;

/// A configuration that cannot be: its message is the core's. A mistake in how the call is
/// written is a `TypeError`; every other kind is a value no limiter can take (a new kind is
/// one too, so a new band option needs nothing here).
impl From<ConfigError> for PyErr {
    fn from(error: ConfigError) -> Self {
        in_the_call_or_value(error.is_in_the_call(), &error)
    }
}

/// Plans that cannot be, or a plan a call cannot decide on: as for a configuration.
impl From<PlanError> for PyErr {
    fn from(error: PlanError) -> Self {
        in_the_call_or_value(error.is_in_the_call(), &error)
    }
}

/// `error`'s message as a `TypeError` if it is in how the call is written, else as a
/// `ValueError`.
fn in_the_call_or_value(in_the_call: bool, error: &impl std::fmt::Display) -> PyErr {
    if in_the_call {
        PyTypeError::new_err(error.to_string())
    } else {
        PyValueError::new_err(error.to_string())
    }
}

/// Core errors that are each a value no call could use, whose message is the core's: a
/// `ValueError` saying it.
macro_rules! value_errors {
    ($($(#[$doc:meta])* $error:ty;)+) => {$(
        $(#[$doc])*
        impl From<$error> for PyErr {
            fn from(error: $error) -> Self {
                PyValueError::new_err(error.to_string())
            }
        }
    )+};
}

value_errors! {
    /// A keyed table's size that cannot be.
    SizeError;
    /// A meter's saved state (a pickle's) that cannot be put back.
    SavedStateError;
    /// A keyed trace whose parts are not one length.
    TraceLengths;
}

/// A keyed table's saved state that cannot be restored.
impl From<RestoreError> for PyErr {
    fn from(error: RestoreError) -> Self {
        PyValueError::new_err(match error {
            RestoreError::Bands => "the saved state has a different number of bands",
            RestoreError::OverBurst => "a saved balance exceeds its band's burst",
            RestoreError::Ahead => {
                "a saved balance is settled later than the saved table's clock allows"
            }
            RestoreError::Duplicate => "the saved state holds a key twice",
            RestoreError::Overfull => "the saved state holds more keys than this table's max_keys",
            RestoreError::Used => "a keyed limiter's state can only be restored into a new limiter",
        })
    }
}

/// A meter's configuration against its RFC.
impl From<MeterError> for PyErr {
    fn from(error: MeterError) -> Self {
        PyValueError::new_err(match error {
            MeterError::Rule(rule) => format!("the RFC requires {rule}"),
            MeterError::TooFine => {
                "a bucket size times the rate's denominator is too large to hold exactly".to_owned()
            }
        })
    }
}

/// A trace a meter cannot mark, named by `mark_many`'s parameters.
impl From<TraceError> for PyErr {
    fn from(error: TraceError) -> Self {
        match error {
            TraceError::Lengths {
                sizes,
                times,
                colors,
            } => PyValueError::new_err(format!(
                "sizes ({sizes}), times_ns ({times}){} must have the same length",
                colors.map_or_else(String::new, |c| format!(" and colors ({c})"))
            )),
            TraceError::Backwards { index } => PyValueError::new_err(format!(
                "times_ns[{index}] is earlier than times_ns[{}]: a trace's times must not go back",
                index - 1
            )),
        }
    }
}

/// An in-flight limit's argument that no call could use (a limit of 0, n of 0 or beyond the
/// limit), or seats given back that were not held: its message is the core's, naming the value.
impl From<SeatsError> for PyErr {
    fn from(error: SeatsError) -> Self {
        PyValueError::new_err(error.to_string())
    }
}

/// A shared table that cannot be opened: a bad name or file is a `ValueError`; what the
/// system said is the `OSError` subclass for its errno (`FileNotFoundError`,
/// `PermissionError`...), with the path as its filename. A file or folder of another user's
/// is a `PermissionError`, a table that does not fit an `OSError` of `ENOSPC`, and a table of
/// another boot held open, or truncated while in use, an `OSError`: each message names the
/// file and says what to do (so no `filename`, which would print it twice).
impl From<OpenError> for PyErr {
    fn from(error: OpenError) -> Self {
        match &error {
            OpenError::Name(_) | OpenError::Layout(..) => PyValueError::new_err(error.to_string()),
            OpenError::Io(path, io) => match io.raw_os_error() {
                Some(errno) => {
                    PyOSError::new_err((errno, io.to_string(), path.display().to_string()))
                }
                None => PyOSError::new_err(error.to_string()),
            },
            OpenError::NotOurs { .. } => PyOSError::new_err((libc::EACCES, error.to_string())),
            OpenError::Space { error: io, .. } => {
                PyOSError::new_err((io.raw_os_error().unwrap_or(libc::ENOSPC), error.to_string()))
            }
            OpenError::OtherBoot(_) | OpenError::Truncated { .. } => {
                PyOSError::new_err(error.to_string())
            }
        }
    }
}

/// A request for more tokens than a band holds: its message is the core's.
impl From<NeverEnough> for PyErr {
    fn from(error: NeverEnough) -> Self {
        PyValueError::new_err(error.to_string())
    }
}

/// Whose clock a time was too far from (see `core::exact::clock_gap`).
#[derive(Clone, Copy)]
pub enum OfClock {
    Limiter,
    Table,
}

/// [`clock_error`] for a call's time: `now_ns` if the caller `given` it, else the clock's
/// reading.
pub fn off_the_clock(whose: OfClock, given: bool, now: i64, gap: i128) -> PyErr {
    let what = if given {
        "now_ns"
    } else {
        "the clock's reading"
    };
    clock_error(whose, what, now, gap)
}

/// The error for a time `gap` nanoseconds from a clock (positive when ahead), farther than
/// `MAX_CLOCK_GAP_NS`: `what` names where the time came from (`now_ns`, or the clock's
/// reading).
pub fn clock_error(whose: OfClock, what: &str, now: i64, gap: i128) -> PyErr {
    const YEAR_NS: f64 = 31_557_600e9;
    #[allow(clippy::cast_precision_loss)] // a number of years, to one decimal
    let years = gap.unsigned_abs() as f64 / YEAR_NS;
    #[allow(clippy::cast_precision_loss)]
    let bound = MAX_CLOCK_GAP_NS as f64 / YEAR_NS;
    let latest = i128::from(now) - gap;
    let (this, one, ahead) = match whose {
        OfClock::Limiter => ("limiter", "A limiter", "fill it up at once"),
        OfClock::Table => (
            "table",
            "A keyed table",
            "give every throttled key its whole burst back",
        ),
    };
    let (side, harm) = if gap > 0 {
        ("ahead of", ahead)
    } else {
        ("behind", "make it wait as many years")
    };
    PyValueError::new_err(format!(
        "{what}={now} is {years:.1} years {side} this {this}'s clock ({latest}), more than the \
         {bound:.0} years a call's time may be from it: it was read on another clock (say \
         time.time_ns() given to a {this} on time.monotonic_ns()). {one} keeps one clock; \
         deciding at this time would {harm}"
    ))
}

/// `repr(value)`, for an error's message, or `?` if the repr itself fails (the error being
/// reported matters more than the one its repr would raise).
pub fn shown(value: &Bound<'_, PyAny>) -> String {
    value.repr().map_or_else(|_| "?".into(), |r| r.to_string())
}

/// `str(value)`, for an error's message, or `?` if that fails.
pub fn text_of(value: &Bound<'_, PyAny>) -> String {
    value
        .str()
        .map_or_else(|_| "?".into(), |text| text.to_string())
}
