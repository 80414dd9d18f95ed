//! What a fork does to limiters.
//!
//! `os.fork()` copies the whole process, but only the thread that called it. A lock that another
//! thread held at that instant is copied held, and no thread in the child will ever release
//! it: the child's first call that needs it waits for ever. Most of a limiter's locks are held
//! only while a thread holds the interpreter too, and the thread that forks holds the
//! interpreter, so no such section can be half done at a fork. The exceptions are the sections
//! that run with the interpreter released: a keyed table's `try_acquire_many` (every shard held
//! for a stretch of the batch) and a meter's `mark_many`. They run through [`detach`], which
//! counts them: `os.register_at_fork` makes the forking thread keep new ones out and wait,
//! before the fork, until every running one has finished, and lets them start again once the
//! fork is done, in the parent and in the child.
//!
//! A child also gets a *copy* of every limiter: from then on the parent and the child each
//! enforce the limit on their own, and together they admit up to twice it. That is rarely what
//! was meant, so the first call on an inherited limiter warns once ([`Lineage`]). An in-flight
//! limiter's child starts with no seat held instead (`seats::Locked`): the parent's holders are
//! not in the child to give their seats back.

use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeWarning;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Set by a thread about to fork: no new detached section starts until the fork is done.
static FORKING: AtomicBool = AtomicBool::new(false);

/// How many detached sections are running.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// How many forks this process descends through: a child's count is its parent's plus one.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// What other rooms run in a forked child once the fork is counted, given when the hooks are
/// registered: this room names none of them, they depend on it.
static IN_CHILD: OnceLock<&'static [fn()]> = OnceLock::new();

/// How long a waiting thread sleeps between looks at the other side.
const POLL: Duration = Duration::from_micros(100);

/// A detached section running: counted in [`INSIDE`] until it ends, even by a panic.
struct Inside;

impl Inside {
    /// Wait while a fork is under way, then count this section in. Counted first and checked
    /// after: a section that slips in while a fork begins either sees the flag and steps back,
    /// or is seen by the forking thread and waited for.
    fn enter() -> Self {
        loop {
            while FORKING.load(SeqCst) {
                std::thread::sleep(POLL);
            }
            INSIDE.fetch_add(1, SeqCst);
            if !FORKING.load(SeqCst) {
                return Self;
            }
            INSIDE.fetch_sub(1, SeqCst);
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, SeqCst);
    }
}

thread_local! {
    /// Whether this thread runs a detached section (see [`detach`]).
    static DETACHED: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as in a detached section until dropped (even by a panic).
struct Detached(bool);

impl Detached {
    fn mark() -> Self {
        Self(DETACHED.replace(true))
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        DETACHED.set(self.0);
    }
}

/// Run `work` with the interpreter released, as one step that a fork never splits.
pub fn detach<T, F>(py: Python<'_>, work: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    py.detach(|| {
        let _inside = Inside::enter();
        let _detached = Detached::mark();
        work()
    })
}

/// How a thread waits for a shared table's bucket lock that stays busy (see
/// `core::exact::shared::lock::Park`): asleep with the interpreter released, so that a holder
/// stopped in another process stops none of this process's other threads. The waiting thread
/// holds no lock then (a shared table lets go of everything before it waits), so a fork may
/// come meanwhile, and nothing waits on the moment it takes to get the interpreter back. A
/// thread in a detached section has released it already, and just waits.
pub fn park(wait: &(dyn Fn() + Sync)) {
    if DETACHED.get() {
        wait();
    } else {
        Python::attach(|py| py.detach(wait));
    }
}

/// Before a fork: keep new detached sections out, and wait for the running ones to finish,
/// with the interpreter released so that their threads can.
#[pyfunction]
fn before_fork(py: Python<'_>) {
    FORKING.store(true, SeqCst);
    while INSIDE.load(SeqCst) != 0 {
        py.detach(|| std::thread::sleep(POLL));
    }
}

/// After a fork, in the parent: let detached sections start again.
#[pyfunction]
fn after_fork_in_parent() {
    FORKING.store(false, SeqCst);
}

