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
//! * `__match_args__`, and `__reduce__` for pickle and `copy`;
//! * `__dataclass_fields__` and `__dataclass_params__`, taken from a dataclass made with the same
//!   fields, so that the `dataclasses` module's own functions (`is_dataclass`, `fields`,
//!   `asdict`, `astuple`, `replace`) treat a native class as the course's dataclass.
//!
//! [`frozen_record!`] writes all of that for an immutable class of Python-object fields,
//! [`mutable_record!`] for a mutable one whose fields live in [`SharedFields`]; both write
//! what they share through [`record_methods!`], and the helper functions here are what they
//! expand to.

mod frozen;
mod mutable;

pub(crate) use frozen::frozen_record;
pub(crate) use mutable::{field_index, mutable_record, FieldOperation, SharedFields};

use std::cell::RefCell;

use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PySet, PyTuple, PyType};
use pyo3::IntoPyObjectExt;

/// `QualName(name=repr(value), ...)`, as a dataclass's generated `__repr__` writes it.
pub fn repr(instance: &Bound<'_, PyAny>, fields: &[(&str, Bound<'_, PyAny>)]) -> PyResult<String> {
    let Some(_guard) = ReprGuard::enter(instance) else {
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

thread_local! {
    /// The objects this thread is repr'ing now, by address.
    static IN_REPR: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks an object as being repr'd in this thread, so a value that contains it prints `...`
/// instead of recursing forever (what `reprlib.recursive_repr` does for dataclasses).
struct ReprGuard(usize);

impl ReprGuard {
    fn enter(instance: &Bound<'_, PyAny>) -> Option<Self> {
        let address = instance.as_ptr() as usize;
        IN_REPR.with_borrow_mut(|inside| {
            if inside.contains(&address) {
                return None;
            }
            inside.push(address);
            Some(Self(address))
        })
    }
}

impl Drop for ReprGuard {
    fn drop(&mut self) {
        IN_REPR.with_borrow_mut(|inside| {
            if let Some(i) = inside.iter().rposition(|&address| address == self.0) {
                inside.remove(i);
            }
        });
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

/// The `dataclasses` module's description of a dataclass named `name` with these fields, in
/// order, each with its default if it has one: the source of a native record's
/// `__dataclass_fields__` and `__dataclass_params__`. A default that is a `list`, `dict` or
/// `set` is described as a `default_factory` of its type, as a dataclass must declare it.
///
/// Made once per class, into the class's own `made` cell.
pub fn dataclass_description<'py>(
    made: &'py PyOnceLock<Py<PyAny>>,
    py: Python<'py>,
    name: &str,
    frozen: bool,
    fields: &[(&str, Option<Py<PyAny>>)],
) -> PyResult<&'py Bound<'py, PyAny>> {
    made.get_or_try_init(py, || {
        make_dataclass(py, name, frozen, fields).map(Bound::unbind)
    })
    .map(|description| description.bind(py))
}

fn make_dataclass<'py>(
    py: Python<'py>,
    name: &str,
    frozen: bool,
    fields: &[(&str, Option<Py<PyAny>>)],
) -> PyResult<Bound<'py, PyAny>> {
    let dataclasses = py.import("dataclasses")?;
    let any = py.import("typing")?.getattr("Any")?;
    let specs = PyList::empty(py);
    for (field, default) in fields {
        let Some(default) = default else {
            specs.append((field, &any))?;
            continue;
        };
        let default = default.bind(py);
        let options = PyDict::new(py);
        if default.is_exact_instance_of::<PyList>()
            || default.is_exact_instance_of::<PyDict>()
            || default.is_exact_instance_of::<PySet>()
        {
            options.set_item("default_factory", default.get_type())?;
        } else {
            options.set_item("default", default)?;
        }
        let field_spec = dataclasses.call_method("field", (), Some(&options))?;
        specs.append((field, &any, field_spec))?;
    }
    let options = PyDict::new(py);
    options.set_item("frozen", frozen)?;
    dataclasses.call_method("make_dataclass", (name, specs), Some(&options))
}

/// How a record class describes itself to the `dataclasses` module (its
/// [`dataclass_description`], made once).
pub type Describe = for<'py> fn(Python<'py>) -> PyResult<&'py Bound<'py, PyAny>>;

/// A record class's `__dataclass_fields__` or `__dataclass_params__`, made when first read.
///
/// Describing a class takes the `dataclasses` module, which imports `inspect` and `ast` (about
/// 40 ms here); a program that never asks should not pay for that when it imports the course's
/// modules. So the class attribute is this descriptor, which asks `describe` on first use.
#[pyclass(frozen, module = "protocol_in_code._native")]
pub struct DataclassAttribute {
    attribute: &'static str,
    describe: Describe,
}

impl DataclassAttribute {
    /// `__dataclass_fields__`.
    pub fn fields(describe: Describe) -> Self {
        Self {
            attribute: "__dataclass_fields__",
            describe,
        }
    }

    /// `__dataclass_params__`.
    pub fn params(describe: Describe) -> Self {
        Self {
            attribute: "__dataclass_params__",
            describe,
        }
    }
}

#[pymethods]
impl DataclassAttribute {
    fn __get__<'py>(
        &self,
        py: Python<'py>,
        _instance: Option<&Bound<'py, PyAny>>,
        _owner: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        (self.describe)(py)?.getattr(self.attribute)
    }
}

