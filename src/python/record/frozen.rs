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
        #[::pyo3::pyclass(frozen, get_all, name = $name, module = $module)]
        pub struct $rust {
            $(pub $field: ::pyo3::Py<::pyo3::PyAny>,)+
        }

        impl $rust {
            #[allow(clippy::too_many_arguments)] // one per field
            pub fn from_fields($($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self { $($field),+ }
            }

            /// A new record of these values.
            pub fn make<'py>(
                py: ::pyo3::Python<'py>,
                $($field: ::pyo3::Bound<'py, ::pyo3::PyAny>),+
            ) -> ::pyo3::PyResult<::pyo3::Bound<'py, Self>> {
                ::pyo3::Bound::new(py, Self::from_fields($($field.unbind()),+))
            }
        }

        $crate::python::record::record_methods! {
            $rust as $name, frozen = true, [$($field $(= $default)?),+],
            values(this, py) = [$(this.$field.bind(py).clone()),+],
        {
            #[new]
            #[pyo3(signature = ($($field $(= $default)?),+) $(, text_signature = $text)?)]
            fn __new__($($field: ::pyo3::Py<::pyo3::PyAny>),+) -> Self {
                Self::from_fields($($field),+)
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

            fn __traverse__(
                &self,
                visit: ::pyo3::PyVisit<'_>,
            ) -> Result<(), ::pyo3::PyTraverseError> {
                $(visit.call(&self.$field)?;)+
                Ok(())
            }

            $($($methods)*)?
        } }
    };
}

pub(crate) use frozen_record;
