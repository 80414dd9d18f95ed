//! Python numbers as a core [`Quantity`]: the course's arithmetic, with Python's own semantics.
//!
//! The core algorithms are generic; this file is the one place that decides how a Python object
//! takes part in them. There are two number types, one inside the other:
//!
//! * [`Scalar`] is an exact `int` that fits in 64 bits or an exact `float`. Its arithmetic is
//!   Rust's, restricted to the cases where that provably equals Python's: `int` with `int` in
//!   checked `i64`; `float` with `float`, or with an `int` of magnitude at most 2^53 (which
//!   converts to a double exactly, as Python converts it), in `f64`, which is what Python's
//!   `float` computes. Anything else (an overflow, a huge int next to a float) is reported as
//!   [`NeedsPython`]. It never runs Python code, so it may run while a lock is held.
//! * [`Num`] is any Python number. Two scalars use [`Scalar`]'s arithmetic; everything else, and
//!   every case [`Scalar`] declines, is handed to Python (`PyNumber_Subtract`, a rich comparison
//!   followed by a truth test, ...), exactly as the course's `-`, `<` and `if` would do it. Bools,
//!   `Fraction`s, `Decimal`s, big ints, numpy scalars and subclasses all go that way.
//!
//! A number that passes through an algorithm unchanged comes back as the very object that went
//! in, so `is` holds where it holds in the course.

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};
use pyo3::{ffi, IntoPyObjectExt};

use crate::core::quantity::Quantity;

/// Integers up to this magnitude convert to `f64` exactly.
const EXACT_IN_F64: i64 = 1 << 53;

/// A [`Scalar`] operation whose exact result only Python can compute.
#[derive(Debug, Clone, Copy)]
pub struct NeedsPython;

/// An exact `int` within 64 bits or an exact `float`, and the object it came from, if any.
#[derive(Clone)]
pub struct Scalar<'py> {
    py: Python<'py>,
    value: Value,
    object: Option<Bound<'py, PyAny>>,
}

#[derive(Clone, Copy)]
enum Value {
    Int(i64),
    Float(f64),
}

impl<'py> Scalar<'py> {
    /// The object as a scalar, if it is an exact `int` within 64 bits or an exact `float`.
    pub fn new(object: &Bound<'py, PyAny>) -> Option<Self> {
        let value = if object.is_exact_instance_of::<PyInt>() {
            Value::Int(exact_i64(object)?)
        } else if object.is_exact_instance_of::<PyFloat>() {
            // SAFETY: the object is an exact `float`.
            Value::Float(unsafe { ffi::PyFloat_AS_DOUBLE(object.as_ptr()) })
        } else {
            return None;
        };
        Some(Self {
            py: object.py(),
            value,
            object: Some(object.clone()),
        })
    }

    /// The Python object for this number: the original one, or a new `int` or `float`.
    /// Runs no Python code.
    pub fn into_object(self) -> Bound<'py, PyAny> {
        self.object.unwrap_or_else(|| {
            match self.value {
                Value::Int(i) => i.into_bound_py_any(self.py),
                Value::Float(f) => f.into_bound_py_any(self.py),
            }
            .expect("converting an i64 or f64 to a Python object cannot fail")
        })
    }

    /// `self <= 0`: a scalar can always answer this one itself.
    fn is_at_most_zero(&self) -> bool {
        match self.value {
            Value::Int(i) => i <= 0,
            Value::Float(f) => f <= 0.0,
        }
    }

    /// `0 > self`, likewise.
    fn is_below_zero(&self) -> bool {
        match self.value {
            Value::Int(i) => i < 0,
            Value::Float(f) => f < 0.0,
        }
    }

    fn compare(
        &self,
        rhs: &Self,
        int_op: fn(&i64, &i64) -> bool,
        float_op: fn(&f64, &f64) -> bool,
    ) -> Result<bool, NeedsPython> {
        if let (Value::Int(a), Value::Int(b)) = (self.value, rhs.value) {
            return Ok(int_op(&a, &b));
        }
        let (a, b) = self.as_f64_pair(rhs).ok_or(NeedsPython)?;
        Ok(float_op(&a, &b))
    }

    fn made(&self, value: Value) -> Self {
        Self {
            py: self.py,
            value,
            object: None,
        }
    }

    /// Both values as doubles, when Python would compute in doubles and convert exactly.
    fn as_f64_pair(&self, rhs: &Self) -> Option<(f64, f64)> {
        match (self.value, rhs.value) {
            (Value::Int(_), Value::Int(_)) => None,
            (a, b) => Some((exact_f64(a)?, exact_f64(b)?)),
        }
    }

    fn arithmetic(
        &self,
        rhs: &Self,
        int_op: fn(i64, i64) -> Option<i64>,
        float_op: fn(f64, f64) -> f64,
    ) -> Result<Self, NeedsPython> {
        let value = if let (Value::Int(a), Value::Int(b)) = (self.value, rhs.value) {
            Value::Int(int_op(a, b).ok_or(NeedsPython)?)
        } else {
            let (a, b) = self.as_f64_pair(rhs).ok_or(NeedsPython)?;
            Value::Float(float_op(a, b))
        };
        Ok(self.made(value))
    }
}

