//! Python objects as keys of a keyed limiter, without calling Python for the common ones.
//!
//! A keyed limiter must treat keys as a `dict` does: keys that compare equal (with equal
//! hashes) are one client, so `1`, `1.0`, `True`, `Fraction(1)` and `numpy.int64(1)` share a
//! bucket, and `"a"` and `b"a"` do not. The table itself is plain Rust and runs no Python code
//! under its locks, so every key is first turned into a [`Key`]:
//!
//! * exact `str`, `bytes`, `int` (from -2**63 to 2**64 - 1), `bool` and integral `float` are
//!   read directly, with no call to `__hash__` or `__eq__`: the fast path;
//! * a `str` or `bytes` subclass, or a number of another type (an `IntEnum` member, a
//!   `Decimal`, a `Fraction`, a numpy integer) that equals one of those, is found by asking
//!   Python, once per call, which plain value it equals (an object that is not a number is never
//!   taken for an int, and a `str` or `bytes` subclass is only compared with its own value:
//!   one whose `__eq__` says it equals a *different* plain value, a case-insensitive string
//!   say, is a key of its own);
//! * everything else (tuples, big ints, non-integral floats, objects) gets a number from a
//!   [`Registry`]: a Python dict from key object to number, kept only for keys the table holds.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::Equivalent;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyComplex, PyDict, PyFloat, PyInt, PyString};

use crate::core::exact::keyed::KeyedLimiter;
use crate::python::number::exact_i64;

/// A key as the table stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Int(i64),
    /// An int from 2**63 to 2**64 - 1 (a uint64 that no `i64` holds).
    Wide(u64),
    Str(Box<str>),
    Bytes(Box<[u8]>),
    /// A key object's number in the [`Registry`].
    Object(u64),
}

/// A key as a call looks it up: borrowed from the Python object, so a lookup allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRef<'a> {
    Int(i64),
    Wide(u64),
    Str(&'a str),
    Bytes(&'a [u8]),
    Object(u64),
}

impl Key {
    fn as_ref(&self) -> KeyRef<'_> {
        match self {
            Self::Int(value) => KeyRef::Int(*value),
            Self::Wide(value) => KeyRef::Wide(*value),
            Self::Str(text) => KeyRef::Str(text),
            Self::Bytes(bytes) => KeyRef::Bytes(bytes),
            Self::Object(id) => KeyRef::Object(*id),
        }
    }

    /// Whether the table should say when it forgets this key (the registry must let go of it).
    pub fn is_registered(&self) -> bool {
        matches!(self, Self::Object(_))
    }
}

/// Hashed as its borrowed form, so that a `KeyRef` finds the `Key` it equals.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}

/// One write to the hasher per key, not two: keys of different kinds may share a hash (an int
/// and an object number), which equality sorts out, and the hot path hashes on every call.
impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match *self {
            #[allow(clippy::cast_sign_loss)] // the bits, not the value
            Self::Int(value) => state.write_u64(value as u64),
            Self::Wide(value) => state.write_u64(value),
            Self::Str(text) => text.hash(state),
            Self::Bytes(bytes) => bytes.hash(state),
            Self::Object(number) => state.write_u64(number),
        }
    }
}

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        *self == key.as_ref()
    }
}

impl From<&KeyRef<'_>> for Key {
    fn from(key: &KeyRef<'_>) -> Self {
        match *key {
            KeyRef::Int(value) => Self::Int(value),
            KeyRef::Wide(value) => Self::Wide(value),
            KeyRef::Str(text) => Self::Str(text.into()),
            KeyRef::Bytes(bytes) => Self::Bytes(bytes.into()),
            KeyRef::Object(id) => Self::Object(id),
        }
    }
}

/// What a Python key turned out to be.
pub enum Classified<'a> {
    Plain(KeyRef<'a>),
    /// Neither equal to a plain key nor one: the registry numbers it.
    Object,
}

