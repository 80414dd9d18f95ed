//! A result nobody holds any more can be handed out again.
//!
//! The course's hot calls (`compute_refill`, `try_consume`, `offer`) and the limiters' `check`
//! and `peek` each return a new frozen record, and a caller usually looks at it once and drops
//! it. Making a Python object and freeing it again costs more than the decision it reports. So
//! each class keeps its last record as a *spare*: if, at the next call, the spare's reference
//! count shows that nothing but the spare slot holds it, nobody can see it any more, and its
//! fields are simply rewritten. If someone kept it, a new record is made and becomes the spare.
//! CPython does the same with the tuples that `zip` and `enumerate` hand out.
//!
//! Nobody can tell the difference:
//!
//! * a record is rewritten only while no other reference to it exists (its `id()` may repeat,
//!   as a freed object's address may in CPython anyway);
//! * a spare keeps its values alive until the next call, so only records whose every value is
//!   *inert* are kept: exact `int`s and `float`s, `True`, `False`, `None`, and the members of
//!   this module's enums. None of them can be weakly referenced, run a finalizer or close a
//!   cycle, and the enum members live for good anyway. (A record holding anything else, a
//!   `Fraction` balance say, is made new each time and never kept. Not even an exact `str` is
//!   inert: an interned one kept alive would be what `sys.intern` returns for an equal string
//!   made later.)
//!
//! The argument needs the interpreter's lock and reference counts that mean what they say, so a
//! free-threaded build, PyPy and GraalPy never rewrite a record.

use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::AtomicPtr;
#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
use std::sync::atomic::Ordering;

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
use pyo3::types::{PyBool, PyFloat, PyInt};
use pyo3::{ffi, PyClass, PyClassInitializer};

#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
use crate::python::enums;

/// A frozen record's field: read-only to Python and to every holder of the record, written only
/// by [`make`] while the record is a spare that nothing else holds.
pub struct Field(UnsafeCell<Py<PyAny>>);

// SAFETY: a field is written only by `make` (`reuse`), with the interpreter's lock held (builds
// without one never write), while the record's one reference is its class's spare slot, and
// with nothing between the check of that reference count and the last write that allocates,
// runs Python code or lets go of the lock. So no other thread, no holder of the record and no
// garbage collection (which could read the fields through `__traverse__`) can be reading a
// field while it is written.
unsafe impl Sync for Field {}

impl Field {
    pub fn new(value: Py<PyAny>) -> Self {
        Self(UnsafeCell::new(value))
    }

    pub fn get(&self) -> &Py<PyAny> {
        // SAFETY: see `Sync` above: no write is under way whenever code can call this.
        unsafe { &*self.0.get() }
    }
}

/// A class's spare record: one strong reference, or null. Read and swapped only with the
/// interpreter's lock held (which orders every access), so relaxed atomics suffice.
#[cfg_attr(any(Py_GIL_DISABLED, PyPy, GraalPy), allow(dead_code))] // never used there
pub struct Spare(AtomicPtr<ffi::PyObject>);

impl Spare {
    #[must_use]
    pub const fn new() -> Self {
        Self(AtomicPtr::new(ptr::null_mut()))
    }
}

impl Default for Spare {
    fn default() -> Self {
        Self::new()
    }
}

/// A frozen record whose fields [`make`] may rewrite.
///
/// # Safety
///
/// Implemented only by [`frozen_record!`](crate::python::record::frozen_record), for classes
/// that Python cannot reach any other way than through a reference: not subclassable, no
/// `__dict__`, no weak references (a weak reference would reach a spare whose count is 1).
/// `fields` returns this record's own fields, each once.
pub unsafe trait Record<const N: usize>:
    PyClass<Frozen = True> + Sync + Into<PyClassInitializer<Self>>
{
    /// The class's spare record.
    fn spare() -> &'static Spare;
    fn fields(&self) -> [&Field; N];
    fn from_values(values: [Py<PyAny>; N]) -> Self;
}

/// A record of `T` holding `values`: the class's spare one, rewritten, if nothing else holds
/// it; else a new one, which becomes the spare if its values are all inert.
pub fn make<'py, T: Record<N>, const N: usize>(
    py: Python<'py>,
    values: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, T>> {
    #[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
    let values = {
        if !values.iter().all(inert) {
            return Bound::new(py, T::from_values(values.map(Bound::unbind)));
        }
        match reuse::<T, N>(py, values) {
            Ok(record) => return Ok(record),
            Err(values) => values,
        }
    };
    let record = Bound::new(py, T::from_values(values.map(Bound::unbind)))?;
    #[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
    keep_as_spare(py, &record);
    Ok(record)
}

/// Whether keeping `value` alive a while longer is invisible (see the module's docs).
#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
fn inert(value: &Bound<'_, PyAny>) -> bool {
    value.is_exact_instance_of::<PyInt>()
        || value.is_exact_instance_of::<PyFloat>()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_none()
        || enums::is_member(value)
}

/// The spare record, rewritten to hold `values`, if nothing but its slot holds it; else the
/// values back.
#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
fn reuse<'py, T: Record<N>, const N: usize>(
    py: Python<'py>,
    values: [Bound<'py, PyAny>; N],
) -> Result<Bound<'py, T>, [Bound<'py, PyAny>; N]> {
    let spare = T::spare().0.load(Ordering::Relaxed);
    // SAFETY: a non-null spare is a live record of `T` whose reference the slot owns.
    if spare.is_null() || unsafe { ffi::Py_REFCNT(spare) } != 1 {
        return Err(values);
    }
    // SAFETY: as above; this takes a reference of our own.
    let record = unsafe { Bound::from_borrowed_ptr(py, spare).cast_into_unchecked::<T>() };
    let fields = record.get().fields();
    let mut values = values.into_iter();
    // SAFETY: the slot held the only other reference and the interpreter's lock is held, so
    // nothing reads these fields now (see `Field`). Nothing in this loop allocates or runs
    // Python code: each old value is moved out whole, each new one moved in.
    let displaced: [Py<PyAny>; N] = std::array::from_fn(|i| {
        let value = values.next().expect("one value per field").unbind();
        unsafe { ptr::replace(fields[i].0.get(), value) }
    });
    // Released now, with the record whole again (inert values run no Python code when freed).
    for value in displaced {
        value.drop_ref(py);
    }
    Ok(record)
}

/// Make `record` its class's spare, letting go of the previous one.
#[cfg(not(any(Py_GIL_DISABLED, PyPy, GraalPy)))]
fn keep_as_spare<T: Record<N>, const N: usize>(py: Python<'_>, record: &Bound<'_, T>) {
    let previous = T::spare()
        .0
        .swap(record.clone().into_ptr(), Ordering::Relaxed);
    if !previous.is_null() {
        // SAFETY: the slot owned this reference, released now (as a `Bound`: a `Py` merely
        // dropped would wait in PyO3's pool of deferred releases under a `fastcall` door).
        drop(unsafe { Bound::from_owned_ptr(py, previous) });
    }
}
