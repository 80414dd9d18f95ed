//! Immutable records: `@dataclass(frozen=True)` for native classes.

/// Defines an immutable pyclass of Python-object fields that behaves as a
/// `@dataclass(frozen=True)` with those fields, in that order.
macro_rules! frozen_record {
    (
        $(#[doc = $doc:expr])*
        pub struct $rust:ident as $name:literal in $module:literal {
            $($field:ident $(= $default:expr)?),+ $(,)?
        }
        $(text_signature = $text:literal;)?
        $(methods { $($methods:tt)* })?
    ) => {
        $(#[doc = $doc])*
        #[::pyo3::pyclass(frozen, name = $name, module = $module)]
        pub struct $rust {
            $(pub $field: $crate::python::record::Field,)+
        }

        // SAFETY: the class is declared just above: frozen, not subclassable, no `__dict__`, no
        // weak references; `fields` lists its own fields, each once.
        unsafe impl $crate::python::record::Record<{ [$(stringify!($field)),+].len() }> for $rust {
            fn spare() -> &'static $crate::python::record::Spare {
                static SPARE: $crate::python::record::Spare = $crate::python::record::Spare::new();
                &SPARE
            }

            fn fields(&self) -> [&$crate::python::record::Field; [$(stringify!($field)),+].len()] {
                [$(&self.$field),+]
            }

            fn from_values(
                [$($field),+]: [::pyo3::Py<::pyo3::PyAny>; [$(stringify!($field)),+].len()],
            ) -> Self {
                Self::from_fields($($field),+)
            }
        }

        impl $rust {
            #[allow(clippy::too_many_arguments)] // one per field
            pub fn from_fields($($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self { $($field: $crate::python::record::Field::new($field)),+ }
            }

            /// A record of these values (the class's spare one if nobody holds it: see
            /// [`crate::python::record::make`]).
            pub fn make<'py>(
                py: ::pyo3::Python<'py>,
                $($field: ::pyo3::Bound<'py, ::pyo3::PyAny>),+
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, Self>> {
                $crate::python::record::make(py, [$($field),+])
            }

            $crate::python::record::describe_as_dataclass!(
                $name, frozen = true, $($field $(= $default)?),+
            );

            fn field_values<'py>(
                &self,
                py: ::pyo3::Python<'py>,
            ) -> [::pyo3::Bound<'py, ::pyo3::PyAny>; [$(stringify!($field)),+].len()] {
                [$(self.$field.get().bind(py).clone()),+]
            }
        }

        #[::pyo3::pymethods]
        impl $rust {
            #[new]
            #[pyo3(signature = ($($field $(= $default)?),+) $(, text_signature = $text)?)]
            fn __new__($($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self::from_fields($($field),+)
            }

            $(
                #[getter]
                fn $field(&self, py: ::pyo3::Python<'_>) -> ::pyo3::Py<::pyo3::PyAny> {
                    self.$field.get().clone_ref(py)
                }
            )+

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
                let py = slf.py();
                let this = slf.get();
                $crate::python::record::repr(
                    slf.as_any(),
                    &[$((stringify!($field), this.$field.get().bind(py).clone())),+],
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
                $(visit.call(self.$field.get())?;)+
                Ok(())
            }

            $($($methods)*)?
        }
    };
}

pub(crate) use frozen_record;
