//! Python objects as keys of a keyed limiter: equal as dict keys are, hashed with the table's
//! seed, and never with Python code running under a lock.
//!
//! A keyed limiter must treat keys as a `dict` does: keys that compare equal (with equal
//! hashes) are one client, so `1`, `1.0`, `True`, `Fraction(1)` and `numpy.int64(1)` share a
//! bucket, and `"a"` and `b"a"` do not. The table itself is plain Rust, so every key is first
//! turned into a [`Key`], with any Python code it takes (a `__hash__`, an `__eq__`) run before
//! any lock is taken:
//!
//! * the values a client can choose are read natively, and hashed by the table's seeded hash:
//!   `str`, `bytes`, ints of any size, floats, and tuples of these (nested up to 32 deep), so
//!   `(ip, route)` and `(user_id, endpoint)` are too. A value of another type that equals one
//!   of them (a `str` subclass, an `IntEnum` member, a `Decimal`, a `Fraction`, a numpy
//!   number, a namedtuple) is found by asking Python which plain value it equals, once per
//!   call; a tuple's items are read the same way, one by one, so `(1.0, "a")` is the key
//!   `(1, "a")`. (A `str`, `bytes` or tuple subclass is only compared with its own value: one
//!   whose `__eq__` says it equals a *different* plain value, a case-insensitive string say,
//!   is a key of its own; so is an object of another type that equals a `str` or `bytes`, a
//!   `UserString` or a `memoryview`: only numbers are asked which plain value they equal.) So
//!   a client cannot pick such keys to collide, as it could with Python's unseeded int hash
//!   (`n mod 2**61 - 1`), which a tuple's hash is made of, and a dict. A number other than an
//!   int is asked with `float(key)` first, and with `int(key)` only if that float is finite
//!   (below about 2**1024) or the number has no float, so a huge `Decimal` costs no more than
//!   a small one: `int(Decimal("1E+1000000"))` alone takes about a minute.
//! * anything else (an object of the program's own class, a `Fraction` equal to no float, a
//!   NaN, a number beyond the floats that `float(key)` says is infinite, a tuple holding any
//!   of these) gets a number from the [`Registry`], which compares it with the registered
//!   objects of the same Python hash by `__eq__`, with no lock held, then checks under its lock
//!   that nothing changed meanwhile. Such keys are the program's own choice, not a client's.
//!
//! A plain key longer than `LONGEST_KEPT` bytes is stored as its digest (see
//! [`KeyRef::kept`]): iteration and pickling give such a key back as a [`KeyDigest`], which
//! every call takes in its place.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyComplex, PyDict, PyFloat, PyInt, PyString, PyTuple};

use crate::core::exact::key::{
    self, big_int, digest_bytes, encode_item, first_item, plain_int, Digested, KeyRef,
};
use crate::python::number::exact_i64;
use crate::python::record::frozen_record;

mod registry;

pub use crate::core::exact::key::Classified;
pub use registry::Registry;

frozen_record! {
    /// A key that a keyed limiter keeps only as its digest, given back in its place.
    ///
    /// A key longer than 128 bytes (a str's UTF-8, bytes, an int's bytes, a tuple's items
    /// encoded one after another) is stored as a 128-bit digest, seeded per table, so that
    /// `max_keys` bounds the table's bytes too. The key itself is gone: iterating the table
    /// and pickling it give back a KeyDigest(kind, digest) instead, kind being "int", "str",
    /// "bytes" or "tuple" and digest 16 bytes. Every call that takes a key takes the
    /// KeyDigest too, for the key it stands for, in the table it came from and in that
    /// table's copies (pickled or copied, a table keeps its seed); in any other table it is a
    /// key of its own.
    pub struct KeyDigest as "KeyDigest" in "protocol_in_code.qos.keyed" {
        kind,
        digest,
    }
}

