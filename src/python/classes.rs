//! `protocol_in_code.qos.classes` for Python: the course's class tree, validated and walked by
//! the core.
//!
//! The tree stays a Python dict that callers build and mutate as they like; each call reads it
//! into the core's plain map and asks the core. Class names must be `str`, as in the course:
//! that lets the core compare them exactly as Python compares strings.

use pyo3::call::PyCallArgs;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use pyo3::{intern, IntoPyObjectExt};

use crate::core::classes::{self as core, TreeError, Validation};
use crate::python::enums::StrEnum;
use crate::python::number::Num;
use crate::python::record::{defaults, frozen_record, mutable_record};

frozen_record! {
    /// A traffic class: its name, the rate it is guaranteed, and its parent's name (`None` for a
    /// root).
    pub struct TrafficClass as "TrafficClass" in "protocol_in_code.qos.classes" {
        name,
        guaranteed_rate,
        parent = defaults::none(),
    }
    text_signature = "(name, guaranteed_rate, parent=None)";
}

mutable_record! {
    /// Classes by name: a dict from each class's name to its `TrafficClass`, nothing more. Each
    /// tree gets its own dict unless one is given.
    pub struct ClassTree as "ClassTree" in "protocol_in_code.qos.classes" {
        classes / set_classes = defaults::dict(),
    }
    text_signature = "(classes={})";
}

/// The course's `ValidationOutcome(str, Enum)`.
pub static VALIDATION_OUTCOME: StrEnum = StrEnum::new(
    "ValidationOutcome",
    "protocol_in_code.qos.classes",
    "What validate_tree found first: VALID, UNKNOWN_PARENT, CYCLE or OVER_SUBSCRIBED.",
    &[
        ("VALID", "Valid"),
        ("UNKNOWN_PARENT", "UnknownParent"),
        ("CYCLE", "Cycle"),
        ("OVER_SUBSCRIBED", "OverSubscribed"),
    ],
);

frozen_record! {
    /// What `validate_tree` found, and a detail for people (empty when the tree is valid).
    pub struct ValidationResult as "ValidationResult" in "protocol_in_code.qos.classes" {
        outcome,
        detail,
    }
}

/// Check a class tree in three passes and report the first problem.
///
/// 1. UNKNOWN_PARENT, `"video -> ghost"`: a class names a parent that is not in the tree.
/// 2. CYCLE, `"cycle reached at a"`: walking up from a class reaches some name twice.
/// 3. OVER_SUBSCRIBED, `"default: children claim 120 > guaranteed 100"`: the direct children
///    of a class are guaranteed more, together, than the class itself. The children's rates
///    are summed under the parent name each child gives, then each parent is checked in the
///    order the classes first named it.
///
/// Otherwise VALID, with an empty detail. Each pass runs only if the ones before found nothing,
/// since a walk up an unknown parent or round a cycle would be meaningless.
#[pyfunction]
pub fn validate_tree(tree: &Bound<'_, PyAny>) -> PyResult<ValidationResult> {
    let py = tree.py();
    let read = read_classes(tree)?;
    let found = core::validate_tree(&core_tree(&read)?).map_err(|e| tree_error(py, e))?;
    // Each detail is the course's f-string, built by `str.format` (which formats each value
    // as `format(value, "")`, in order, as the f-string does), with names as exact strs.
    let (index, detail) = match found {
        Validation::Valid => (0, PyString::new(py, "")),
        Validation::UnknownParent { class, parent } => (
            1,
            format(
                intern!(py, "{} -> {}"),
                (name_str(py, &class)?, name_str(py, &parent)?),
            )?,
        ),
        Validation::Cycle { at } => (
            2,
            format(intern!(py, "cycle reached at {}"), (name_str(py, &at)?,))?,
        ),
        Validation::OverSubscribed {
            parent,
            claimed,
            guaranteed,
        } => (
            3,
            format(
                intern!(py, "{}: children claim {} > guaranteed {}"),
                (
                    name_str(py, &parent)?,
                    claimed.into_object(),
                    guaranteed.into_object(),
                ),
            )?,
        ),
    };
    Ok(ValidationResult::from_fields(
        VALIDATION_OUTCOME.member(py, index)?,
        detail.into_any().unbind(),
    ))
}

/// The rate `class_name` could borrow: walking from the class up to the root, each class adds
/// `max(guaranteed_rate - its direct children's guaranteed rates, 0)`, the part of its own
/// guarantee that its children leave unclaimed. The children's rates are summed for every
/// parent in the tree before the walk starts.
///
/// Raises KeyError for a name that is not in the tree, and ValueError if the walk goes round a
/// cycle (validate the tree first).
#[pyfunction]
pub fn borrowable<'py>(
    tree: &Bound<'py, PyAny>,
    class_name: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = tree.py();
    let read = read_classes(tree)?;
    let classes = core_tree(&read)?;
    if class_name.is_none() || class_name.cast::<PyString>().is_err() {
        // The course tallies the whole tree's claims before its walk looks at the name.
        core::Claims::of(&classes)?;
        // The walk stops at None before looking anything up: nothing to borrow.
        if class_name.is_none() {
            return 0_i64.into_bound_py_any(py);
        }
        // Every key is a str, so a name of any other type is simply not in the tree (a dict
        // lookup would still hash it first, and reject it if it cannot be hashed).
        class_name.hash()?;
        return Err(PyKeyError::new_err((class_name.clone().unbind(),)));
    }
    let class_name = Text::of(class_name)?;
    let total = core::borrowable(&classes, &class_name.bytes()?).map_err(|e| tree_error(py, e))?;
    Ok(total.into_object())
}

