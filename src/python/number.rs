//! Python numbers as a core [`Quantity`]: the course's arithmetic, with Python's own semantics.
//!
//! The core algorithms are generic; this file is the one place that decides how a Python object
//! takes part in them. Two number types, both built on the core's [`IntOrFloat`] (an `int`
//! within 64 bits or a `float`, computing as Python does wherever machine numbers can):
//!
//! * [`Scalar`] (the core's, `core::scalar`) is an exact `int` or `float` object's
//!   [`IntOrFloat`], and which of an operation's inputs it is, if any. It holds no reference to
//!   any object, so it is copied freely and runs no Python code, so it may run while a lock is
//!   held. When the operation is over, a result that *is* one of the inputs becomes that very
//!   object again, and only a value the operation computed becomes a new `int` or `float`.
//! * [`Num`] is any Python number. Two exact values use [`IntOrFloat`]'s arithmetic; everything
//!   else, and every step [`IntOrFloat`] finds [`Inexact`], is handed to Python
//!   (`PyNumber_Subtract`, a rich comparison followed by a truth test, ...), exactly as the
//!   course's `-`, `<` and `if` would do it. Bools, `Fraction`s, `Decimal`s, big ints, numpy
//!   scalars and subclasses all go that way.
//!
//! Either way, a number that passes through an algorithm unchanged comes back as the very object
//! that went in, so `is` holds where it holds in the course.

use std::cell::OnceCell;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyFloat, PyInt};
use pyo3::IntoPyObjectExt;

use crate::core::int_or_float::{Inexact, IntOrFloat};
use crate::core::quantity::Quantity;

/// The object's value, if it is an exact `int` within 64 bits or an exact `float`.
pub fn int_or_float(object: &Bound<'_, PyAny>) -> Option<IntOrFloat> {
    if let Ok(int) = object.cast_exact::<PyInt>() {
        exact_i64(int).map(IntOrFloat::Int)
    } else if let Ok(float) = object.cast_exact::<PyFloat>() {
        Some(IntOrFloat::Float(float.value()))
    } else {
        None
    }
}

/// A new `int` or `float` holding `value`. Runs no Python code.
pub fn new_object(py: Python<'_>, value: IntOrFloat) -> Bound<'_, PyAny> {
    match value {
        IntOrFloat::Int(i) => i.into_bound_py_any(py),
        IntOrFloat::Float(f) => f.into_bound_py_any(py),
    }
    .expect("converting an i64 or f64 to a Python object cannot fail")
}

/// The value of an `int` (or `bool`), if it fits in an `i64`. A bigger int makes PyO3 raise an
/// `OverflowError`, dropped here: such an int takes the slow path, where that costs little.
pub fn exact_i64(int: &Bound<'_, PyInt>) -> Option<i64> {
    int.extract::<i64>().ok()
}

pub use crate::core::scalar::Scalar;

/// A [`Scalar`] read from a Python object, and made into one again.
impl Scalar {
    /// Input number `position`, if it is an exact `int` within 64 bits or an exact `float`.
    #[must_use]
    pub fn input(object: &Bound<'_, PyAny>, position: usize) -> Option<Self> {
        int_or_float(object).map(|value| Self::from_input(value, position))
    }

    /// The Python object for this scalar: the input it is (given its position, `input` returns
    /// it), or a new `int` or `float`. Runs no Python code.
    pub fn into_object<'py>(
        self,
        py: Python<'py>,
        input: impl FnOnce(usize) -> Bound<'py, PyAny>,
    ) -> Bound<'py, PyAny> {
        match self.origin() {
            Some(position) => input(position),
            None => new_object(py, self.value()),
        }
    }
}

/// A Python object kept in a native object's field: the object callers see and, if it is an
/// exact `int` or `float`, its value, read once when the object is stored instead of on every
/// use.
pub struct StoredObject {
    object: Py<PyAny>,
    value: Option<IntOrFloat>,
}

