//! Mutable records: `@dataclass` for native classes that threads share.
//!
//! The course's buckets, class tree and shaper are mutable dataclasses: callers read and
//! reassign their fields, and a bucket may be shared by many threads. [`SharedFields`] keeps the
//! fields behind a mutex and follows one rule: **no Python code runs while the mutex is held**.
//! Python code can switch threads or re-enter the same object (a number whose `__sub__` reads
//! the bucket), and a lock held across it would deadlock.
//!
//! [`SharedFields::run`] therefore runs a core operation (a [`FieldOperation`]) one of two ways:
//!
//! * when every field and argument is an exact `int` within 64 bits or an exact `float` (a
//!   `Scalar`), no Python code can run, so the whole operation happens under the lock;
//! * otherwise, lock, copy the fields out, unlock; compute on the copy (Python arithmetic runs
//!   here); lock again and store the copy only if nobody stored anything in between (a version
//!   counter says), else start over from the fresh state.
//!
//! Either way an update is stored whole or not at all: no update is lost and nobody sees half
//! of one. Objects displaced from a field are released after unlocking, since releasing an
//! arbitrary object can run its `__del__`.
//!
//! A store made by *another* thread while an update computes restarts that update. A store made
//! by the updating thread itself can only come from inside the update (a number whose arithmetic
//! writes the very object it is computing on): then, as the course's code would, the update
//! stores the fields it changed over what is there, once, without starting over. An update
//! interrupted by a `BaseException` that is not an `Exception` (`KeyboardInterrupt`) is not
//! retried either.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

use crate::core::quantity::Quantity;
use crate::python::number::{Num, Scalar, StoredObject};

/// The fields of a mutable record, shared between threads.
pub struct SharedFields<const N: usize> {
    state: Mutex<Stored<N>>,
}

struct Stored<const N: usize> {
    fields: [StoredObject; N],
    /// Counts stores, so an optimistic update can tell whether it is still current.
    version: u64,
    /// The thread that made the latest store.
    last_writer: Option<Writer>,
}

/// A thread that stores into a record, known by the address of a thread-local: unique among the
/// threads alive, and a store's writer is alive when the store is seen.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Writer(usize);

thread_local! {
    static THREAD_MARK: u8 = const { 0 };
}

impl Writer {
    fn current() -> Self {
        Self(THREAD_MARK.with(|mark| std::ptr::from_ref(mark) as usize))
    }
}

impl<const N: usize> Stored<N> {
    fn bump(&mut self) {
        self.version = self.version.wrapping_add(1);
        self.last_writer = Some(Writer::current());
    }
}

