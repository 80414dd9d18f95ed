//! Dataclass behaviour for native classes.
//!
//! The course's result types are `@dataclass(frozen=True)` and its buckets are `@dataclass`. A
//! course script may print them, compare them, hash them, pickle them or `match` on them, so the
//! native classes reproduce what the generated dataclass methods do:
//!
//! * `repr`: `QualName(field=repr(value), ...)`, with `...` for a value that contains itself;
//! * `==`: the tuples of fields compared, and only against an instance of the very same class;
//! * `hash` (frozen classes): the hash of that tuple; mutable classes are unhashable;
//! * assigning or deleting an attribute of a frozen instance raises
//!   `dataclasses.FrozenInstanceError`;
//! * `__match_args__`, and `__reduce__` for pickle and `copy`.
//!
//! [`frozen_record!`] writes all of that for an immutable class of Python-object fields; the
//! mutable bucket uses the helper functions directly.

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyTuple, PyType};
use pyo3::{ffi, IntoPyObjectExt};

/// `QualName(name=repr(value), ...)`, as a dataclass's generated `__repr__` writes it.
pub fn repr(instance: &Bound<'_, PyAny>, fields: &[(&str, Bound<'_, PyAny>)]) -> PyResult<String> {
    let Some(_guard) = ReprGuard::enter(instance)? else {
        return Ok("...".to_owned());
    };
    let qualname = instance.get_type().qualname()?;
    let mut text = format!("{qualname}(");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
        text.push('=');
        text.push_str(&value.repr()?.to_cow()?);
    }
    text.push(')');
    Ok(text)
}

/// Marks an object as being repr'd in this thread, so a value that contains it prints `...`
/// instead of recursing forever (what `reprlib.recursive_repr` does for dataclasses).
struct ReprGuard<'a, 'py>(&'a Bound<'py, PyAny>);

impl<'a, 'py> ReprGuard<'a, 'py> {
    fn enter(instance: &'a Bound<'py, PyAny>) -> PyResult<Option<Self>> {
        // SAFETY: a live object; the call returns 0 (entered), 1 (already inside) or -1 (error).
        match unsafe { ffi::Py_ReprEnter(instance.as_ptr()) } {
            0 => Ok(Some(Self(instance))),
            1 => Ok(None),
            _ => Err(PyErr::fetch(instance.py())),
        }
    }
}

impl Drop for ReprGuard<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: paired with a successful `Py_ReprEnter` on the same object.
        unsafe { ffi::Py_ReprLeave(self.0.as_ptr()) }
    }
}

/// The field values of two instances of one class, in field order.
pub type FieldPair<'py, const N: usize> = ([Bound<'py, PyAny>; N], [Bound<'py, PyAny>; N]);

/// `==` and `!=` as a dataclass generates them: the field tuples compared (Python's equality for
/// each pair, identity first), and only when `other` is an instance of the very same class;
/// `NotImplemented` otherwise, and for the ordering operators, so Python can try the other side.
pub fn compare_fields<'py, const N: usize>(
    py: Python<'py>,
    op: CompareOp,
    fields: Option<FieldPair<'py, N>>,
) -> PyResult<Py<PyAny>> {
    let (Some((a, b)), CompareOp::Eq | CompareOp::Ne) = (fields, op) else {
        return Ok(py.NotImplemented());
    };
    let equal = PyTuple::new(py, a)?.eq(PyTuple::new(py, b)?)?;
    (equal == matches!(op, CompareOp::Eq)).into_py_any(py)
}

/// `hash(tuple(fields))`, a frozen dataclass's hash.
pub fn fields_hash<'py>(py: Python<'py>, fields: &[Bound<'py, PyAny>]) -> PyResult<isize> {
    PyTuple::new(py, fields)?.hash()
}