/// Turn `key` into a plain key if it is, or equals, one.
pub fn classify<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<Classified<'a>> {
    if let Some(plain) = exact_plain(key) {
        return Ok(plain);
    }
    // Not an exact plain type: Python decides what it equals, as a dict would.
    let hash = key.hash()?;
    let py = key.py();
    if let Ok(text) = key.cast::<PyString>() {
        if let Ok(value) = text.to_str() {
            let plain = PyString::new(py, value);
            if plain.hash()? == hash && key.eq(&plain)? {
                return Ok(Classified::Plain(KeyRef::Str(value)));
            }
        }
        return Ok(Classified::Object);
    }
    if let Ok(bytes) = key.cast::<PyBytes>() {
        let value = bytes.as_bytes();
        let plain = PyBytes::new(py, value);
        if plain.hash()? == hash && key.eq(&plain)? {
            return Ok(Classified::Plain(KeyRef::Bytes(value)));
        }
        return Ok(Classified::Object);
    }
    // Only a number (something with __index__, __int__ or __float__, as `PyNumber_Check` has
    // it) is asked whether it equals an int: a tuple or a plain object is not, and asking would
    // cost a call each.
    if !is_number(key)? {
        return Ok(Classified::Object);
    }
    for candidate in ints_hashing_to(hash) {
        if key.eq(candidate)? {
            return Ok(plain_int(candidate).map_or(Classified::Object, Classified::Plain));
        }
    }
    Ok(Classified::Object)
}

/// 2**63, the first float beyond the 64-bit ints.
const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;

/// The fast path: exact `str`, `bytes`, `int`, `bool` and `float`, read without calling Python.
/// `None` for other types; `Some(Object)` for values of these types that no plain key equals.
fn exact_plain<'a>(key: &'a Bound<'_, PyAny>) -> Option<Classified<'a>> {
    if key.is_exact_instance_of::<PyString>() {
        // A str with lone surrogates has no UTF-8 form: the registry takes it.
        let text = key.cast::<PyString>().ok()?;
        return Some(text.to_str().map_or(Classified::Object, |value| {
            Classified::Plain(KeyRef::Str(value))
        }));
    }
    if key.is_exact_instance_of::<PyInt>() || key.is_exact_instance_of::<pyo3::types::PyBool>() {
        if let Some(value) = key.cast::<PyInt>().ok().and_then(exact_i64) {
            return Some(Classified::Plain(KeyRef::Int(value)));
        }
        // Beyond 64 bits an int equals no plain key (only big ints and floats, in the registry).
        return Some(wide(key).map_or(Classified::Object, Classified::Plain));
    }
    if key.is_exact_instance_of::<PyBytes>() {
        let bytes = key.cast::<PyBytes>().ok()?;
        return Some(Classified::Plain(KeyRef::Bytes(bytes.as_bytes())));
    }
    if key.is_exact_instance_of::<PyFloat>() {
        let value = key.cast::<PyFloat>().ok()?.value();
        // -2**63 <= value < 2**64, integral: equal to exactly one plain int.
        #[allow(clippy::cast_possible_truncation)] // integral and within range
        let plain = (value.fract() == 0.0 && (-TWO_TO_63..2.0 * TWO_TO_63).contains(&value))
            .then(|| plain_int(value as i128))
            .flatten();
        return Some(plain.map_or(Classified::Object, Classified::Plain));
    }
    None
}

/// An exact `int` from `2**63` to `2**64 - 1`, as a plain key; `None` beyond.
fn wide(int: &Bound<'_, PyAny>) -> Option<KeyRef<'static>> {
    int.extract::<u64>().ok().map(KeyRef::Wide)
}

/// Whether `key` is a number as `PyNumber_Check` has it: its type converts it with
/// `__index__`, `__int__` or `__float__`, or it is a complex.
fn is_number(key: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = key.py();
    let class = key.get_type();
    Ok(key.is_instance_of::<PyComplex>()
        || class.hasattr(intern!(py, "__index__"))?
        || class.hasattr(intern!(py, "__int__"))?
        || class.hasattr(intern!(py, "__float__"))?)
}

/// An int as a plain key: `Int` within `i64`, `Wide` up to `2**64 - 1`.
pub fn plain_int(value: i128) -> Option<KeyRef<'static>> {
    i64::try_from(value)
        .map(KeyRef::Int)
        .or_else(|_| u64::try_from(value).map(KeyRef::Wide))
        .ok()
}

