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

use crate::python::args::integer;

/// A buffer of integers of any width (numpy arrays, `array.array`, `memoryview`), or a list or
/// tuple of ints, read a piece at a time.
pub enum IntBuffer {
    I64(PyBuffer<i64>),
    I32(PyBuffer<i32>),
    I16(PyBuffer<i16>),
    I8(PyBuffer<i8>),
    U64(PyBuffer<u64>),
    U32(PyBuffer<u32>),
    U16(PyBuffer<u16>),
    U8(PyBuffer<u8>),
    Values(Vec<i128>),
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
        native!(u64, Self::U64);
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
            .map(|(i, item)| {
                let value = integer(&item?, &format!("{name}[{i}]"))?;
                value
                    .extract::<i128>()
                    .ok()
                    .filter(|v| (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(v))
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "{name}[{i}] must be between -2**63 and 2**64 - 1, not {value}"
                        ))
                    })
            })
            .collect::<PyResult<_>>()?;
        Ok(Self::Values(values))
    }

    pub fn len(&self) -> usize {
        match self {
            Self::I64(b) => b.item_count(),
            Self::I32(b) => b.item_count(),
            Self::I16(b) => b.item_count(),
            Self::I8(b) => b.item_count(),
            Self::U64(b) => b.item_count(),
            Self::U32(b) => b.item_count(),
            Self::U16(b) => b.item_count(),
            Self::U8(b) => b.item_count(),
            Self::Values(v) => v.len(),
        }
    }

    /// Every item as a `T`, or a ValueError naming the first item out of `T`'s range, the
    /// parameter and what the items must be. Items are widened to `i128` (which holds any of
    /// them) one at a time, on the way. Read with the interpreter held, so no Python code
    /// changes the buffer while it is read (native code that writes the buffer with the
    /// interpreter released, or another thread on a free-threaded build, could still race with
    /// this copy: the caller must not change a trace while it is used).
    pub fn narrowed<T: TryFrom<i128>>(&self, name: &str, must: &str) -> PyResult<Vec<T>> {
        let narrow = |i: usize, value: i128| {
            T::try_from(value)
                .map_err(|_| PyValueError::new_err(format!("{name}[{i}] must {must}, not {value}")))
        };
        match self {
            Self::I64(b) => read_narrowed(b, narrow),
            Self::I32(b) => read_narrowed(b, narrow),
            Self::I16(b) => read_narrowed(b, narrow),
            Self::I8(b) => read_narrowed(b, narrow),
            Self::U64(b) => read_narrowed(b, narrow),
            Self::U32(b) => read_narrowed(b, narrow),
            Self::U16(b) => read_narrowed(b, narrow),
            Self::U8(b) => read_narrowed(b, narrow),
            Self::Values(values) => values
                .iter()
                .enumerate()
                .map(|(i, &value)| narrow(i, value))
                .collect(),
        }
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

/// Every item of `buffer`, copied out by PyO3 (`PyBuffer_ToContiguous`), then narrowed.
fn read_narrowed<E: Element + Copy + Into<i128>, T>(
    buffer: &PyBuffer<E>,
    narrow: impl Fn(usize, i128) -> PyResult<T>,
) -> PyResult<Vec<T>> {
    // Every caller is attached already; this only names the token.
    let items = Python::attach(|py| buffer.to_vec(py))?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| narrow(i, item.into()))
        .collect()
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
