//! Text built the way Python builds an f-string, without asking Python for most of it.
//!
//! An f-string such as `f"size={size}"` evaluates each `{value}` as `format(value, "")`, in
//! order, and joins the pieces once. [`FString`] does the same: literal pieces are Rust text,
//! an exact `int` within 64 bits is written by Rust (its decimal digits are exactly what
//! `format` gives, and asking Python for them would cost several times more), and every other
//! value goes through Python's `format`, so a custom `__format__` runs, and raises, where it
//! would in the f-string.
//!
//! The pieces are gathered as UTF-8, a lone surrogate included (see [`utf8`]), so every `str`
//! comes back exactly as it went in.

use std::io::Write as _;

use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::{ffi, intern};

use crate::python::number::Value;
use crate::python::utf8;

/// A line being built; [`FString::finish`] makes it a Python `str`.
#[derive(Default)]
pub struct FString(Vec<u8>);

impl FString {
    pub fn new() -> Self {
        Self(Vec::with_capacity(96)) // a course trace line, without growing
    }

    /// A literal piece.
    pub fn text(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    /// A piece already in this line's encoding: UTF-8, lone surrogates as `surrogatepass`
    /// writes them (see [`utf8`]). For the bytes of an exact `str`, the same as `{piece}`.
    pub fn utf8(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }

    /// `{value}`: `format(value, "")`.
    pub fn value(&mut self, value: &Bound<'_, PyAny>) -> PyResult<&mut Self> {
        if let Some(Value::Int(int)) = Value::of(value) {
            write!(self.0, "{int}").expect("writing to a Vec cannot fail");
        } else if let Ok(text) = value.cast_exact::<PyString>() {
            self.str(text)?; // format(s, "") is s itself
        } else {
            // `format` returns a str or raises.
            self.str(format(value)?.cast::<PyString>()?)?;
        }
        Ok(self)
    }

    fn str(&mut self, text: &Bound<'_, PyString>) -> PyResult<()> {
        if let Some(utf8) = utf8::as_str(text) {
            self.text(utf8);
        } else {
            // A lone surrogate: the one thing UTF-8 refuses.
            self.0.extend_from_slice(utf8::encode(text)?.as_bytes());
        }
        Ok(())
    }

    /// The line as a Python `str`.
    pub fn finish(self, py: Python<'_>) -> PyResult<Bound<'_, PyString>> {
        utf8::decode(py, &self.0)
    }
}

/// `format(value, "")`.
fn format<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = value.py();
    // SAFETY: both arguments are live objects; the result is a new reference, or NULL with an
    // exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyObject_Format(value.as_ptr(), intern!(py, "").as_ptr()),
        )
    }
}