/// The value of an exact `int` (or `bool`), if it fits in an `i64`.
pub fn exact_i64(object: &Bound<'_, PyAny>) -> Option<i64> {
    let mut overflow = 0;
    // SAFETY: the object is an `int`; given an overflow flag to report into, the call cannot
    // fail or set a Python error.
    let value = unsafe { ffi::PyLong_AsLongLongAndOverflow(object.as_ptr(), &raw mut overflow) };
    (overflow == 0).then_some(value)
}

fn exact_f64(value: Value) -> Option<f64> {
    match value {
        Value::Float(f) => Some(f),
        #[allow(clippy::cast_precision_loss)] // exact: the magnitude is at most 2^53
        Value::Int(i) if (-EXACT_IN_F64..=EXACT_IN_F64).contains(&i) => Some(i as f64),
        Value::Int(_) => None,
    }
}

impl Quantity for Scalar<'_> {
    type Error = NeedsPython;

    fn minus(&self, rhs: &Self) -> Result<Self, NeedsPython> {
        self.arithmetic(rhs, i64::checked_sub, |a, b| a - b)
    }
    fn plus(&self, rhs: &Self) -> Result<Self, NeedsPython> {
        self.arithmetic(rhs, i64::checked_add, |a, b| a + b)
    }
    fn times(&self, rhs: &Self) -> Result<Self, NeedsPython> {
        self.arithmetic(rhs, i64::checked_mul, |a, b| a * b)
    }
    fn less_than(&self, rhs: &Self) -> Result<bool, NeedsPython> {
        self.compare(rhs, |a, b| a < b, |a, b| a < b)
    }
    fn greater_than(&self, rhs: &Self) -> Result<bool, NeedsPython> {
        self.compare(rhs, |a, b| a > b, |a, b| a > b)
    }
    fn at_most_zero(&self) -> Result<bool, NeedsPython> {
        Ok(self.is_at_most_zero())
    }
    fn below_zero(&self) -> Result<bool, NeedsPython> {
        Ok(self.is_below_zero())
    }
    fn zero(&self) -> Self {
        self.made(Value::Int(0))
    }
}

/// A Python object kept in a native object's field: the object callers see and, if it is a
/// [`Scalar`], its value, read once when the object is stored instead of on every use.
pub struct StoredObject {
    object: Py<PyAny>,
    value: Option<Value>,
}

impl StoredObject {
    pub fn new(object: Bound<'_, PyAny>) -> Self {
        let value = Scalar::new(&object).map(|scalar| scalar.value);
        Self {
            object: object.unbind(),
            value,
        }
    }

    /// Store a scalar without reading its value back from the object.
    pub fn from_scalar(scalar: Scalar<'_>) -> Self {
        let value = Some(scalar.value);
        Self {
            object: scalar.into_object().unbind(),
            value,
        }
    }

    pub fn from_num(number: Num<'_>) -> Self {
        match number {
            Num::Scalar(scalar) => Self::from_scalar(scalar),
            Num::Object(object) => Self {
                object: object.unbind(),
                value: None,
            },
        }
    }

    /// Store `scalar` here unless it is already the stored object. This object must be a
    /// scalar too: it is released at once, under whatever lock the caller holds, which is safe
    /// only because freeing an exact `int` or `float` runs no Python code.
    pub fn set_scalar(&mut self, scalar: Scalar<'_>) {
        debug_assert!(self.is_scalar(), "set_scalar displaces only scalars");
        match &scalar.object {
            Some(object) if object.as_ptr() == self.object.as_ptr() => {}
            _ => {
                let py = scalar.py;
                let displaced = std::mem::replace(self, Self::from_scalar(scalar));
                // Released at once: an int or a float runs no Python code when freed. (Merely
                // dropped, it would wait in PyO3's pool of deferred releases whenever the call
                // came through a `fastcall` door, which PyO3 does not count as attached.)
                displaced.object.drop_ref(py);
            }
        }
    }

    /// Store `number` here unless it is already the stored object. Returns what it displaced,
    /// for the caller to release once its lock is gone.
    pub fn set_num(&mut self, number: Num<'_>) -> Option<Self> {
        let same = match &number {
            Num::Scalar(scalar) => scalar
                .object
                .as_ref()
                .is_some_and(|object| object.as_ptr() == self.object.as_ptr()),
            Num::Object(object) => object.as_ptr() == self.object.as_ptr(),
        };
        (!same).then(|| std::mem::replace(self, Self::from_num(number)))
    }

    /// Let go of the object now (which may run its finalizer: never under a lock).
    pub fn release(self, py: Python<'_>) {
        self.object.drop_ref(py);
    }

    /// Whether the object is a [`Scalar`].
    pub fn is_scalar(&self) -> bool {
        self.value.is_some()
    }

    pub fn object(&self) -> &Py<PyAny> {
        &self.object
    }