impl KeyDigest {
    /// The key this record stands for, if it is one that iteration could have given back (a
    /// known kind, a digest of 16 bytes: see `KeyRef::digest_named`); any other is a key of
    /// its own.
    fn key(&self, py: Python<'_>) -> Option<KeyRef<'static>> {
        let kind = self.kind.bind(py).cast_exact::<PyString>().ok()?;
        let digest = self.digest.bind(py).cast_exact::<PyBytes>().ok()?;
        KeyRef::digest_named(kind.to_str().ok()?, digest.as_bytes())
    }

    /// The record standing for a stored digest.
    fn of(py: Python<'_>, kind: Digested, low: u64, high: u64) -> PyResult<Bound<'_, Self>> {
        Self::make(
            py,
            PyString::new(py, kind.name()).into_any(),
            PyBytes::new(py, &digest_bytes(low, high)).into_any(),
        )
    }
}

/// How deep tuples of plain keys may nest; deeper ones are left to the registry.
const MAX_DEPTH: usize = 32;

/// Turn `key` into a plain key if it is, or equals, one. Runs the key's Python code (its
/// `__hash__`, `__eq__`, conversions) if it is not of an exact plain type.
pub fn classify<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<Classified<'a>> {
    classify_within(key, MAX_DEPTH)
}

/// `classify`, with tuples nested at most `depth` deep read natively.
fn classify_within<'a>(key: &'a Bound<'_, PyAny>, depth: usize) -> PyResult<Classified<'a>> {
    if let Some(plain) = exact_plain(key) {
        return Ok(plain);
    }
    if let Ok(tuple) = key.cast_exact::<PyTuple>() {
        return tuple_key(tuple, depth);
    }
    if key.is_exact_instance_of::<PyInt>() || key.is_exact_instance_of::<PyBool>() {
        // Beyond 64 bits: its size, then its bytes, are Python's to give.
        return int_key(key.cast::<PyInt>()?);
    }
    let py = key.py();
    if let Ok(digest) = key.cast_exact::<KeyDigest>() {
        return Ok(digest
            .get()
            .key(py)
            .map_or(Classified::Object, Classified::Plain));
    }
    // Not an exact plain type: Python decides what it equals, as a dict would.
    let hash = key.hash()?;
    let equals = |plain: &Bound<'_, PyAny>| -> PyResult<bool> {
        Ok(plain.hash()? == hash && key.eq(plain)?)
    };
    // A tuple subclass (a namedtuple) is asked, as a str subclass is, whether it equals the
    // plain tuple of its own items.
    if let Ok(tuple) = key.cast::<PyTuple>() {
        if equals(PyTuple::new(py, tuple)?.as_any())? {
            return tuple_key(tuple, depth);
        }
        return Ok(Classified::Object);
    }
    if let Ok(text) = key.cast::<PyString>() {
        if let Ok(value) = text.to_str() {
            if equals(&PyString::new(py, value))? {
                return Ok(Classified::Plain(KeyRef::Str(value)));
            }
        }
        return Ok(Classified::Object);
    }
    if let Ok(bytes) = key.cast::<PyBytes>() {
        let value = bytes.as_bytes();
        if equals(&PyBytes::new(py, value))? {
            return Ok(Classified::Plain(KeyRef::Bytes(value)));
        }
        return Ok(Classified::Object);
    }
    // Only a number (something with __index__, __int__ or __float__, as `PyNumber_Check` has
    // it) is asked which int or float it equals: a plain object is not, and asking would cost
    // calls each.
    let Some(number) = number_kind(key)? else {
        return Ok(Classified::Object);
    };
    // A complex equals a plain key only through its real part, and only with no imaginary part.
    // It is asked first: converting a complex to an int or a float fails, or warns (numpy).
    if let Ok(complex) = key.cast::<PyComplex>() {
        if complex.imag() != 0.0 {
            return Ok(Classified::Object);
        }
        return float_equal(&PyFloat::new(py, complex.real()), equals);
    }
    // An integer is asked int(key) at once: it costs what the integer's own size does. Any other
    // number is asked float(key) first, as a bound on its size: int(key) is only asked of one
    // whose float is finite (below about 2**1024 in magnitude, at most 309 digits), or that has
    // no float (a Fraction too big for one: its int costs its own size), since int(key) can
    // cost without limit (int(Decimal("1E+1000000")) makes a million digits, in about a
    // minute). A bigger number is a key of its own, even if an int equals it.
    let float_of = || conversion(py, py.get_type::<PyFloat>().call1((key,)));
    let mut float = None;
    if number == Number::Other {
        float = float_of()?;
    }
    let size = float
        .as_ref()
        .and_then(|float| float.cast_exact::<PyFloat>().ok())
        .map(|float| float.value().abs());
    if size.is_none_or(f64::is_finite) {
        if let Some(int) = conversion(py, py.get_type::<PyInt>().call1((key,)))? {
            if equals(&int)? {
                return match int.cast::<PyInt>() {
                    Ok(int) => int_key(int),
                    Err(_) => Ok(Classified::Object),
                };
            }
        }
    }
    if number == Number::Integer {
        float = float_of()?;
    }
    match float
        .as_ref()
        .and_then(|float| float.cast_exact::<PyFloat>().ok())
    {
        Some(float) => float_equal(float, equals),
        None => Ok(Classified::Object),
    }
}

