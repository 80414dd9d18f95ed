//! Whole traces in from Python: buffers of integers of any width, read once.
//!
//! The trace operations (`mark_many`, `try_acquire_many`) take numpy arrays, `array.array`,
//! `memoryview`s or plain lists. A native-layout buffer is read in place; anything else item by
//! item, each checked as an int. Either way the values are copied out with the interpreter held
//! and then processed with it released. The answers go back as an `array('B')` of codes.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::python::args::nanoseconds;

/// A buffer of integers of any width (numpy arrays, `array.array`, `memoryview`), or a list or
/// tuple of ints, read a piece at a time.
pub enum IntBuffer {
    I64(PyBuffer<i64>),
    I32(PyBuffer<i32>),
    I16(PyBuffer<i16>),
    I8(PyBuffer<i8>),
    U64(PyBuffer<u64>, &'static str),
    U32(PyBuffer<u32>),
    U16(PyBuffer<u16>),
    U8(PyBuffer<u8>),
    Values(Vec<i64>),
}

impl IntBuffer {
    pub fn new(value: &Bound<'_, PyAny>, name: &'static str) -> PyResult<Self> {
        // The fast way: a C-contiguous, one-dimensional buffer of native integers, read in place.
        macro_rules! native {
            ($t:ty, $variant:expr) => {
                if let Ok(buffer) = PyBuffer::<$t>::get(value) {
                    if native_layout(&buffer) {
                        return Ok($variant(buffer));
                    }
                }
            };
        }
        native!(i64, Self::I64);
        native!(i32, Self::I32);
        native!(i16, Self::I16);
        native!(i8, Self::I8);
        native!(u64, |b| Self::U64(b, name));
        native!(u32, Self::U32);
        native!(u16, Self::U16);
        native!(u8, Self::U8);
        // A buffer of something other than integers is refused by its format.
        if let Ok(memory) = pyo3::types::PyMemoryView::from(value) {
            let format = memory.getattr("format")?.str()?.to_string();
            if !format
                .trim_start_matches(['@', '=', '<', '>', '!'])
                .chars()
                .all(|c| "bBhHiIlLqQnN".contains(c))
            {
                return Err(PyTypeError::new_err(format!(
                    "{name} must hold integers, not items of format {format:?}"
                )));
            }
        }
        // Anything else iterable (lists, tuples, empty, strided or byte-swapped arrays): item by
        // item, each an int as Python sees it.
        let Ok(items) = value.try_iter() else {
            return Err(PyTypeError::new_err(format!(
                "{name} must be a buffer of integers (numpy array, array.array, memoryview) or a \
                 list, not {}",
                value.get_type().name()?
            )));
        };
        let values = items
            .enumerate()
            .map(|(i, item)| nanoseconds(&item?, &format!("{name}[{i}]")))
            .collect::<PyResult<_>>()?;
        Ok(Self::Values(values))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::I64(b) => b.item_count(),
            Self::I32(b) => b.item_count(),
            Self::I16(b) => b.item_count(),
            Self::I8(b) => b.item_count(),
            Self::U64(b, _) => b.item_count(),
            Self::U32(b) => b.item_count(),
            Self::U16(b) => b.item_count(),
            Self::U8(b) => b.item_count(),
            Self::Values(v) => v.len(),
        }
    }

    /// Items `start..start + out.len()`, as `i64`s. Read with the interpreter held, so no
    /// Python code changes the buffer while it is read (native code that writes the buffer
    /// with the interpreter released, or another thread on a free-threaded build, could still
    /// race with this copy: the caller must not change a trace while it is being marked).
    pub fn read(&self, _py: Python<'_>, start: usize, out: &mut [i64]) -> PyResult<()> {
        match self {
            Self::I64(b) => read_widened(b, start, out),
            Self::I32(b) => read_widened(b, start, out),
            Self::I16(b) => read_widened(b, start, out),
            Self::I8(b) => read_widened(b, start, out),
            Self::U32(b) => read_widened(b, start, out),
            Self::U16(b) => read_widened(b, start, out),
            Self::U8(b) => read_widened(b, start, out),
            Self::U64(b, name) => {
                let base = items(b, start + out.len());
                for (i, o) in out.iter_mut().enumerate() {
                    // SAFETY: `items` checked the bounds; see `read_widened`.
                    let value = unsafe { base.add(start + i).read_unaligned() };
                    *o = i64::try_from(value).map_err(|_| {
                        PyValueError::new_err(format!(
                            "{name}[{}] must be at most 2**63 - 1, not {value}",
                            start + i
                        ))
                    })?;
                }
            }
            Self::Values(values) => out.copy_from_slice(&values[start..start + out.len()]),
        }
        Ok(())
    }
}

/// Whether a buffer can be read in place: one dimension, C-contiguous, in the machine's own
/// byte order and sizes (a format with no prefix, or `@`).
fn native_layout<T: Element>(buffer: &PyBuffer<T>) -> bool {
    let format = buffer.format().to_bytes();
    buffer.dimensions() <= 1
        && buffer.is_c_contiguous()
        && !matches!(format.first(), Some(b'=' | b'<' | b'>' | b'!'))
}

/// The first item of a C-contiguous buffer holding at least `end` items.
fn items<T: Element>(buffer: &PyBuffer<T>, end: usize) -> *const T {
    let all = buffer.as_slice_ptr().expect("checked to be C-contiguous");
    assert!(end <= all.len(), "reading past the buffer's end");
    all.as_ptr().cast::<T>()
}

fn read_widened<T: Element + Copy + Into<i64>>(
    buffer: &PyBuffer<T>,
    start: usize,
    out: &mut [i64],
) {
    let base = items(buffer, start + out.len());
    for (i, o) in out.iter_mut().enumerate() {
        // SAFETY: `items` checked that `start + i` is within the buffer, which stays alive (and
        // its memory valid) as long as `buffer` does; unaligned reads accept any layout.
        *o = unsafe { base.add(start + i).read_unaligned() }.into();
    }
}

/// Codes (one byte each) as an `array('B')`.
pub fn code_array(
    py: Python<'_>,
    codes: impl ExactSizeIterator<Item = u8>,
) -> PyResult<Bound<'_, PyAny>> {
    let bytes = PyBytes::new_with(py, codes.len(), |bytes| {
        for (byte, code) in bytes.iter_mut().zip(codes) {
            *byte = code;
        }
        Ok(())
    })?;
    py.import("array")?.getattr("array")?.call1(("B", bytes))
}