/// `dataclasses.FrozenInstanceError` with the message a frozen dataclass gives.
pub fn frozen_instance_error(py: Python<'_>, verb: &str, name: &str) -> PyErr {
    static FROZEN_INSTANCE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    match FROZEN_INSTANCE_ERROR.import(py, "dataclasses", "FrozenInstanceError") {
        Ok(class) => PyErr::from_type(class.clone(), format!("cannot {verb} field '{name}'")),
        Err(err) => err,
    }
}

/// Defines an immutable pyclass of Python-object fields that behaves as a
/// `@dataclass(frozen=True)` with those fields, in that order.
macro_rules! frozen_record {
    (
        $(#[doc = $doc:expr])*
        pub struct $rust:ident as $name:literal in $module:literal {
            $($field:ident),+ $(,)?
        }
    ) => {
        $(#[doc = $doc])*
        #[::pyo3::pyclass(frozen, name = $name, module = $module)]
        pub struct $rust {
            $(pub $field: ::pyo3::Py<::pyo3::PyAny>,)+
        }

        impl $rust {
            fn field_values<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> [::pyo3::Bound<'py, ::pyo3::PyAny>; [$(stringify!($field)),+].len()] {
                [$(self.$field.bind(py).clone()),+]
            }
        }

        #[::pyo3::pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = ($($field),+))]
            fn __new__($($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self { $($field),+ }
            }

            $(
                #[getter]
                fn $field(&self, py: ::pyo3::Python<'_>) -> ::pyo3::Py<::pyo3::PyAny> {
                    self.$field.clone_ref(py)
                }
            )+

            #[classattr]
            fn __match_args__(
                py: ::pyo3::Python<'_>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'_, ::pyo3::types::PyTuple>> {
                ::pyo3::types::PyTuple::new(py, [$(stringify!($field)),+])
            }

            fn __repr__(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<String> {
                let py = slf.py();
                let this = slf.get();
                $crate::python::record::repr(
                    slf.as_any(),
                    &[$((stringify!($field), this.$field.bind(py).clone())),+],
                )
            }

            fn __richcmp__(
                slf: &::pyo3::Bound<'_, Self>,
                other: &::pyo3::Bound<'_, ::pyo3::PyAny>,
                op: ::pyo3::basic::CompareOp,
            ) -> ::pyo3::PyResult<::pyo3::Py<::pyo3::PyAny>> {
                let py = slf.py();
                let fields = other.cast_exact::<Self>().ok().map(|other| {
                    (slf.get().field_values(py), other.get().field_values(py))
                });
                $crate::python::record::compare_fields(py, op, fields)
            }

            fn __hash__(&self, py: ::pyo3::Python<'_>) -> ::pyo3::PyResult<isize> {
                $crate::python::record::fields_hash(py, &self.field_values(py))
            }

            fn __setattr__(
                &self,
                py: ::pyo3::Python<'_>,
                name: &str,
                _value: ::pyo3::Bound<'_, ::pyo3::PyAny>,
            ) -> ::pyo3::PyResult<()> {
                Err($crate::python::record::frozen_instance_error(py, "assign to", name))
            }

            fn __delattr__(&self, py: ::pyo3::Python<'_>, name: &str) -> ::pyo3::PyResult<()> {
                Err($crate::python::record::frozen_instance_error(py, "delete", name))
            }

            fn __reduce__<'py>(
                slf: &::pyo3::Bound<'py, Self>,
            ) -> ::pyo3::PyResult<(
                ::pyo3::Bound<'py, ::pyo3::types::PyType>,
                ::pyo3::Bound<'py, ::pyo3::types::PyTuple>,
            )> {
                let py = slf.py();
                Ok((
                    slf.get_type(),
                    ::pyo3::types::PyTuple::new(py, slf.get().field_values(py))?,
                ))
            }

            fn __traverse__(
                &self,
                visit: ::pyo3::PyVisit<'_>,
            ) -> Result<(), ::pyo3::PyTraverseError> {
                $(visit.call(&self.$field)?;)+
                Ok(())
            }
        }
    };
}

pub(crate) use frozen_record;
