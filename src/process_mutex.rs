//! A mutex that lives in memory several processes map, and that the kernel frees when its
//! holder dies.
//!
//! A shared table has one lock per bucket of keys, and any process of the host may be killed,
//! or may `exec` another program, while it holds one. Who holds a lock cannot be learnt from
//! outside: a process id means another process in another PID namespace (a container), and
//! `/proc` may be missing or hide other users' processes. So the lock is one the kernel keeps
//! track of itself: a POSIX mutex made *process-shared* (it works across mappings of one file)
//! and *robust*. Each thread tells the kernel where its list of held robust mutexes is; when
//! the thread ends (killed, exited, or replaced by `exec`), the kernel walks that list, marks
//! each mutex "owner died", and wakes one waiter, whose lock call then succeeds and says so
//! (`EOWNERDEAD`). The taker calls `pthread_mutex_consistent`: what the dead holder was writing
//! is whole already (a slot commits by one atomic store, see `core::exact::shared::slot`).
//!
//! **A waiter never waits inside `pthread_mutex_lock`.** A thread inside a robust lock call is
//! registered with the kernel as "taking this mutex"; if it dies there, the kernel checks
//! whether the mutex's word holds the dying thread's id, as that thread's PID namespace
//! numbers it, and if so marks the mutex's holder dead. Across PID namespaces ids repeat (the
//! first process of every container is 1), so a waiter killed while it slept in the lock call
//! would free a lock whose live holder in another container has its id. So a waiter only ever
//! *tries* (`pthread_mutex_trylock`, registered for a few instructions), and sleeps between
//! tries, from [`FIRST_PAUSE`] doubling to [`LONGEST_PAUSE`]: a holder that is stopped
//! (SIGSTOP, a debugger, a frozen container) stops only the threads that need its bucket, and
//! they do not spin. What is left is a kill landing inside one try's few instructions, of a
//! thread whose id equals the holder's in another namespace.
//!
//! A mutex here is [`WORDS`] 64-bit words of a table. Rust never reads or writes them as words:
//! only the C library's mutex calls touch them, through the functions below, which are the
//! crate's second room with `unsafe` in it (the first maps the file, `shared_memory`).
//!
//! The mutex's bytes are the C library's (glibc and musl lay them out differently), so a
//! table records [`KIND`], and a program built against another C library refuses it rather
//! than misreading its locks.
//!
//! Robust mutexes are Linux's (glibc and musl alike). Elsewhere the mutex is only
//! process-shared: a holder killed inside it keeps its bucket locked.

use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// A waiter's first sleep between tries; each sleep after doubles it.
pub const FIRST_PAUSE: Duration = Duration::from_micros(20);

/// A waiter's longest sleep between tries: a holder that runs again is noticed this late at
/// most.
pub const LONGEST_PAUSE: Duration = Duration::from_millis(1);

/// How many 64-bit words one mutex takes.
pub const WORDS: usize = std::mem::size_of::<libc::pthread_mutex_t>().div_ceil(8);

/// Which C library's mutexes a table holds, and their size in words: a table records it, and a
/// program whose mutexes differ refuses the table.
pub const KIND: u64 = {
    let library: u64 = if cfg!(target_env = "musl") { 2 } else { 1 };
    (library << 8) | WORDS as u64
};

/// How a lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// From nobody, or from a holder that let go.
    Free,
    /// From a holder that died holding it (the kernel said so).
    FromTheDead,
}

/// A mutex's words.
pub type Words = [AtomicU64; WORDS];

/// The mutex in `words`.
fn raw(words: &Words) -> *mut libc::pthread_mutex_t {
    // An `AtomicU64` is an `UnsafeCell`: writing through a pointer derived from a shared
    // reference to it is allowed. The words are 8-byte aligned, as `pthread_mutex_t` needs.
    words.as_ptr().cast::<libc::pthread_mutex_t>().cast_mut()
}

/// The mutex's words at the start of `words`.
///
/// # Panics
///
/// If `words` is shorter than a mutex.
#[must_use]
pub fn at(words: &[AtomicU64]) -> &Words {
    words[..WORDS].try_into().expect("a mutex's words")
}

fn check(call: &str, code: libc::c_int) {
    assert!(
        code == 0,
        "{call} failed: {}",
        std::io::Error::from_raw_os_error(code)
    );
}

/// Make the words a new process-shared robust mutex, unlocked. Only for words nobody else can
/// be using yet (a table being made).
///
/// # Panics
///
/// If the C library refuses (it does not for these attributes on Linux).
pub fn init(words: &Words) {
    let mutex = raw(words);
    // SAFETY: `attr` is initialised by `pthread_mutexattr_init` before any other use and
    // destroyed after; `mutex` points to `WORDS` words of live, aligned memory that no other
    // thread or process uses yet (the caller's promise), which is what `pthread_mutex_init`
    // needs.
    unsafe {
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        check(
            "pthread_mutexattr_init",
            libc::pthread_mutexattr_init(attr.as_mut_ptr()),
        );
        check(
            "pthread_mutexattr_setpshared",
            libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED),
        );
        #[cfg(target_os = "linux")]
        check(
            "pthread_mutexattr_setrobust",
            libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST),
        );
        check(
            "pthread_mutex_init",
            libc::pthread_mutex_init(mutex, attr.as_ptr()),
        );
        libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
    }
}