    pub fn scalar<'py>(&self, py: Python<'py>) -> Option<Scalar<'py>> {
        Some(Scalar {
            py,
            value: self.value?,
            object: Some(self.object.bind(py).clone()),
        })
    }

    pub fn num<'py>(&self, py: Python<'py>) -> Num<'py> {
        self.scalar(py)
            .map_or_else(|| Num::Object(self.object.bind(py).clone()), Num::Scalar)
    }
}

/// Any Python number.
#[derive(Clone)]
pub enum Num<'py> {
    /// Computed in Rust where that is exactly Python's result.
    Scalar(Scalar<'py>),
    /// Computed by Python.
    Object(Bound<'py, PyAny>),
}

impl<'py> Num<'py> {
    pub fn new(object: &Bound<'py, PyAny>) -> Self {
        Scalar::new(object).map_or_else(|| Self::Object(object.clone()), Self::Scalar)
    }

    /// Which object this number is, for identity comparisons (0 for a value not yet made into
    /// an object: a new result, never the same as anything stored).
    pub fn identity(&self) -> usize {
        match self {
            Self::Scalar(scalar) => scalar.object.as_ref().map_or(0, |o| o.as_ptr() as usize),
            Self::Object(object) => object.as_ptr() as usize,
        }
    }

    /// The number as a [`Scalar`], if it is one.
    pub fn as_scalar(&self) -> Option<&Scalar<'py>> {
        match self {
            Self::Scalar(scalar) => Some(scalar),
            Self::Object(_) => None,
        }
    }

    /// The Python object for this number (the original one if it passed through unchanged).
    pub fn into_object(self) -> Bound<'py, PyAny> {
        match self {
            Self::Scalar(scalar) => scalar.into_object(),
            Self::Object(object) => object,
        }
    }

    fn to_object(&self) -> Bound<'py, PyAny> {
        self.clone().into_object()
    }

    /// `scalar_op` when both are scalars and it has the exact answer, else `python_op`.
    fn either<T>(
        &self,
        rhs: &Self,
        scalar_op: impl FnOnce(&Scalar<'py>, &Scalar<'py>) -> Result<T, NeedsPython>,
        python_op: impl FnOnce(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> PyResult<T>,
    ) -> PyResult<T> {
        if let (Self::Scalar(a), Self::Scalar(b)) = (self, rhs) {
            if let Ok(exact) = scalar_op(a, b) {
                return Ok(exact);
            }
        }
        python_op(&self.to_object(), &rhs.to_object())
    }

    fn arithmetic(
        &self,
        rhs: &Self,
        scalar_op: fn(&Scalar<'py>, &Scalar<'py>) -> Result<Scalar<'py>, NeedsPython>,
        python_op: fn(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Self> {
        self.either(
            rhs,
            |a, b| scalar_op(a, b).map(Self::Scalar),
            |a, b| python_op(a, b).map(|result| Self::new(&result)),
        )
    }
}

fn in_place_subtract<'py>(
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: both pointers are live objects; the result is a new reference, or NULL with an
    // exception set, which `from_owned_ptr_or_err` turns into `Err`.
    unsafe {
        Bound::from_owned_ptr_or_err(
            a.py(),
            ffi::PyNumber_InPlaceSubtract(a.as_ptr(), b.as_ptr()),
        )
    }
}

fn in_place_add<'py>(a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: as for `in_place_subtract`.
    unsafe {
        Bound::from_owned_ptr_or_err(a.py(), ffi::PyNumber_InPlaceAdd(a.as_ptr(), b.as_ptr()))
    }
}

impl Quantity for Num<'_> {
    type Error = PyErr;

    fn minus(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, Scalar::minus, |a, b| a.sub(b))
    }
    fn plus(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, Scalar::plus, |a, b| a.add(b))
    }
    fn times(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, Scalar::times, |a, b| a.mul(b))
    }
    /// Ints and floats have no in-place operators, so only other objects can tell the difference.
    fn minus_in_place(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, Scalar::minus, in_place_subtract)
    }
    /// Likewise for `+=`.
    fn plus_in_place(&self, rhs: &Self) -> PyResult<Self> {
        self.arithmetic(rhs, Scalar::plus, in_place_add)
    }
    fn less_than(&self, rhs: &Self) -> PyResult<bool> {
        self.either(rhs, Scalar::less_than, |a, b| a.lt(b))
    }
    fn greater_than(&self, rhs: &Self) -> PyResult<bool> {
        self.either(rhs, Scalar::greater_than, |a, b| a.gt(b))
    }
    fn at_most_zero(&self) -> PyResult<bool> {
        match self {
            Self::Scalar(scalar) => Ok(scalar.is_at_most_zero()),
            Self::Object(object) => object.le(0),
        }
    }
    fn below_zero(&self) -> PyResult<bool> {
        match self {
            Self::Scalar(scalar) => Ok(scalar.is_below_zero()),
            Self::Object(object) => 0_i64.into_bound_py_any(object.py())?.gt(object),
        }
    }
    fn zero(&self) -> Self {
        match self {
            Self::Scalar(scalar) => Self::Scalar(scalar.zero()),
            Self::Object(object) => Self::new(
                &0_i64
                    .into_bound_py_any(object.py())
                    .expect("converting 0 to a Python int cannot fail"),
            ),
        }
    }
}