/// Expands to `Some(default)` for a field with a default, `None` for one without.
macro_rules! field_default {
    () => {
        None
    };
    ($default:expr) => {
        Some($default)
    };
}

pub(crate) use field_default;

/// Expands to a record class's `dataclass_description` function (see [`dataclass_description`]):
/// the class named `$name`, frozen or not, with these fields and defaults, in order.
macro_rules! describe_as_dataclass {
    ($name:literal, frozen = $frozen:literal, $($field:ident $(= $default:expr)?),+) => {
        fn dataclass_description(
            py: ::pyo3::Python<'_>,
        ) -> ::pyo3::PyResult<&::pyo3::Bound<'_, ::pyo3::PyAny>> {
            static MADE: ::pyo3::sync::PyOnceLock<::pyo3::Py<::pyo3::PyAny>> =
                ::pyo3::sync::PyOnceLock::new();
            let fields = [$((
                stringify!($field),
                $crate::python::record::field_default!($($default)?),
            )),+];
            $crate::python::record::dataclass_description(&MADE, py, $name, $frozen, &fields)
        }
    };
}

pub(crate) use describe_as_dataclass;

/// Writes what every record class has as its dataclass has it: its description as a dataclass
/// named `$name`, frozen or not, of these fields and defaults; `field_values`, the fields'
/// values in order (`values`, an expression of `this` and `py`); and the `#[pymethods]`
/// (`__dataclass_fields__`, `__dataclass_params__`, `__match_args__`, `repr`, `==` against the
/// very same class, pickle), then `own`, the methods of its kind (frozen or mutable) and its
/// own.
macro_rules! record_methods {
    (
        $rust:ident as $name:literal, frozen = $frozen:literal,
        [$($field:ident $(= $default:expr)?),+],
        values($this:ident, $py:ident) = $values:expr,
        { $($own:tt)* }
    ) => {
        impl $rust {
            $crate::python::record::describe_as_dataclass!(
                $name, frozen = $frozen, $($field $(= $default)?),+
            );

            fn field_values<'py>(
                &self,
                $py: ::pyo3::Python<'py>,
            ) -> [::pyo3::Bound<'py, ::pyo3::PyAny>; [$(stringify!($field)),+].len()] {
                let $this = self;
                $values
            }
        }

        #[::pyo3::pymethods]
        impl $rust {
            #[classattr]
            fn __dataclass_fields__() -> $crate::python::record::DataclassAttribute {
                $crate::python::record::DataclassAttribute::fields(Self::dataclass_description)
            }

            #[classattr]
            fn __dataclass_params__() -> $crate::python::record::DataclassAttribute {
                $crate::python::record::DataclassAttribute::params(Self::dataclass_description)
            }

            #[classattr]
            fn __match_args__(
                py: ::pyo3::Python<'_>,
            ) -> ::pyo3::PyResult<::pyo3::Bound<'_, ::pyo3::types::PyTuple>> {
                ::pyo3::types::PyTuple::new(py, [$(stringify!($field)),+])
            }

            fn __repr__(slf: &::pyo3::Bound<'_, Self>) -> ::pyo3::PyResult<String> {
                let values = slf.get().field_values(slf.py());
                let names = [$(stringify!($field)),+];
                let named: Vec<_> = names.into_iter().zip(values).collect();
                $crate::python::record::repr(slf.as_any(), &named)
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

            $($own)*
        }
    };
}

pub(crate) use record_methods;

/// `dataclasses.FrozenInstanceError` with the message a frozen dataclass gives.
pub fn frozen_instance_error(py: Python<'_>, verb: &str, name: &str) -> PyErr {
    static FROZEN_INSTANCE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    match FROZEN_INSTANCE_ERROR.import(py, "dataclasses", "FrozenInstanceError") {
        Ok(class) => PyErr::from_type(class.clone(), format!("cannot {verb} field '{name}'")),
        Err(err) => err,
    }
}

/// Defaults for record fields, each made anew per instance as a dataclass's
/// `field(default_factory=...)` would (a shared `{}` default would be a classic bug).
pub mod defaults {
    use pyo3::prelude::*;
    use pyo3::types::{PyDict, PyList, PyTuple};

    /// The int `0`.
    pub fn zero() -> Py<PyAny> {
        Python::attach(|py| {
            0_i64
                .into_pyobject(py)
                .map_or_else(|never| match never {}, |zero| zero.into_any().unbind())
        })
    }

    /// `None`.
    #[allow(clippy::redundant_closure_for_method_calls)] // the method is not general enough
    pub fn none() -> Py<PyAny> {
        Python::attach(|py| py.None())
    }

    /// A new, empty `dict`.
    pub fn dict() -> Py<PyAny> {
        Python::attach(|py| PyDict::new(py).into_any().unbind())
    }

    /// The empty `tuple` (immutable, so one is shared as a dataclass would share it).
    pub fn empty_tuple() -> Py<PyAny> {
        Python::attach(|py| PyTuple::empty(py).into_any().unbind())
    }

    /// A new, empty `list`.
    pub fn list() -> Py<PyAny> {
        Python::attach(|py| PyList::empty(py).into_any().unbind())
    }
}
