//! A lock that several processes share, and that a killed process cannot keep.
//!
//! Each bucket of a shared table has one lock word: 0 when free, else the [`Owner`] holding it.
//! Taking it is one compare-and-swap, and it is held only for the few hundred nanoseconds a
//! decision takes, with no system call inside, so a waiter spins (yielding the processor
//! between looks) rather than sleeping in the kernel.
//!
//! A process can be killed while it holds the lock. The word then names an owner that will
//! never free it, so a waiter that has waited long enough ([`LOOK_AFTER`]) asks whether that
//! owner still exists; if not, it takes the lock over by a compare-and-swap from the dead
//! owner's word to its own. What the dead process was writing cannot be torn: a slot is
//! written into its spare copy and committed by one atomic store (see [`slot`](super::slot)),
//! so the taker finds every slot either as it was or as it was committed.
//!
//! An owner is a process id *and* the moment that process started: ids are reused, and a new
//! process with the dead one's id must not keep the lock held for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a waiter spins before it first asks whether the holder is alive; then it asks
/// again every [`LOOK_AFTER`]. A live holder keeps the lock for well under a microsecond, so a
/// wait this long is a holder descheduled or dead.
pub const LOOK_AFTER: Duration = Duration::from_millis(1);

/// Spins before a waiter starts yielding the processor between looks.
const SPINS: u32 = 64;

/// Who holds a lock: a process, by its id and its start time, in one nonzero word.
///
/// ```text
/// bits 0..22   the process id (Linux's ids are below 2^22)
/// bits 22..64  the low 42 bits of the process's start time, in clock ticks since boot
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(u64);

const PID_BITS: u32 = 22;

impl Owner {
    /// The owner word of the process `pid` that started `start_ticks` after boot.
    #[must_use]
    pub fn new(pid: u32, start_ticks: u64) -> Self {
        let pid = u64::from(pid) & ((1 << PID_BITS) - 1);
        Self(pid.max(1) | (start_ticks << PID_BITS))
    }

    /// This process, as [`Owner::new`] reads it from `/proc/self/stat` (on Linux; elsewhere
    /// only the id, which [`is_gone`] never calls gone).
    #[must_use]
    pub fn this_process() -> Self {
        let pid = std::process::id();
        Self::new(pid, start_ticks(pid).unwrap_or(0))
    }

    /// The owner whose word is `word` (as read from a table).
    #[must_use]
    pub fn from_word(word: u64) -> Self {
        Self(word)
    }

    fn pid(self) -> u32 {
        u32::try_from(self.0 & ((1 << PID_BITS) - 1)).expect("22 bits")
    }

    fn start_bits(self) -> u64 {
        self.0 >> PID_BITS
    }

    /// The owner's word.
    #[must_use]
    pub fn word(self) -> u64 {
        self.0
    }
}

/// Whether the owner of lock word `word` is gone: no process of its id, or one that started at
/// another time (the id was reused), or one that has exited and not yet been reaped (a
/// zombie). Outside Linux nothing says so, and no owner is ever called gone.
#[must_use]
pub fn is_gone(word: u64) -> bool {
    let owner = Owner(word);
    match stat_of(owner.pid()) {
        Stat::Missing => true,
        Stat::Unknown => false,
        Stat::Found { zombie, start } => {
            zombie || (start << PID_BITS) >> PID_BITS != owner.start_bits()
        }
    }
}

enum Stat {
    Missing,
    Unknown,
    Found { zombie: bool, start: u64 },
}

fn start_ticks(pid: u32) -> Option<u64> {
    match stat_of(pid) {
        Stat::Found { start, .. } => Some(start),
        _ => None,
    }
}

/// The state and start time of process `pid`, from `/proc/<pid>/stat`: fields 3 and 22,
/// counted after the command name, which is in parentheses and may itself hold spaces and
/// parentheses (so the last `)` ends it).
fn stat_of(pid: u32) -> Stat {
    if !cfg!(target_os = "linux") {
        return Stat::Unknown;
    }
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Stat::Missing,
        Err(_) => return Stat::Unknown,
    };
    let Some((_, after_name)) = text.rsplit_once(')') else {
        return Stat::Unknown;
    };
    let mut fields = after_name.split_ascii_whitespace();
    let state = fields.next();
    // Field 22 of the line is the 20th after the state (field 3).
    match (state, fields.nth(18).and_then(|start| start.parse().ok())) {
        (Some(state), Some(start)) => Stat::Found {
            zombie: matches!(state, "Z" | "X" | "x"),
            start,
        },
        _ => Stat::Unknown,
    }
}

/// A held lock, freed when dropped.
pub struct Held<'a> {
    word: &'a AtomicU64,
    /// Whether it was taken over from a dead owner.
    pub taken_over: bool,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.word.store(0, Ordering::Release);
    }
}

/// Take the lock `word` for `me`, waiting while a live owner holds it; `gone` says whether
/// an owner is gone (it is [`is_gone`] but for tests).
pub fn lock(word: &AtomicU64, me: Owner, gone: impl Fn(u64) -> bool) -> Held<'_> {
    let mut spins = 0_u32;
    let mut since: Option<(u64, Instant)> = None;
    loop {
        match word.compare_exchange_weak(0, me.0, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => {
                return Held {
                    word,
                    taken_over: false,
                }
            }
            Err(0) => {}
            Err(holder) => {
                spins += 1;
                if spins < SPINS {
                    std::hint::spin_loop();
                    continue;
                }
                std::thread::yield_now();
                // The clock is read once per yield only: spinning costs nothing while the
                // holder is about to let go.
                let (seen, from) = *since.get_or_insert((holder, Instant::now()));
                if seen != holder {
                    since = Some((holder, Instant::now()));
                } else if from.elapsed() >= LOOK_AFTER {
                    if gone(holder)
                        && word
                            .compare_exchange(holder, me.0, Ordering::Acquire, Ordering::Relaxed)
                            .is_ok()
                    {
                        return Held {
                            word,
                            taken_over: true,
                        };
                    }
                    since = Some((holder, Instant::now()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_gone() {
        let me = Owner::this_process();
        assert!(!is_gone(me.word()));
        if cfg!(target_os = "linux") {
            assert!(start_ticks(std::process::id()).is_some());
            // The same id that started at another time is another process.
            let reused = Owner::new(std::process::id(), me.start_bits() + 1);
            assert!(is_gone(reused.word()));
            // An id above Linux's highest is never a process.
            assert!(is_gone(Owner::new((1 << PID_BITS) - 1, 0).word()));
        }
    }

    #[test]
    fn a_dead_owners_lock_is_taken_over() {
        let word = AtomicU64::new(Owner::new(12345, 6).word());
        let held = lock(&word, Owner::new(7, 8), |owner| {
            owner == Owner::new(12345, 6).word()
        });
        assert!(held.taken_over);
        assert_eq!(word.load(Ordering::Relaxed), Owner::new(7, 8).word());
        drop(held);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_live_owner_is_waited_for() {
        let word = AtomicU64::new(0);
        let first = lock(&word, Owner::new(1, 1), |_| false);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| lock(&word, Owner::new(2, 2), |_| false).taken_over);
            std::thread::sleep(Duration::from_millis(5));
            assert!(!waiter.is_finished());
            drop(first);
            assert!(!waiter.join().unwrap());
        });
    }
}
