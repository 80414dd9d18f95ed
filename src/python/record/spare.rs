//! A result nobody holds any more can be handed out again.
//!
//! The course's hot calls (`compute_refill`, `try_consume`, `offer`) each return a new frozen
//! record, and a caller usually looks at it once and drops it. Making a Python object and freeing
//! it again costs more than the decision it reports. So each thread keeps its last record of each
//! class as a *spare*: if, at the next call, the spare's reference count shows that nothing but
//! the spare slot holds it, nobody can see it any more, and its fields are simply rewritten. If
//! someone kept it, a new record is made and becomes the spare. CPython does the same with the
//! tuples that `zip` and `enumerate` hand out.
//!
//! Nobody can tell the difference: a record is only ever rewritten while no other reference to it
//! exists (its `id()` may repeat, as a freed object's address may in CPython anyway). That
//! argument needs the interpreter's lock, so a free-threaded build never rewrites a record.

use std::cell::{RefCell, UnsafeCell};
use std::thread::LocalKey;

use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::{ffi, PyClass, PyClassInitializer};

/// A frozen record's field: read-only to Python and to every holder of the record, written only
/// by [`make`] while the record is a spare that nothing else holds.
pub struct Field(UnsafeCell<Py<PyAny>>);

// SAFETY: a field is written only by `make`, with the interpreter's lock held (on builds that
// have one: free-threaded builds never write), and only while the record's one reference is the
// spare slot of the writing thread. So no other thread, and no other reference in this one, can
// be reading the field while it is written.
unsafe impl Sync for Field {}

impl Field {
    pub fn new(value: Py<PyAny>) -> Self {
        Self(UnsafeCell::new(value))
    }

    pub fn get(&self) -> &Py<PyAny> {
        // SAFETY: see `Sync` above: whoever can call this holds the record, so it is not being
        // written.
        unsafe { &*self.0.get() }
    }
}

/// A thread's spare record of one class.
pub type Spare<T> = LocalKey<RefCell<Option<Py<T>>>>;

/// A frozen record whose fields [`make`] may rewrite.
pub trait Record<const N: usize>:
    PyClass<Frozen = True> + Sync + Into<PyClassInitializer<Self>>
{
    /// This thread's spare record of the class.
    fn spare() -> &'static Spare<Self>;
    fn fields(&self) -> [&Field; N];
    fn from_values(values: [Py<PyAny>; N]) -> Self;
}

/// A record of `T` holding `values`: this thread's spare one, rewritten, if nothing else holds
/// it; else a new one, which becomes the spare.
pub fn make<'py, T: Record<N>, const N: usize>(
    py: Python<'py>,
    values: [Bound<'py, PyAny>; N],
) -> PyResult<Bound<'py, T>> {
    #[cfg(not(Py_GIL_DISABLED))]
    let values = match reuse::<T, N>(py, values) {
        Ok(record) => return Ok(record),
        Err(values) => values,
    };
    let record = Bound::new(py, T::from_values(values.map(Bound::unbind)))?;
    #[cfg(not(Py_GIL_DISABLED))]
    {
        let previous = T::spare().with(|slot| {
            slot.try_borrow_mut()
                .ok()
                .and_then(|mut slot| slot.replace(record.clone().unbind()))
        });
        // Released now (merely dropped, it would wait in PyO3's pool of deferred releases
        // under a `fastcall` door), and with the slot free: the previous spare may be freed
        // here, and its fields' finalizers may run Python code that makes records too.
        if let Some(previous) = previous {
            previous.drop_ref(py);
        }
    }
    Ok(record)
}

/// The spare record, rewritten to hold `values`, if nothing but its slot holds it; else the
/// values back.
#[cfg(not(Py_GIL_DISABLED))]
fn reuse<'py, T: Record<N>, const N: usize>(
    py: Python<'py>,
    values: [Bound<'py, PyAny>; N],
) -> Result<Bound<'py, T>, [Bound<'py, PyAny>; N]> {
    let unheld = T::spare().with(|slot| {
        let slot = slot.try_borrow().ok()?;
        let record = slot.as_ref()?;
        // SAFETY: a live object, owned by the slot.
        let count = unsafe { ffi::Py_REFCNT(record.as_ptr()) };
        (count == 1).then(|| record.bind(py).clone())
    });
    let Some(record) = unheld else {
        return Err(values);
    };
    let fields = record.get().fields();
    let mut values = values.into_iter();
    // SAFETY: the slot held the only other reference and the interpreter's lock is held, so
    // nothing reads these fields now (see `Field`); each old value is moved out whole.
    let displaced: [Py<PyAny>; N] = std::array::from_fn(|i| {
        let value = values.next().expect("one value per field").unbind();
        unsafe { std::ptr::replace(fields[i].0.get(), value) }
    });
    // Released now, with the record whole again: an old value's finalizer may run Python code.
    for value in displaced {
        value.drop_ref(py);
    }
    Ok(record)
}
