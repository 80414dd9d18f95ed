//! The keys that are objects of the program's own: each registered with a number, found by
//! hash and `==` as a dict finds a key, and let go of when the table forgets it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::core::exact::key::{Key, KeyRef};
use crate::core::exact::keyed::{KeyedLimiter, RestoreError};

/// The numbers of key objects that are not plain keys, and the lock that orders every use of
/// the table against a restore.
///
/// Each registered object is kept with its Python hash and its number, found by hash, then by
/// `==` (identity first), as a dict finds a key. The `==` runs with no lock held: a lookup
/// copies the registered objects of the key's hash, compares, then locks and checks that the
/// objects of that hash are still the same before it decides; if they changed meanwhile (another
/// thread registered or let go of one), it compares again. A key is registered while the table
/// holds it: when the table forgets a registered key, the registry lets go of it at its next
/// use, so memory stays bounded by the table's own bound. Objects let go of are released after
/// unlocking, since a finalizer is Python code too.
///
/// The same lock keeps calls and a restore apart: a restore re-seeds the table's hash, and a
/// call that hashed its key with the old seed would store it where it can no longer be found.
/// Only a table that no call has reached may be restored, so once one has, calls on plain keys
/// no longer take the lock.
pub struct Registry {
    state: RwLock<Registered>,
    /// Set, under the lock, by the first call to reach the table (or a restore): from then on
    /// no restore can run.
    used: AtomicBool,
}

#[derive(Default)]
struct Registered {
    /// Registered objects by Python hash, each with its number.
    by_hash: HashMap<isize, Vec<(Py<PyAny>, u64)>>,
    /// Each number's object and its Python hash.
    objects: HashMap<u64, (Py<PyAny>, isize)>,
    next: u64,
}

/// A number never given to a key: what an unregistered key is looked up as.
const UNREGISTERED: u64 = u64::MAX;

/// What a saved table's object keys are, read before anything is locked: each object with its
/// Python hash and its saved number.
pub struct SavedObjects(Vec<(Py<PyAny>, isize, u64)>);

impl Registered {
    fn numbers(&self, hash: isize) -> Vec<u64> {
        self.by_hash
            .get(&hash)
            .map_or_else(Vec::new, |known| known.iter().map(|&(_, n)| n).collect())
    }

    fn insert(&mut self, py: Python<'_>, object: Py<PyAny>, hash: isize, number: u64) {
        self.by_hash
            .entry(hash)
            .or_default()
            .push((object.clone_ref(py), number));
        self.objects.insert(number, (object, hash));
    }

