//! Text the way Python writes it.
//!
//! The course builds its messages with f-strings, and `f"{value}"` is `format(value, "")`: for a
//! float that is `1.5` or `1e+16`, for a `Fraction` `3/2`. Rust's `Display` spells numbers
//! differently, so every value that goes into a message is formatted by Python.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// `format(value, "")`, which is what an f-string's `{value}` produces.
pub fn format_value(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let py = value.py();
    let spec = PyString::new(py, "");
    // SAFETY: both pointers are live objects; the result is a new reference or NULL with an
    // exception set.
    let text = unsafe {
        Bound::from_owned_ptr_or_err(py, ffi::PyObject_Format(value.as_ptr(), spec.as_ptr()))?
    };
    Ok(text.cast::<PyString>()?.to_cow()?.into_owned())
}
