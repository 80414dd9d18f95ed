//! Any Python `str` as UTF-8 bytes, and back, exactly.
//!
//! A Python `str` may hold a lone surrogate (`"\ud800"`), which UTF-8 proper cannot encode. The
//! `surrogatepass` error handler writes it as the three bytes its code point would take, and
//! reads those bytes back as the same lone surrogate, so every `str` survives the round trip,
//! and two strs have equal bytes exactly when Python says they are equal. The codec is called
//! through the C API, never through a `str` method that a subclass could override.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

const UTF8: &std::ffi::CStr = c"utf-8";
const SURROGATEPASS: &std::ffi::CStr = c"surrogatepass";

/// The str's own UTF-8, unless it holds a lone surrogate. Reading it sets no Python error
/// (so nothing is left to release later); for a non-ASCII str, CPython keeps the UTF-8 copy
/// it makes, as it does whenever C code reads a str as UTF-8.
pub fn as_str<'a>(text: &'a Bound<'_, PyString>) -> Option<&'a str> {
    let mut length: ffi::Py_ssize_t = 0;
    // SAFETY: `text` is a live str; the result is NULL with an exception set, or UTF-8 bytes
    // owned by the str, valid while it lives (`'a`).
    let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(text.as_ptr(), &raw mut length) };
    if data.is_null() {
        // SAFETY: the failed call set the error; clearing it releases the exception at once.
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    let length = usize::try_from(length).expect("a str's length is not negative");
    // SAFETY: CPython hands out valid UTF-8 of `length` bytes at `data`, alive with `text`.
    Some(unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(data.cast(), length)) })
}

/// `text.encode("utf-8", "surrogatepass")`, by `str`'s own codec.
pub fn encode<'py>(text: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyBytes>> {
    // SAFETY: `text` is a live str and the names are C strings; the result is a new reference
    // to bytes, or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            text.py(),
            ffi::PyUnicode_AsEncodedString(text.as_ptr(), UTF8.as_ptr(), SURROGATEPASS.as_ptr()),
        )
        .map(|bytes| bytes.cast_into_unchecked())
    }
}

/// `bytes.decode("utf-8", "surrogatepass")`.
pub fn decode<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    let length = isize::try_from(bytes.len()).expect("a slice is shorter than isize::MAX");
    // SAFETY: the pointer and length describe `bytes`, alive for the call; the handler's name
    // is a C string. The result is a new reference to a str, or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyUnicode_DecodeUTF8(bytes.as_ptr().cast(), length, SURROGATEPASS.as_ptr()),
        )
        .map(|text| text.cast_into_unchecked())
    }
}