/// The plain ints (from -2**63 to 2**64 - 1) whose Python hash is `hash`: an object equal to
/// an int hashes like it, so these are the only ints it can equal. Python hashes an int by its
/// absolute value modulo the Mersenne prime 2**61 - 1, sign kept (so 0 for every multiple of
/// it), and -1 becomes -2.
fn ints_hashing_to(hash: isize) -> impl Iterator<Item = i128> {
    const MODULUS: i128 = (1 << 61) - 1;
    let hash = hash as i128;
    let positive = (hash >= 0).then_some((hash, 1));
    let negative = (hash <= 0).then_some((hash, -1));
    let minus_one = (hash == -2).then_some((-1, -1));
    [positive, negative, minus_one]
        .into_iter()
        .flatten()
        .flat_map(|(residue, sign)| {
            (0..=8)
                .map(move |m| residue + sign * m * MODULUS)
                .filter(|&candidate| plain_int(candidate).is_some())
        })
}

/// The numbers of key objects that are not plain keys.
///
/// A dict maps each such key (as Python compares keys) to its number, and a second dict maps
/// the number back to the object, for iteration and pickling. A key is registered while the
/// table holds it: when the table forgets a registered key, the registry lets go of it at its
/// next use, so memory stays bounded by the table's own bound.
///
/// Looking a key up runs the key's `__hash__` and `__eq__`, so registry operations take a lock
/// of their own, waited for with the interpreter released; a key whose `__eq__` calls back into
/// the same limiter gets a `RuntimeError` instead of a deadlock. Plain keys never come here.
pub struct Registry {
    /// Held for a whole lookup-decide-register sequence; holds the next number.
    lock: Mutex<u64>,
    /// The thread holding `lock`, as the address of a thread-local (0: none).
    holder: AtomicUsize,
    numbers: Py<PyDict>,
    objects: Py<PyDict>,
}

/// A number never given to a key: what an unregistered key is looked up as.
const UNREGISTERED: u64 = u64::MAX;

thread_local! {
    static THREAD_MARK: u8 = const { 0 };
}

fn this_thread() -> usize {
    THREAD_MARK.with(|mark| std::ptr::from_ref(mark) as usize)
}

struct Entered<'a> {
    next: MutexGuard<'a, u64>,
    holder: &'a AtomicUsize,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.holder.store(0, Ordering::Release);
    }
}

impl Registry {
    pub fn new(py: Python<'_>) -> Self {
        Self {
            lock: Mutex::new(0),
            holder: AtomicUsize::new(0),
            numbers: PyDict::new(py).unbind(),
            objects: PyDict::new(py).unbind(),
        }
    }