impl StoredObject {
    pub fn new(object: Bound<'_, PyAny>) -> Self {
        let value = int_or_float(&object);
        Self::with_value(object, value)
    }

    /// Store `object`, whose value (if it has one) is already known.
    fn with_value(object: Bound<'_, PyAny>, value: Option<IntOrFloat>) -> Self {
        Self {
            object: object.unbind(),
            value,
        }
    }

    /// Store `object`, whose value is `value`, in place of a scalar. The displaced object is
    /// released at once, which is safe under a lock only because it is an exact `int` or
    /// `float`, whose release runs no Python code.
    pub fn set_scalar(&mut self, object: Bound<'_, PyAny>, value: IntOrFloat) {
        debug_assert!(self.value.is_some(), "set_scalar displaces only scalars");
        self.object = object.unbind();
        self.value = Some(value);
    }

    fn from_num(number: Num<'_>) -> Self {
        match number {
            Num::Exact { value, .. } => {
                let object = number.into_object();
                Self::with_value(object, Some(value))
            }
            Num::Object(object) => Self::with_value(object, None),
        }
    }

    /// Store `number` here unless it is already the stored object. Returns what it displaced,
    /// for the caller to release once its lock is gone.
    pub fn set_num(&mut self, number: Num<'_>) -> Option<Self> {
        let same = number.identity() == self.object.as_ptr() as usize;
        (!same).then(|| std::mem::replace(self, Self::from_num(number)))
    }

    /// Let go of the object now (which may run its finalizer: never under a lock, unless the
    /// object is an exact `int` or `float`, whose release runs no Python code).
    pub fn release(self, py: Python<'_>) {
        self.object.drop_ref(py);
    }

    pub fn object(&self) -> &Py<PyAny> {
        &self.object
    }

    /// The object's value, if it is an exact `int` or `float`.
    pub fn value(&self) -> Option<IntOrFloat> {
        self.value
    }

    pub fn num<'py>(&self, py: Python<'py>) -> Num<'py> {
        let object = self.object.bind(py).clone();
        match self.value {
            Some(value) => Num::Exact {
                py,
                value,
                object: OnceCell::from(object),
            },
            None => Num::Object(object),
        }
    }
}

/// Any Python number.
#[derive(Clone)]
pub enum Num<'py> {
    /// An exact `int` or `float`, computed in Rust where that is exactly Python's result.
    /// `object` is the object it came from or, for a value computed here, the one made the
    /// first time an object was needed: a Python value is one object, however often it is
    /// compared or stored.
    Exact {
        py: Python<'py>,
        value: IntOrFloat,
        object: OnceCell<Bound<'py, PyAny>>,
    },
    /// Computed by Python.
    Object(Bound<'py, PyAny>),
}

impl<'py> Num<'py> {
    pub fn new(object: &Bound<'py, PyAny>) -> Self {
        match int_or_float(object) {
            Some(value) => Self::Exact {
                py: object.py(),
                value,
                object: OnceCell::from(object.clone()),
            },
            None => Self::Object(object.clone()),
        }
    }

    /// Which object this number is, for identity comparisons (0 for a value not yet made into
    /// an object: a new result, never the same as anything stored).
    pub fn identity(&self) -> usize {
        match self {
            Self::Exact { object, .. } => object.get().map_or(0, |o| o.as_ptr() as usize),
            Self::Object(object) => object.as_ptr() as usize,
        }
    }