/// The plain key of `float`, if it has one and the key being classified equals it (`equals`).
fn float_equal<'a>(
    float: &Bound<'_, PyFloat>,
    equals: impl Fn(&Bound<'_, PyAny>) -> PyResult<bool>,
) -> PyResult<Classified<'a>> {
    match key::float_key(float.value()) {
        Classified::Object => Ok(Classified::Object),
        plain if equals(float.as_any())? => Ok(plain),
        _ => Ok(Classified::Object),
    }
}

/// An exact int as a plain key: within `i128` as [`plain_int`] has it, else by its bytes
/// ([`Key::Huge`]: `bit_length() // 8 + 1` of them, two's complement, little endian), however
/// big, so that no int is left to Python's unseeded hash.
fn int_key<'a>(int: &Bound<'_, PyInt>) -> PyResult<Classified<'a>> {
    let py = int.py();
    // Its size first: an extraction that fails costs an exception, more than this call.
    let bits: usize = int.call_method0(intern!(py, "bit_length"))?.extract()?;
    if bits <= 128 {
        // -(2**127) has 128 bits and is an i128: whatever fits one is read as one.
        if let Ok(value) = int.extract::<i128>() {
            return Ok(Classified::Plain(plain_int(value)));
        }
    }
    let signed = PyDict::new(py);
    signed.set_item(intern!(py, "signed"), true)?;
    let bytes = int.call_method(
        intern!(py, "to_bytes"),
        (bits / 8 + 1, intern!(py, "little")),
        Some(&signed),
    )?;
    Ok(Classified::Huge(
        bytes.cast::<PyBytes>()?.as_bytes().to_vec(),
    ))
}

/// A tuple whose every item is, or equals, a plain key (a tuple of them, down to `depth`
/// levels) as one plain key, else an object for the registry. Two tuples equal as dict keys
/// have equal items, each read as the same plain key, so they encode alike: one key, hashed
/// with the table's seed.
fn tuple_key<'a>(tuple: &Bound<'_, PyTuple>, depth: usize) -> PyResult<Classified<'a>> {
    let Some(depth) = depth.checked_sub(1) else {
        return Ok(Classified::Object);
    };
    let mut items = Vec::new();
    for item in tuple {
        match classify_within(&item, depth)?.as_key() {
            Some(plain) => encode_item(plain, &mut items),
            None => return Ok(Classified::Object),
        }
    }
    Ok(Classified::Tuple(items))
}