/// After a fork, in the child: count the fork, then run what other rooms asked to run there
/// (the shared in-flight limits close their copies of the parent's owner descriptors). No
/// section runs in the child (its only thread is this one), whatever the parent's threads had
/// counted.
#[pyfunction]
fn after_fork_in_child() {
    FORKS.fetch_add(1, SeqCst);
    for hook in IN_CHILD.get().copied().unwrap_or_default() {
        hook();
    }
    INSIDE.store(0, SeqCst);
    FORKING.store(false, SeqCst);
}

/// Register the fork hooks, where the platform forks, with what other rooms run in a child.
pub fn register(module: &Bound<'_, PyModule>, in_child: &'static [fn()]) -> PyResult<()> {
    IN_CHILD.get_or_init(|| in_child);
    let py = module.py();
    let os = py.import("os")?;
    if !os.hasattr("register_at_fork")? {
        return Ok(());
    }
    let hooks = PyDict::new(py);
    hooks.set_item("before", wrap_pyfunction!(before_fork, module)?)?;
    hooks.set_item(
        "after_in_parent",
        wrap_pyfunction!(after_fork_in_parent, module)?,
    )?;
    hooks.set_item(
        "after_in_child",
        wrap_pyfunction!(after_fork_in_child, module)?,
    )?;
    os.call_method("register_at_fork", (), Some(&hooks))?;
    Ok(())
}

/// How many forks this process descends through (0 in a process that was not forked).
pub fn forks() -> u64 {
    FORKS.load(SeqCst)
}

/// Which process a limiter was made in, as the number of forks behind it: a limiter used where
/// that number has grown was inherited across a fork, and says so once.
pub struct Lineage(AtomicU64);

impl Lineage {
    pub fn new() -> Self {
        Self(AtomicU64::new(forks()))
    }

    /// Whether this is the first use in a child of the process that made the limiter, or of
    /// the one that last said so.
    fn first_use_in_child(&self) -> bool {
        let forks = forks();
        self.0.load(SeqCst) != forks && self.0.swap(forks, SeqCst) != forks
    }

    /// Warn (a `RuntimeWarning`) the first time the rate limiter `limiter` is used in a child
    /// of the process that made it, or of the one that last warned.
    pub fn check(&self, py: Python<'_>, limiter: &str) -> PyResult<()> {
        self.warn_in_child(py, |pid| {
            format!(
                "this {limiter} was made before os.fork() and is used in the child process \
                 {pid}: the child has a copy of its state, no longer shared with the parent, \
                 so each process enforces the limit on its own. To share one limit between \
                 the processes of this host, use protocol_in_code.qos.shared \
                 (SharedRateLimiter, SharedKeyedRateLimiter); between hosts, a Redis server \
                 (protocol_in_code.qos.distributed)"
            )
        })
    }

    /// [`Lineage::check`] for the in-flight limiter `limiter`, whose child starts with no seat
    /// held: the seats of the parent's holders are not seen there, and a lease taken before
    /// the fork gives nothing back in the child (see `seats::Locked`).
    pub fn check_in_flight(&self, py: Python<'_>, limiter: &str) -> PyResult<()> {
        self.warn_in_child(py, |pid| {
            format!(
                "this {limiter} was made before os.fork() and is used in the child process \
                 {pid}: the child has a limit of its own, starting with no seat held. Seats \
                 held in the parent are not seen here (a lease taken before the fork gives \
                 nothing back when released in the child), and each process seats up to the \
                 limit on its own. To share one in-flight limit between the processes of \
                 this host, use protocol_in_code.qos.shared (SharedConcurrencyLimiter, \
                 SharedKeyedConcurrencyLimiter); between hosts, a Redis server \
                 (protocol_in_code.qos.distributed)"
            )
        })
    }

    /// Warn with the message `say` writes for this process's id, on the first use in a child.
    fn warn_in_child(&self, py: Python<'_>, say: impl FnOnce(u32) -> String) -> PyResult<()> {
        if !self.first_use_in_child() {
            return Ok(());
        }
        let message = CString::new(say(std::process::id())).unwrap_or_default();
        PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1)
    }
}