    fn enter(&self, py: Python<'_>) -> PyResult<Entered<'_>> {
        if self.holder.load(Ordering::Acquire) == this_thread() {
            return Err(PyRuntimeError::new_err(
                "a key's __hash__ or __eq__ used the limiter it is a key of",
            ));
        }
        let next = self
            .lock
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        self.holder.store(this_thread(), Ordering::Release);
        Ok(Entered {
            next,
            holder: &self.holder,
        })
    }

    /// Run `decide` on the registered form of `key`. If `stores` and the key is new, it is
    /// registered first (the step that runs Python code, and so may fail) and kept only if the
    /// table then holds it: the table never holds a number whose object is not registered.
    pub fn with_object<R>(
        &self,
        key: &Bound<'_, PyAny>,
        table: &KeyedLimiter<Key>,
        stores: bool,
        decide: impl FnOnce(&KeyRef<'_>) -> R,
    ) -> PyResult<R> {
        let py = key.py();
        let mut entered = self.enter(py)?;
        self.release_forgotten(py, table);
        let numbers = self.numbers.bind(py);
        if let Some(number) = numbers.get_item(key)? {
            return Ok(decide(&KeyRef::Object(number.extract()?)));
        }
        if !stores {
            return Ok(decide(&KeyRef::Object(UNREGISTERED)));
        }
        let number = *entered.next;
        *entered.next += 1;
        self.register(py, key, number)?;
        let decided = decide(&KeyRef::Object(number));
        if !table.contains(&KeyRef::Object(number)) {
            self.unregister(py, number)?;
        }
        Ok(decided)
    }

    /// Register the objects of a saved table's keys under their saved numbers (their hashes,
    /// so their shards, depend on them), run `restore`, and keep them registered only if it
    /// succeeds.
    pub fn restoring<R>(
        &self,
        py: Python<'_>,
        keys: &[(Bound<'_, PyAny>, u64)],
        restore: impl FnOnce() -> PyResult<R>,
    ) -> PyResult<R> {
        let mut entered = self.enter(py)?;
        let mut registered = Vec::with_capacity(keys.len());
        let mut outcome = Ok(());
        for (key, number) in keys {
            outcome = self.register_saved(py, key, *number);
            if outcome.is_err() {
                break;
            }
            registered.push(*number);
        }
        let restored = outcome.and_then(|()| restore());
        match &restored {
            Ok(_) => {
                let highest = registered.iter().max().map_or(0, |&number| number + 1);
                *entered.next = (*entered.next).max(highest);
            }
            Err(_) => {
                for &number in &registered {
                    // Already failing: the first error is the one to report.
                    let _ = self.unregister(py, number);
                }
            }
        }
        restored
    }

    fn register_saved(&self, py: Python<'_>, key: &Bound<'_, PyAny>, number: u64) -> PyResult<()> {
        if number == UNREGISTERED || self.objects.bind(py).contains(number)? {
            return Err(PyValueError::new_err(format!(
                "the saved state holds the key number {number} twice, or one out of range"
            )));
        }
        if self.numbers.bind(py).contains(key)? {
            return Err(PyValueError::new_err(format!(
                "the saved state holds the key {} twice",
                key.repr().map_or_else(|_| "?".into(), |r| r.to_string())
            )));
        }
        self.register(py, key, number)
    }

    /// Run `read` with no registration under way, so that every number the table holds has
    /// its object registered (to iterate or save a table).
    pub fn reading<R>(&self, py: Python<'_>, read: impl FnOnce() -> R) -> PyResult<R> {
        let _entered = self.enter(py)?;
        Ok(read())
    }

    fn register(&self, py: Python<'_>, key: &Bound<'_, PyAny>, number: u64) -> PyResult<()> {
        self.numbers.bind(py).set_item(key, number)?;
        self.objects.bind(py).set_item(number, key)
    }

    /// Forget `number` and its object: the object's entry first, since removing it runs the
    /// object's `__hash__` and `__eq__` and may fail; then the registry still maps both ways.
    fn unregister(&self, py: Python<'_>, number: u64) -> PyResult<()> {
        let objects = self.objects.bind(py);
        let Some(object) = objects.get_item(number)? else {
            return Ok(());
        };
        self.numbers.bind(py).del_item(object)?;
        objects.del_item(number)
    }

    /// Let go of the keys the table has forgotten and not taken back since. A key object whose
    /// hash now fails stays registered (memory, not correctness: its number is not in the
    /// table); its error is that key's, not the caller's, so it goes to `sys.unraisablehook`.
    fn release_forgotten(&self, py: Python<'_>, table: &KeyedLimiter<Key>) {
        for key in table.take_forgotten() {
            let Key::Object(number) = key else { continue };
            if table.contains(&KeyRef::Object(number)) {
                continue;
            }
            if let Err(error) = self.unregister(py, number) {
                error.write_unraisable(py, self.object(py, number).as_ref());
            }
        }
    }

    /// The key object registered under `number`, if any.
    pub fn object<'py>(&self, py: Python<'py>, number: u64) -> Option<Bound<'py, PyAny>> {
        self.objects.bind(py).get_item(number).ok().flatten()
    }

    /// For the cycle collector.
    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.numbers)?;
        visit.call(&self.objects)
    }
}

/// A stored key back as a Python object.
pub fn key_object<'py>(
    py: Python<'py>,
    key: &Key,
    registry: &Registry,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(Some(match key {
        Key::Int(value) => value.into_pyobject(py)?.into_any(),
        Key::Wide(value) => value.into_pyobject(py)?.into_any(),
        Key::Str(text) => PyString::new(py, text).into_any(),
        Key::Bytes(bytes) => PyBytes::new(py, bytes).into_any(),
        Key::Object(number) => return Ok(registry.object(py, *number)),
    }))
}
