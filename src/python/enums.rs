//! Outcome enums as real `enum.Enum` classes with `str` mixed in.
//!
//! The course declares e.g. `class ConsumeOutcome(str, Enum)`: scripts compare members with
//! strings, look them up by value and print their `repr`. A PyO3 enum is not an `Enum`, so the
//! glue asks Python's `enum` module to build each class once, and keeps its members so that a
//! core outcome becomes the very member object (`is` holds) with no lookup by name.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyType};

/// A `(str, Enum)` class, described statically and built on first use.
pub struct StrEnum {
    qualname: &'static str,
    module: &'static str,
    doc: &'static str,
    /// `(NAME, "Value")`, in declaration order.
    members: &'static [(&'static str, &'static str)],
    built: PyOnceLock<Built>,
}

struct Built {
    class: Py<PyType>,
    members: Vec<Py<PyAny>>,
}

impl StrEnum {
    pub const fn new(
        qualname: &'static str,
        module: &'static str,
        doc: &'static str,
        members: &'static [(&'static str, &'static str)],
    ) -> Self {
        Self {
            qualname,
            module,
            doc,
            members,
            built: PyOnceLock::new(),
        }
    }

    fn built(&self, py: Python<'_>) -> PyResult<&Built> {
        self.built.get_or_try_init(py, || {
            let kwargs = PyDict::new(py);
            kwargs.set_item("module", self.module)?;
            kwargs.set_item("qualname", self.qualname)?;
            kwargs.set_item("type", py.get_type::<PyString>())?;
            let class = py
                .import("enum")?
                .getattr("Enum")?
                .call((self.qualname, self.members.to_vec()), Some(&kwargs))?
                .cast_into::<PyType>()?;
            class.setattr("__doc__", self.doc)?;
            let members: Vec<Py<PyAny>> = self
                .members
                .iter()
                .map(|(name, _)| class.getattr(*name).map(Bound::unbind))
                .collect::<PyResult<_>>()?;
            Ok(Built {
                class: class.unbind(),
                members,
            })
        })
    }

    /// The class, to export from the module.
    pub fn class<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyType>> {
        Ok(self.built(py)?.class.bind(py))
    }

    /// The text of the value of the member at `index` (what `member.value` holds).
    pub fn text(&self, index: usize) -> &'static str {
        self.members[index].1
    }

    /// The member at `index` in declaration order.
    pub fn member(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        Ok(self.built(py)?.members[index].clone_ref(py))
    }
}