/// A held mutex, let go when dropped, on the thread that took it (a guard is not `Send`).
pub struct Guard<'a> {
    words: &'a Words,
    /// How it was taken.
    pub taken: Taken,
    _one_thread: PhantomData<*const ()>,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // SAFETY: this thread holds the mutex (the guard exists only once a lock call
        // succeeded on this thread), and the words outlive the guard.
        let code = unsafe { libc::pthread_mutex_unlock(raw(self.words)) };
        // `EPERM` would mean the kernel gave the mutex to another thread while this one held
        // it: two deciders on one bucket. Nothing can be undone here; say so loudly (a panic,
        // unless one is already unwinding, which a second would turn into an abort).
        if !std::thread::panicking() {
            check("pthread_mutex_unlock", code);
        }
    }
}

/// What a lock call said.
fn taken(call: &str, code: libc::c_int, words: &Words) -> Option<Taken> {
    match code {
        0 => Some(Taken::Free),
        libc::EBUSY => None,
        #[cfg(target_os = "linux")]
        libc::EOWNERDEAD => {
            // SAFETY: the lock call just gave this thread the mutex, marked inconsistent;
            // making it consistent is the holder's call to make, and the state it guards is
            // whole (see the module's docs).
            check("pthread_mutex_consistent", unsafe {
                libc::pthread_mutex_consistent(raw(words))
            });
            Some(Taken::FromTheDead)
        }
        code => {
            check(call, code);
            unreachable!("check panics on an error")
        }
    }
}

/// Take the mutex in `words` if nobody holds it, without waiting.
///
/// # Panics
///
/// If the words are not a mutex [`init`] made (the C library says `EINVAL`), or one left
/// unrecoverable by a holder that died and whose taker did not make it consistent (this
/// module always does).
#[must_use]
#[inline]
pub fn try_lock(words: &Words) -> Option<Guard<'_>> {
    // SAFETY: `words` are a mutex made by `init` (the caller's table says so), live for the
    // guard's lifetime.
    let code = unsafe { libc::pthread_mutex_trylock(raw(words)) };
    taken("pthread_mutex_trylock", code, words).map(|taken| Guard {
        words,
        taken,
        _one_thread: PhantomData,
    })
}

/// Wait until the mutex in `words` is free: tries, asleep between them (see the module's docs
/// for why never inside `pthread_mutex_lock`), each success let go at once. The caller then
/// tries to take it again, holding nothing while it waited. The waiting is handed to `park`,
/// which must call what it is given once: it may let go of Python's interpreter around it,
/// so that a thread waiting for a stopped holder stops no other thread of its process.
///
/// # Panics
///
/// As [`try_lock`].
pub fn wait_free(words: &Words, park: impl FnOnce(&(dyn Fn() + Sync))) {
    park(&|| {
        let mut pause = FIRST_PAUSE;
        while try_lock(words).is_none() {
            std::thread::sleep(pause);
            pause = (pause * 2).min(LONGEST_PAUSE);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutex() -> Words {
        let words = std::array::from_fn(|_| AtomicU64::new(0));
        init(&words);
        words
    }

    #[test]
    fn a_held_mutex_is_busy_until_let_go() {
        let words = mutex();
        let held = try_lock(&words).expect("free");
        assert_eq!(held.taken, Taken::Free);
        std::thread::scope(|scope| {
            assert!(scope.spawn(|| try_lock(&words).is_none()).join().unwrap());
        });
        drop(held);
        assert!(try_lock(&words).is_some());
    }

    #[test]
    fn a_mutex_whose_holder_ended_is_taken_from_the_dead() {
        let words = mutex();
        std::thread::scope(|scope| {
            // The thread ends holding it: the kernel marks it when the thread exits.
            scope
                .spawn(|| std::mem::forget(try_lock(&words).expect("free")))
                .join()
                .unwrap();
        });
        // Waiting for it to be free takes it from the dead, makes it consistent, lets go.
        wait_free(&words, |wait| wait());
        assert_eq!(try_lock(&words).expect("free").taken, Taken::Free);
        // Made consistent: an ordinary mutex again.
        assert_eq!(try_lock(&words).expect("free").taken, Taken::Free);
    }

    #[test]
    fn a_waiter_sleeps_until_the_holder_lets_go_holding_nothing() {
        let words = mutex();
        let held = try_lock(&words).expect("free");
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| wait_free(&words, |wait| wait()));
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!waiter.is_finished());
            drop(held);
            waiter.join().unwrap();
        });
        assert!(try_lock(&words).is_some(), "the waiter let it go");
    }
}
