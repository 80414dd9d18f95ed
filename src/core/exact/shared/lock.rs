//! A bucket's lock: held for the few hundred nanoseconds a decision takes, by one thread of
//! one process of the host, and never kept by a process that is gone.
//!
//! Each bucket of a shared table begins with a process-shared robust mutex
//! ([`process_mutex`](crate::process_mutex)): the kernel frees it when its holder's thread ends,
//! killed, exited, or replaced by `exec`, in whatever PID namespace it runs, with or without
//! `/proc`. Nothing here asks who a holder is.
//!
//! Taking it: a holder keeps it well under a microsecond, so a waiter first tries again for a
//! few microseconds ([`SPINS`] tries), which is all most waits last. Past that, the holder has
//! been descheduled, or stopped: the waiter sleeps between tries (20 µs, doubling up to 1 ms;
//! why it never sleeps inside the lock call is in `process_mutex`), and [`Park`] lets go of
//! Python's interpreter meanwhile, so the waiter's other threads go on.
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
/// them) and must run it once and return its answer. The Python glue lets go of the
/// interpreter around it; without Python, [`park_here`] just waits.
pub type Park = fn(&(dyn Fn() -> Taken + Sync)) -> Taken;

/// Wait on this thread as it is.
pub fn park_here(wait: &(dyn Fn() -> Taken + Sync)) -> Taken {
    wait()
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

/// Take the lock in the [`WORDS`] words at the start of `words`, trying for a few
/// microseconds, then asleep through `park`.
#[inline]
pub fn lock(words: &[AtomicU64], park: Park) -> Held<'_> {
    let words = process_mutex::at(words);
    for _ in 0..SPINS {
        if let Some(guard) = process_mutex::try_lock(words) {
            return Held(guard);
        }
        std::hint::spin_loop();
    }
    Held(process_mutex::lock(words, park))
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
        fn counting(wait: &(dyn Fn() -> Taken + Sync)) -> Taken {
            PARKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            wait()
        }
        let words = lock_words();
        let first = lock(&words, park_here);
        std::thread::scope(|scope| {
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
            scope.spawn(|| std::mem::forget(lock(&words, park_here)));
        });
        assert!(lock(&words, park_here).taken_over());
        assert!(!lock(&words, park_here).taken_over());
    }
}