    /// Forget `number`, handing its object to `released` (to be let go of once unlocked).
    fn remove(&mut self, number: u64, released: &mut Vec<Py<PyAny>>) {
        let Some((object, hash)) = self.objects.remove(&number) else {
            return;
        };
        released.push(object);
        if let Some(known) = self.by_hash.get_mut(&hash) {
            if let Some(i) = known.iter().position(|&(_, n)| n == number) {
                released.push(known.swap_remove(i).0);
            }
            if known.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
    }

    /// Let go of the keys the table has forgotten and not taken back since.
    fn release_forgotten(&mut self, table: &KeyedLimiter<Key>, released: &mut Vec<Py<PyAny>>) {
        for key in table.take_forgotten() {
            if let KeyRef::Object(number) = key.as_ref() {
                if !table.contains(&KeyRef::Object(number)) {
                    self.remove(number, released);
                }
            }
        }
    }
}

impl Registry {
    pub fn new() -> Self {
        Self {
            state: RwLock::new(Registered::default()),
            used: AtomicBool::new(false),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Registered> {
        // Every change completes without panicking or is not started.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Registered> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run `decide` for a plain key: only a restore waits for it, or makes it wait, and only
    /// until the table has been used.
    pub fn with_plain<R>(&self, decide: impl FnOnce() -> R) -> R {
        if self.used.load(Ordering::Acquire) {
            return decide();
        }
        let _gate = self.read();
        self.used.store(true, Ordering::Release);
        decide()
    }

    /// Run `decide` on the registered form of `key`. If `stores` and the key is new, it is
    /// registered first and kept only if the table then holds it: the table never holds a
    /// number whose object is not registered.
    pub fn with_object<R>(
        &self,
        key: &Bound<'_, PyAny>,
        table: &KeyedLimiter<Key>,
        stores: bool,
        decide: impl FnOnce(&KeyRef<'_>) -> R,
    ) -> PyResult<R> {
        let py = key.py();
        let hash = key.hash()?;
        let mut released = Vec::new();
        let (mut state, found) = loop {
            let candidates: Vec<(Py<PyAny>, u64)> = self
                .read()
                .by_hash
                .get(&hash)
                .map_or_else(Vec::new, |known| {
                    known.iter().map(|(o, n)| (o.clone_ref(py), *n)).collect()
                });
            let mut found = None;
            for (object, number) in &candidates {
                let object = object.bind(py);
                if object.is(key) || object.eq(key)? {
                    found = Some(*number);
                    break;
                }
            }
            let compared: Vec<u64> = candidates.iter().map(|&(_, n)| n).collect();
            drop(candidates);
            let mut state = self.write();
            self.used.store(true, Ordering::Release);
            state.release_forgotten(table, &mut released);
            if state.numbers(hash) == compared {
                break (state, found);
            }
            // Changed while we compared: compare again, with the lock free.
            drop(state);
        };
        let decided = match found {
            Some(number) => decide(&KeyRef::Object(number)),
            None if !stores => decide(&KeyRef::Object(UNREGISTERED)),
            None => {
                let number = state.next;
                state.next += 1;
                state.insert(py, key.clone().unbind(), hash, number);
                let decided = decide(&KeyRef::Object(number));
                if !table.contains(&KeyRef::Object(number)) {
                    state.remove(number, &mut released);
                }
                decided
            }
        };
        drop(state);
        drop(released);
        Ok(decided)
    }

    /// Read a saved table's object keys (their hashes run Python code, so this comes before
    /// anything is locked), refusing a number or a key saved twice.
    pub fn saved_objects(
        py: Python<'_>,
        keys: &[(Bound<'_, PyAny>, u64)],
    ) -> PyResult<SavedObjects> {
        let seen = PyDict::new(py);
        let mut numbers = std::collections::HashSet::new();
        let mut saved = Vec::with_capacity(keys.len());
        for (key, number) in keys {
            if *number == UNREGISTERED || !numbers.insert(*number) {
                return Err(PyValueError::new_err(format!(
                    "the saved state holds the key number {number} twice, or one out of range"
                )));
            }
            if seen.contains(key)? {
                return Err(PyValueError::new_err(format!(
                    "the saved state holds the key {} twice",
                    key.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                )));
            }
            seen.set_item(key, number)?;
            saved.push((key.clone().unbind(), key.hash()?, *number));
        }
        Ok(SavedObjects(saved))
    }

    /// With no call under way and none starting: check that no call has reached the table
    /// (and, with `unused`, that it is new), register the saved objects, run `restore`, and
    /// keep them registered only if it succeeds.
    pub fn restoring<R>(
        &self,
        py: Python<'_>,
        saved: SavedObjects,
        unused: impl FnOnce() -> PyResult<()>,
        restore: impl FnOnce() -> PyResult<R>,
    ) -> PyResult<R> {
        let mut released = Vec::new();
        let restored = {
            let mut state = self.write();
            let unused = || {
                if self.used.load(Ordering::Acquire) {
                    return Err(RestoreError::Used.into());
                }
                unused()
            };
            unused().and_then(|()| {
                let numbers: Vec<u64> = saved.0.iter().map(|&(_, _, n)| n).collect();
                for (object, hash, number) in saved.0 {
                    state.insert(py, object, hash, number);
                }
                let restored = restore();
                if restored.is_ok() {
                    self.used.store(true, Ordering::Release);
                    let highest = numbers.iter().max().map_or(0, |&number| number + 1);
                    state.next = state.next.max(highest);
                } else {
                    for number in numbers {
                        state.remove(number, &mut released);
                    }
                }
                restored
            })
        };
        drop(released);
        restored
    }

    /// Run `read` with no registration under way, so that every number the table holds has
    /// its object registered (to iterate or save a table).
    pub fn reading<R>(&self, read: impl FnOnce() -> R) -> R {
        let _state = self.read();
        read()
    }

    /// The key object registered under `number`, if any.
    pub fn object<'py>(&self, py: Python<'py>, number: u64) -> Option<Bound<'py, PyAny>> {
        let state = self.read();
        state
            .objects
            .get(&number)
            .map(|(object, _)| object.bind(py).clone())
    }

    /// For the cycle collector.
    pub fn traverse(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        // Never wait here: the collector may run while this thread holds the lock. Skipping a
        // visit only makes the collector keep these objects alive a little longer.
        if let Ok(state) = self.state.try_read() {
            for (object, _) in state.objects.values() {
                visit.call(object)?;
            }
            for known in state.by_hash.values() {
                for (object, _) in known {
                    visit.call(object)?;
                }
            }
        }
        Ok(())
    }
}