/// One entry of `tree.classes`, its fields read and its names checked to be strs.
struct ReadClass<'py> {
    key: Text<'py>,
    name: Text<'py>,
    guaranteed_rate: Num<'py>,
    parent: Option<Text<'py>>,
}

/// `tree.classes.items()`, each class's fields read (`parent`, `name`, `guaranteed_rate`, in
/// that order) and its names checked (the name, the parent, then the key).
fn read_classes<'py>(tree: &Bound<'py, PyAny>) -> PyResult<Vec<ReadClass<'py>>> {
    let py = tree.py();
    let items = tree
        .getattr(intern!(py, "classes"))?
        .call_method0(intern!(py, "items"))?;
    let mut read = Vec::new();
    for item in items.try_iter()? {
        let (key, class) = item?.extract::<(Bound<'py, PyAny>, Bound<'py, PyAny>)>()?;
        let parent = class.getattr(intern!(py, "parent"))?;
        let name = Text::of(&class.getattr(intern!(py, "name"))?)?;
        let guaranteed_rate = Num::new(&class.getattr(intern!(py, "guaranteed_rate"))?);
        let parent = if parent.is_none() {
            None
        } else {
            Some(Text::of(&parent)?)
        };
        read.push(ReadClass {
            key: Text::of(&key)?,
            name,
            guaranteed_rate,
            parent,
        });
    }
    Ok(read)
}

/// The classes read as the core's map, in dict order, stored as they are made: names as
/// their bytes ([`Text::bytes`], borrowed from `read`), rates as numbers.
fn core_tree<'a, 'py>(read: &'a [ReadClass<'py>]) -> PyResult<core::ClassTree<Name<'a>, Num<'py>>> {
    core::ClassTree::try_new(read.iter().map(|class| {
        let entry = core::TrafficClass {
            name: class.name.bytes()?,
            guaranteed_rate: class.guaranteed_rate.clone(),
            parent: class.parent.as_ref().map(Text::bytes).transpose()?,
        };
        Ok((class.key.bytes()?, entry))
    }))
}

/// A class name as the core compares it: the str's UTF-8 bytes, lone surrogates included
/// (`surrogatepass`), so two names are equal exactly when Python says so.
type Name<'a> = &'a [u8];

/// A class name checked to be a str, held so that its bytes ([`Name`]) can be borrowed: the
/// str itself, whose UTF-8 Python keeps (or makes once, and keeps), or for a str holding a
/// lone surrogate, which has no UTF-8, `str.encode(name, "utf-8", "surrogatepass")`. Both
/// give the bytes `surrogatepass` gives, so any two names compare as Python compares the strs.
struct Text<'py>(Bound<'py, PyAny>);

impl<'py> Text<'py> {
    /// `name`'s text, if it is a str. `encode` is called through the `str` type, so that a
    /// subclass's own is not used: a subclass is read as its text.
    fn of(name: &Bound<'py, PyAny>) -> PyResult<Self> {
        let py = name.py();
        let Ok(text) = name.cast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "class names must be str, not {}: {}",
                name.get_type().name()?,
                name.repr()?
            )));
        };
        if text.to_str().is_ok() {
            return Ok(Self(name.clone()));
        }
        let encoded = py.get_type::<PyString>().call_method1(
            intern!(py, "encode"),
            (name, intern!(py, "utf-8"), intern!(py, "surrogatepass")),
        )?;
        Ok(Self(encoded))
    }

    /// The bytes the core compares: the str's UTF-8, or the bytes encoded for it.
    fn bytes(&self) -> PyResult<Name<'_>> {
        match self.0.cast::<PyBytes>() {
            Ok(encoded) => Ok(encoded.as_bytes()),
            Err(_) => Ok(self.0.cast::<PyString>()?.to_str()?.as_bytes()),
        }
    }
}

/// The exact str a core name came from: `bytes.decode(name, "utf-8", "surrogatepass")`.
fn name_str<'py>(py: Python<'py>, name: &Name<'_>) -> PyResult<Bound<'py, PyAny>> {
    PyBytes::new(py, name).call_method1(
        intern!(py, "decode"),
        (intern!(py, "utf-8"), intern!(py, "surrogatepass")),
    )
}

/// `template.format(*values)`.
fn format<'py>(
    template: &Bound<'py, PyString>,
    values: impl PyCallArgs<'py>,
) -> PyResult<Bound<'py, PyString>> {
    let py = template.py();
    Ok(template
        .call_method1(intern!(py, "format"), values)?
        .cast_into::<PyString>()?)
}

fn tree_error(py: Python<'_>, error: TreeError<Name<'_>, PyErr>) -> PyErr {
    match error {
        TreeError::MissingClass(name) => match name_str(py, &name) {
            Ok(name) => PyKeyError::new_err((name.unbind(),)),
            Err(err) => err,
        },
        TreeError::Cycle(name) => match name_str(py, &name) {
            Ok(name) => PyValueError::new_err(format!(
                "cycle reached at {name}: walking up from the class comes back to it"
            )),
            Err(err) => err,
        },
        TreeError::Number(error) => error,
    }
}