/// A conversion's result (`int(key)`, `float(key)`), or `None` if the key cannot be converted
/// (a TypeError, ValueError or OverflowError: no such method, a NaN, an infinity); any other
/// error is the caller's.
fn conversion<'py>(
    py: Python<'py>,
    result: PyResult<Bound<'py, PyAny>>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error)
            if error.is_instance_of::<PyTypeError>(py)
                || error.is_instance_of::<PyValueError>(py)
                || error.is_instance_of::<PyOverflowError>(py) =>
        {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// The fast path: exact `str`, `bytes`, `int` and `bool` within 64 bits, and `float`, read
/// without calling Python. `None` for other types and bigger ints; `Object` for values of
/// these types that no plain key equals.
fn exact_plain<'a>(key: &'a Bound<'_, PyAny>) -> Option<Classified<'a>> {
    if let Ok(text) = key.cast_exact::<PyString>() {
        // A str with lone surrogates has no UTF-8 form: the registry takes it.
        return Some(text.to_str().map_or(Classified::Object, |value| {
            Classified::Plain(KeyRef::Str(value))
        }));
    }
    if key.is_exact_instance_of::<PyInt>() || key.is_exact_instance_of::<PyBool>() {
        let int = key.cast::<PyInt>().ok()?;
        return exact_i64(int).map(|value| Classified::Plain(KeyRef::Int(value)));
    }
    if let Ok(bytes) = key.cast_exact::<PyBytes>() {
        return Some(Classified::Plain(KeyRef::Bytes(bytes.as_bytes())));
    }
    if let Ok(float) = key.cast_exact::<PyFloat>() {
        return Some(key::float_key(float.value()));
    }
    None
}

/// What kind of number a key is, for asking it which plain key it equals.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Number {
    /// Its type has `__index__`: an int subclass, an `IntEnum`, a numpy integer.
    Integer,
    /// Any other number: a `Decimal`, a `Fraction`, a numpy float, a complex.
    Other,
}

/// The kind of number `key` is, or `None` if it is no number as `PyNumber_Check` has it (its
/// type converts it with none of `__index__`, `__int__` and `__float__`, and it is no complex).
fn number_kind(key: &Bound<'_, PyAny>) -> PyResult<Option<Number>> {
    let py = key.py();
    let class = key.get_type();
    if class.hasattr(intern!(py, "__index__"))? {
        return Ok(Some(Number::Integer));
    }
    let number = key.is_instance_of::<PyComplex>()
        || class.hasattr(intern!(py, "__int__"))?
        || class.hasattr(intern!(py, "__float__"))?;
    Ok(number.then_some(Number::Other))
}

/// A stored key back as a Python object (a tuple as the plain tuple of its items' values, a
/// digest as a [`KeyDigest`]).
pub fn key_object<'py>(
    py: Python<'py>,
    key: KeyRef<'_>,
    registry: &Registry,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(Some(match key {
        KeyRef::Int(value) => value.into_pyobject(py)?.into_any(),
        KeyRef::Wide(value) => value.into_pyobject(py)?.into_any(),
        KeyRef::Big(low, high) => big_int(low, high).into_pyobject(py)?.into_any(),
        KeyRef::Huge(bytes) => {
            let signed = PyDict::new(py);
            signed.set_item(intern!(py, "signed"), true)?;
            py.get_type::<PyInt>().call_method(
                intern!(py, "from_bytes"),
                (PyBytes::new(py, bytes), intern!(py, "little")),
                Some(&signed),
            )?
        }
        KeyRef::Digest(kind, low, high) => KeyDigest::of(py, kind, low, high)?.into_any(),
        KeyRef::Float(bits) => f64::from_bits(bits).into_pyobject(py)?.into_any(),
        KeyRef::Str(text) => PyString::new(py, text).into_any(),
        KeyRef::Bytes(bytes) => PyBytes::new(py, bytes).into_any(),
        KeyRef::Tuple(mut items) => {
            let mut objects = Vec::new();
            while let Some((item, rest)) = first_item(items) {
                let Some(object) = key_object(py, item, registry)? else {
                    return Ok(None);
                };
                objects.push(object);
                items = rest;
            }
            PyTuple::new(py, objects)?.into_any()
        }
        KeyRef::Object(number) => return Ok(registry.object(py, number)),
    }))
}
