//! A bucket's lock: held for the few hundred nanoseconds a decision takes, by one thread of
//! one process of the host, and never kept by a process that is gone.
//!
//! Each bucket of a shared table begins with a process-shared robust mutex
//! ([`process_mutex`](crate::process_mutex)): the kernel frees it when its holder's thread ends,
//! killed, exited, or replaced by `exec`, in whatever PID namespace it runs, with or without
//! `/proc`. Nothing here asks who a holder is.
//!
//! Taking it: a holder keeps it well under a microsecond, so a taker tries for a few
//! microseconds ([`SPINS`] tries), which is all most waits last. Past that, the holder has been
//! descheduled, or stopped. **A thread never waits while it holds a lock**: a call that needs
//! several (a key's two buckets, a stacked request's) lets go of all it holds, sleeps until the
//! busy one is free ([`wait_free`]: tries, 20 µs apart doubling up to 1 ms; why never inside
//! the C library's blocking call is in `process_mutex`), and starts again. [`Park`] lets go of
//! Python's interpreter while it sleeps, so the waiter's other threads go on; and since it
//! holds nothing then, no other thread or process waits on it meanwhile, nor on the moment it
//! takes to get the interpreter back.
//!
//! A lock taken from a dead holder needs no repair: a slot is written into its spare copy and
//! committed by one atomic store (see [`slot`](super::slot)), so the taker finds every slot
//! either as it was or as it was committed. Only the bucket's counters may miss the dead
//! holder's last decision.

use std::sync::atomic::AtomicU64;

use crate::process_mutex::{self, Guard, Taken};

/// Tries before a waiter sleeps: a few microseconds, longer than any decision holds a lock.
const SPINS: u32 = 200;

/// How a thread waits for a lock that stays busy: it is given the wait (tries, asleep between
/// them) and must run it once. The Python glue lets go of the interpreter around it; without
/// Python, [`park_here`] just waits.
pub type Park = fn(&(dyn Fn() + Sync));

/// Wait on this thread as it is.
pub fn park_here(wait: &(dyn Fn() + Sync)) {
    wait();
}

/// A held lock, let go when dropped.
pub struct Held<'a>(Guard<'a>);

impl Held<'_> {
    /// Whether it was taken from a holder that died holding it.
    #[must_use]
    pub fn taken_over(&self) -> bool {
        self.0.taken == Taken::FromTheDead
    }
}

/// Words of a bucket's lock, at the start of the bucket.
pub const WORDS: usize = process_mutex::WORDS;

/// Make a new table's lock in the [`WORDS`] words at the start of `words`.
pub fn init(words: &[AtomicU64]) {
    process_mutex::init(process_mutex::at(words));
}

/// Take the lock in the [`WORDS`] words at the start of `words` if it is free within a few
/// microseconds of trying.
#[inline]
pub fn try_lock(words: &[AtomicU64]) -> Option<Held<'_>> {
    let words = process_mutex::at(words);
    for _ in 0..SPINS {
        if let Some(guard) = process_mutex::try_lock(words) {
            return Some(Held(guard));
        }
        std::hint::spin_loop();
    }
    None
}

/// Sleep through `park` until the lock in the [`WORDS`] words at the start of `words` is free.
/// Call it holding no lock.
pub fn wait_free(words: &[AtomicU64], park: Park) {
    process_mutex::wait_free(process_mutex::at(words), park);
}

/// Take several locks, never waiting while holding one (see the module's docs): `try_all`
/// tries each in turn and, at the first that stays busy, lets go of those it took (by
/// returning) and says which; `wait_free` then waits, holding nothing, until that one is free,
/// and `try_all` starts again.
#[inline]
pub fn all_of<T, B>(mut try_all: impl FnMut() -> Result<T, B>, mut wait_free: impl FnMut(B)) -> T {
    loop {
        match try_all() {
            Ok(held) => return held,
            Err(busy) => wait_free(busy),
        }
    }
}

/// Take the lock in the [`WORDS`] words at the start of `words`: tried, waited for, tried
/// again. Call it holding no lock (see the module's docs).
pub fn lock(words: &[AtomicU64], park: Park) -> Held<'_> {
    all_of(|| try_lock(words).ok_or(()), |()| wait_free(words, park))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lock_words() -> Box<[AtomicU64]> {
        let words: Box<[AtomicU64]> = (0..WORDS).map(|_| AtomicU64::new(0)).collect();
        init(&words);
        words
    }

    #[test]
    fn a_live_holder_is_waited_for_asleep_through_park() {
        static PARKED: AtomicU64 = AtomicU64::new(0);
        fn counting(wait: &(dyn Fn() + Sync)) {
            PARKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            wait();
        }
        let words = lock_words();
        let first = lock(&words, park_here);
        std::thread::scope(|scope| {
            assert!(scope.spawn(|| try_lock(&words).is_none()).join().unwrap());
            let waiter = scope.spawn(|| lock(&words, counting).taken_over());
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished());
            drop(first);
            assert!(!waiter.join().unwrap());
        });
        assert_eq!(PARKED.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn a_lock_whose_holder_ended_is_taken_over() {
        let words = lock_words();
        std::thread::scope(|scope| {
            // Joined: the thread has ended (the kernel has marked the lock) once this returns.
            scope
                .spawn(|| std::mem::forget(lock(&words, park_here)))
                .join()
                .unwrap();
        });
        assert!(lock(&words, park_here).taken_over());
        assert!(!lock(&words, park_here).taken_over());
        // Waiting for a dead holder's lock to be free takes it over too.
        std::thread::scope(|scope| {
            // Joined: the thread has ended (the kernel has marked the lock) once this returns.
            scope
                .spawn(|| std::mem::forget(lock(&words, park_here)))
                .join()
                .unwrap();
        });
        wait_free(&words, park_here);
        assert!(!lock(&words, park_here).taken_over());
    }
}