impl<const N: usize> SharedFields<N> {
    pub fn new(fields: [Bound<'_, PyAny>; N]) -> Self {
        Self {
            state: Mutex::new(Stored {
                fields: fields.map(StoredObject::new),
                version: 0,
                last_writer: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Stored<N>> {
        // Every store is a single move, so even a panic elsewhere cannot leave the fields
        // half-written: a poisoned lock still guards consistent fields.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One field's object.
    pub fn get(&self, py: Python<'_>, index: usize) -> Py<PyAny> {
        self.lock().fields[index].object().clone_ref(py)
    }

    /// Replace one field's object.
    pub fn set(&self, index: usize, value: Bound<'_, PyAny>) {
        let value = StoredObject::new(value);
        let displaced = {
            let mut stored = self.lock();
            stored.bump();
            std::mem::replace(&mut stored.fields[index], value)
        };
        drop(displaced);
    }

    /// Every field's object, read together.
    pub fn objects<'py>(&self, py: Python<'py>) -> [Bound<'py, PyAny>; N] {
        let stored = self.lock();
        std::array::from_fn(|i| stored.fields[i].object().bind(py).clone())
    }

    /// Run a core operation on the fields with `args`, and return its answer with the object
    /// that the operation's [`FieldOperation::REPORTED`] field holds afterwards.
    ///
    /// When the fields and the arguments are all exact ints within 64 bits or exact floats, the
    /// operation runs on `Scalar`s under the lock from start to finish (no Python code can
    /// run). Otherwise, or if a scalar operation needs Python after all, it runs on a copy with
    /// the lock released, and the copy is stored unless another update came first, in which
    /// case it runs again on the fresh fields. The copy is stored even when the operation
    /// failed part-way: it holds exactly what the course's code would have left on the object
    /// when its exception was raised.
    pub fn run<'py, Op, const A: usize>(
        &self,
        py: Python<'py>,
        args: [&Bound<'py, PyAny>; A],
    ) -> Ran<'py, Op::Answer>
    where
        Op: FieldOperation<N, A>,
    {
        if let Some(done) = self.run_scalars::<Op, A>(py, args) {
            return done;
        }
        let args = args.map(Num::new);
        let me = Writer::current();
        loop {
            let (copy, version) = {
                let stored = self.lock();
                let copy: [Num<'py>; N] = std::array::from_fn(|i| stored.fields[i].num(py));
                (copy, stored.version)
            };
            let before: [usize; N] = std::array::from_fn(|i| copy[i].identity());
            let (updated, answer) = Op::apply(copy, &args);
            let mut displaced = Vec::new();
            let mut unstored = Vec::new();
            let mut stored = self.lock();
            if stored.version == version {
                for (field, number) in stored.fields.iter_mut().zip(updated) {
                    displaced.extend(field.set_num(number));
                }
            } else {
                let reentered = stored.last_writer == Some(me);
                let interrupted = answer
                    .as_ref()
                    .is_err_and(|err| !err.is_instance_of::<PyException>(py));
                if !reentered && !interrupted {
                    // Another thread stored first: start over from its result.
                    continue;
                }
                // This thread stored meanwhile, from inside the operation (a number whose
                // arithmetic writes this object), or the operation was interrupted (e.g.
                // KeyboardInterrupt): as the course's code would, store what the operation
                // changed over what is there, and stop.
                for ((field, number), was) in stored.fields.iter_mut().zip(updated).zip(before) {
                    if number.identity() == was {
                        // Not stored: this may be the last reference to an object the other
                        // store displaced, so it is let go of with the others, unlocked.
                        unstored.push(number);
                    } else {
                        displaced.extend(field.set_num(number));
                    }
                }
            }
            stored.bump();
            let reported = stored.fields[Op::REPORTED].object().bind(py).clone();
            drop(stored);
            // Any finalizer runs here, with the lock free.
            drop(unstored);
            for object in displaced {
                object.release(py);
            }
            return (answer, reported);
        }
    }

    /// The operation on `Scalar`s under the lock, if every field and argument is one and the
    /// operation needs no Python. The inputs are numbered fields first, then arguments; a
    /// field whose result is the input it was keeps its object, any other takes the object of
    /// the input it is, or a new `int` or `float`.
    fn run_scalars<'py, Op, const A: usize>(
        &self,
        py: Python<'py>,
        args: [&Bound<'py, PyAny>; A],
    ) -> Option<Ran<'py, Op::Answer>>
    where
        Op: FieldOperation<N, A>,
    {
        let scalar_args: [Scalar; A] = Scalar::inputs(|j| Scalar::input(args[j], N + j))?;
        let mut stored = self.lock();
        let fields: [Scalar; N] = Scalar::inputs(|i| {
            let value = stored.fields[i].value()?;
            Some(Scalar::from_input(value, i))
        })?;
        let (updated, answer) = Op::apply(fields, &scalar_args);
        let answer = answer.ok()?;
        let input = |position: usize| match position.checked_sub(N) {
            None => stored.fields[position].object().bind(py).clone(),
            Some(j) => args[j].clone(),
        };
        let objects: [Option<Bound<'py, PyAny>>; N] = std::array::from_fn(|i| {
            (updated[i].origin() != Some(i)).then(|| updated[i].into_object(py, input))
        });
        for ((field, object), scalar) in stored.fields.iter_mut().zip(objects).zip(updated) {
            if let Some(object) = object {
                field.set_scalar(object, scalar.value());
            }
        }
        stored.bump();
        let reported = stored.fields[Op::REPORTED].object().bind(py).clone();
        Some((Ok(answer), reported))
    }

    /// Visit every field for the cycle collector.
    pub fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        // Never wait here: the collector may run while this thread holds the lock. Skipping a
        // visit only makes the collector keep these objects alive a little longer.
        if let Ok(stored) = self.state.try_lock() {
            for field in &stored.fields {
                visit.call(field.object())?;
            }
        }
        Ok(())
    }

    /// Set every field to `None`, to break a reference cycle.
    pub fn clear(&self, py: Python<'_>) {
        let cleared = std::array::from_fn(|_| StoredObject::new(py.None().into_bound(py)));
        let displaced = {
            let mut stored = self.lock();
            stored.bump();
            std::mem::replace(&mut stored.fields, cleared)
        };
        drop(displaced);
    }
}

/// What running an operation gives: its answer, and the object its reported field then holds.
pub type Ran<'py, A> = (PyResult<A>, Bound<'py, PyAny>);

/// A core operation on a record's fields, written once for every kind of number: the glue runs
/// it on `Scalar`s under the lock when it can, and on any Python numbers otherwise.
pub trait FieldOperation<const N: usize, const A: usize> {
    /// What the operation decides, apart from the new fields.
    type Answer;

    /// The field whose object the caller reports with the answer (a bucket's balance after a
    /// decision is the very object the bucket then holds, as in the course).
    const REPORTED: usize;

    /// The fields after the operation (also when it failed part-way) and its answer.
    fn apply<Q: Quantity>(
        fields: [Q; N],
        args: &[Q; A],
    ) -> ([Q; N], Result<Self::Answer, Q::Error>);
}

/// The position of `name` in `names`, at compile time.
pub const fn field_index(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        if const_str_eq(names[i], name) {
            return i;
        }
        i += 1;
    }
    panic!("no such field")
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Defines a mutable pyclass whose fields live in [`SharedFields`] and which behaves as a
/// `@dataclass` with those fields, in that order: readable and writable attributes, `repr`,
/// `==` (and so unhashable), `__match_args__`, pickle and copy, and cycle collection.
///
/// Each field names its setter method; a default is a function returning the default object
/// (called once per instance, so a `{}` default is a fresh dict each time), and the text
/// signature spells the defaults as Python would.
macro_rules! mutable_record {
    (
        $(#[doc = $doc:expr])*
        pub struct $rust:ident as $name:literal in $module:literal {
            $($field:ident / $setter:ident $(= $default:expr)?),+ $(,)?
        }
        text_signature = $text:literal;
        $(methods { $($methods:tt)* })?
    ) => {
        $(#[doc = $doc])*
        #[::pyo3::pyclass(frozen, name = $name, module = $module)]
        pub struct $rust {
            fields: $crate::python::record::SharedFields<{ [$(stringify!($field)),+].len() }>,
        }

        impl $rust {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),+];
        }

        $crate::python::record::record_methods! {
            $rust as $name, frozen = false, [$($field $(= $default)?),+],
            values(this, py) = this.fields.objects(py),
        {
            #[new]
            #[pyo3(signature = ($($field $(= $default)?),+), text_signature = $text)]
            fn __new__(py: ::pyo3::Python<'_>, $($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self {
                    fields: $crate::python::record::SharedFields::new([
                        $($field.into_bound(py)),+
                    ]),
                }
            }

            $(
                #[getter]
                fn $field(&self, py: ::pyo3::Python<'_>) -> ::pyo3::Py<::pyo3::PyAny> {
                    const INDEX: usize =
                        $crate::python::record::field_index($rust::NAMES, stringify!($field));
                    self.fields.get(py, INDEX)
                }

                #[setter]
                fn $setter(&self, value: ::pyo3::Bound<'_, ::pyo3::PyAny>) {
                    const INDEX: usize =
                        $crate::python::record::field_index($rust::NAMES, stringify!($field));
                    self.fields.set(INDEX, value);
                }
            )+

            fn __traverse__(
                &self,
                visit: ::pyo3::PyVisit<'_>,
            ) -> Result<(), ::pyo3::PyTraverseError> {
                self.fields.traverse(&visit)
            }

            fn __clear__(&self) {
                ::pyo3::Python::attach(|py| self.fields.clear(py));
            }

            $($($methods)*)?
        } }
    };
}

pub(crate) use mutable_record;