    /// The Python object for this number (the original one if it passed through unchanged).
    pub fn into_object(self) -> Bound<'py, PyAny> {
        match self {
            Self::Exact {
                py, value, object, ..
            } => object.into_inner().unwrap_or_else(|| new_object(py, value)),
            Self::Object(object) => object,
        }
    }

    fn to_object(&self) -> Bound<'py, PyAny> {
        match self {
            Self::Exact { py, value, object } => {
                object.get_or_init(|| new_object(*py, *value)).clone()
            }
            Self::Object(object) => object.clone(),
        }
    }

    /// A value computed here, not yet an object.
    fn computed(py: Python<'py>, value: IntOrFloat) -> Self {
        Self::Exact {
            py,
            value,
            object: OnceCell::new(),
        }
    }

    /// `exact_op` when both are exact and it has the exact answer, else `python_op`.
    fn either<T>(
        &self,
        rhs: &Self,
        exact_op: impl FnOnce(Python<'py>, IntOrFloat, IntOrFloat) -> Result<T, Inexact>,
        python_op: impl FnOnce(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> PyResult<T>,
    ) -> PyResult<T> {
        if let (Self::Exact { py, value: a, .. }, Self::Exact { value: b, .. }) = (self, rhs) {
            if let Ok(exact) = exact_op(*py, *a, *b) {
                return Ok(exact);
            }
        }
        python_op(&self.to_object(), &rhs.to_object())
    }

    fn arithmetic(
        &self,
        rhs: &Self,
        exact_op: fn(&IntOrFloat, &IntOrFloat) -> Result<IntOrFloat, Inexact>,
        python_op: fn(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        self.either(
            rhs,
            |py, a, b| exact_op(&a, &b).map(|value| Self::computed(py, value)),
            |a, b| python_op(a, b).map(|result| Self::new(&result)),
        )
    }

    fn compare(
        &self,
        rhs: &Self,
        exact_op: fn(&IntOrFloat, &IntOrFloat) -> Result<bool, Inexact>,
        python_op: fn(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> PyResult<bool>,
    ) -> PyResult<bool> {
        self.either(rhs, |_, a, b| exact_op(&a, &b), python_op)
    }
}

/// `a -= b`, as `operator.isub` computes it.
fn in_place_subtract<'py>(
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    static ISUB: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    ISUB.import(a.py(), "operator", "isub")?.call1((a, b))
}

/// `a += b`, as `operator.iadd` computes it.
fn in_place_add<'py>(a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    static IADD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    IADD.import(a.py(), "operator", "iadd")?.call1((a, b))
}

impl Quantity for Num<'_> {
    type Error = PyErr;

    fn minus(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, IntOrFloat::minus, |a, b| a.sub(b))
    }
    fn plus(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, IntOrFloat::plus, |a, b| a.add(b))
    }
    fn times(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, IntOrFloat::times, |a, b| a.mul(b))
    }
    /// Ints and floats have no in-place operators, so only other objects can tell the difference.
    fn minus_in_place(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, IntOrFloat::minus, in_place_subtract)
    }
    /// Likewise for `+=`.
    fn plus_in_place(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, IntOrFloat::plus, in_place_add)
    }
    fn less_than(&self, rhs: &Self) -> PyResult<bool> {
        self.compare(rhs, IntOrFloat::less_than, |a, b| a.lt(b))
    }
    fn greater_than(&self, rhs: &Self) -> PyResult<bool> {
        self.compare(rhs, IntOrFloat::greater_than, |a, b| a.gt(b))
    }
    fn at_most_zero(&self) -> PyResult<bool> {
        match self {
            Self::Exact { value, .. } => Ok(value.is_at_most_zero()),
            Self::Object(object) => object.le(0),
        }
    }
    fn below_zero(&self) -> PyResult<bool> {
        match self {
            Self::Exact { value, .. } => Ok(value.is_below_zero()),
            Self::Object(object) => 0_i64.into_bound_py_any(object.py())?.gt(object),
        }
    }
    fn zero(&self) -> Self {
        match self {
            Self::Exact { py, value, .. } => Self::computed(*py, value.zero()),
            Self::Object(object) => Self::new(
                &0_i64
                    .into_bound_py_any(object.py())
                    .expect("converting 0 to a Python int cannot fail"),
            ),
        }
    }
}
