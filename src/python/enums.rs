//! Outcome enums as real `enum.Enum` classes with `str` mixed in.
//!
//! The course declares `class ConsumeOutcome(str, Enum)`: scripts compare members with strings,
//! look them up by value and print their `repr`. A PyO3 enum is not an `Enum`, so the glue asks
//! Python's `enum` module to build the class once, at import, and keeps its members so that a
//! core outcome becomes the very member object (`is` holds) with no lookup by name.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

/// A `(str, Enum)` class and its members, in declaration order.
pub struct StrEnum {
    class: Py<PyType>,
    members: Vec<Py<PyAny>>,
}

impl StrEnum {
    /// `class <qualname>(str, Enum)` in module `module`, with `members` as `(NAME, "Value")`.
    pub fn new(
        py: Python<'_>,
        qualname: &str,
        module: &str,
        doc: &str,
        members: &[(&str, &str)],
    ) -> PyResult<Self> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("module", module)?;
        kwargs.set_item("qualname", qualname)?;
        kwargs.set_item("type", py.get_type::<pyo3::types::PyString>())?;
        let class = py
            .import("enum")?
            .getattr("Enum")?
            .call((qualname, members.to_vec()), Some(&kwargs))?
            .cast_into::<PyType>()?;
        class.setattr("__doc__", doc)?;
        let members = members
            .iter()
            .map(|(name, _)| class.getattr(*name).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        Ok(Self {
            class: class.unbind(),
            members,
        })
    }

    /// The class, to export from the module.
    pub fn class<'py>(&self, py: Python<'py>) -> &Bound<'py, PyType> {
        self.class.bind(py)
    }

    /// The member at `index` in declaration order.
    pub fn member(&self, py: Python<'_>, index: usize) -> Py<PyAny> {
        self.members[index].clone_ref(py)
    }
}
