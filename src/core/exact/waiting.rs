//! Waiting for a turn: the deadline loop of every blocking `acquire`, without the sleeping.
//!
//! A waiter does not poll. It reserves its tokens at the moment they will be there (a limiter's
//! `reserve`), so that later callers queue behind it, then sleeps until that moment. A keyed
//! table may refuse a new key for want of room; the waiter then sleeps until room may appear
//! and reserves again, while its timeout lasts. A sleep that is interrupted (a signal, a clock
//! that fails) hands the reservation back before the error goes on.
//!
//! The loop is written here once, for every limiter and every error type; what it cannot do
//! without a host (read a real clock, sleep, answer a signal) it asks of a [`Pause`], which is
//! also what lets the tests below run it on a fake clock.

use std::time::Duration;

use crate::core::exact::keyed::KeyedReservation;
use crate::core::exact::limiter::Reservation;

/// What one reservation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// Taken: `reserved_ns` is the time it was asked at, `at_ns` the time from which the tokens
    /// are the caller's.
    At { reserved_ns: i64, at_ns: i64 },
    /// A new key and a full table: nothing taken; room may appear after this many nanoseconds.
    Refused(u128),
    /// Nothing taken: the tokens would be there later than the caller will wait.
    TooLate,
}

/// A request for more tokens than a band holds: no wait would ever be enough, so the calls
/// that would otherwise wait, or retry, for ever are refused this instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeverEnough {
    /// The tokens asked for.
    pub n: u64,
}

impl std::fmt::Display for NeverEnough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n={} is more than a band's burst: it can never be acquired",
            self.n
        )
    }
}

impl Reserved {
    /// A limiter's reservation of `n` tokens, asked at `now_ns`.
    ///
    /// # Errors
    ///
    /// [`NeverEnough`] if `n` is more than a band holds.
    pub fn of(reservation: Reservation, now_ns: i64, n: u64) -> Result<Self, NeverEnough> {
        match reservation {
            Reservation::Never => Err(NeverEnough { n }),
            Reservation::TooLate(_) => Ok(Self::TooLate),
            Reservation::Taken { after_ns } => {
                let at = i128::from(now_ns).saturating_add_unsigned(after_ns);
                Ok(Self::At {
                    reserved_ns: now_ns,
                    at_ns: i64::try_from(at).unwrap_or(i64::MAX),
                })
            }
        }
    }

    /// A keyed table's reservation, as [`Reserved::of`].
    ///
    /// # Errors
    ///
    /// See [`Reserved::of`].
    pub fn of_keyed(
        reservation: KeyedReservation,
        now_ns: i64,
        n: u64,
    ) -> Result<Self, NeverEnough> {
        match reservation {
            KeyedReservation::Decided(decided) => Self::of(decided, now_ns, n),
            KeyedReservation::Refused { retry_in } => Ok(Self::Refused(retry_in)),
        }
    }

    /// The time from which the tokens are the caller's, if they were taken.
    #[must_use]
    pub fn at(self) -> Option<i64> {
        match self {
            Self::At { at_ns, .. } => Some(at_ns),
            Self::Refused(_) | Self::TooLate => None,
        }
    }
}

/// A wait of `seconds`, as a timeout gives it: one too long for a `Duration` (2**64 seconds or
/// more) is for ever, `Duration::MAX`; `None` for a negative wait, an infinite one or a NaN,
/// which no call can be given.
#[must_use]
pub fn wait_of_seconds(seconds: f64) -> Option<Duration> {
    // Duration::MAX in seconds rounds up to 2**64, one past what a Duration holds.
    if seconds.is_finite() && seconds >= Duration::MAX.as_secs_f64() {
        return Some(Duration::MAX);
    }
    Duration::try_from_secs_f64(seconds).ok()
}

/// A timeout as the longest wait, in nanoseconds, it accepts (`None`: for ever).
#[must_use]
pub fn max_wait_ns(timeout: Option<Duration>) -> u128 {
    timeout.map_or(u128::MAX, |wait| wait.as_nanos())
}

/// Nanoseconds as a `Duration` (saturating at about 584 years).
#[must_use]
pub fn nanos(ns: u128) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Time as the deadline loop needs it: how long the wait has lasted, and a sleep.
pub trait Pause {
    /// What ends a sleep early (a signal's handler that raised).
    type Error;

    /// Nanoseconds since the wait began, on a clock of real time (the deadline's).
    fn elapsed_ns(&self) -> u128;

    /// Sleep for `ns` nanoseconds.
    ///
    /// # Errors
    ///
    /// What interrupted the sleep: the wait ends with it.
    fn sleep(&mut self, ns: u128) -> Result<(), Self::Error>;
}

/// Wait for a turn within `max_wait` nanoseconds: reserve (again after a refusal, while time
/// is left), then sleep until the turn comes. `Ok(true)` once the tokens are the caller's,
/// `Ok(false)` if they would come too late.
///
/// `reserve(left)` reserves with `left` nanoseconds to spare; `until(at)` says how far the
/// limiter's clock is from `at` (0 once there); `give_back(reserved_at, at)` hands back a turn
/// given up.
///
/// # Errors
///
/// What stopped the wait (a reservation, the limiter's clock or a sleep that failed); a turn
/// already reserved is handed back first.
pub fn wait_for_turn<P: Pause>(
    pause: &mut P,
    max_wait: u128,
    mut reserve: impl FnMut(u128) -> Result<Reserved, P::Error>,
    until: impl Fn(i64) -> Result<u128, P::Error>,
    give_back: impl FnOnce(i64, i64),
) -> Result<bool, P::Error> {
    let (reserved_ns, at_ns) = loop {
        let left = max_wait.saturating_sub(pause.elapsed_ns());
        match reserve(left)? {
            Reserved::At { reserved_ns, at_ns } => break (reserved_ns, at_ns),
            Reserved::TooLate => return Ok(false),
            Reserved::Refused(retry_in) => {
                // What is left once refused: asking may itself have taken a while (a server's
                // question, answered by `on_error` after its socket timeout).
                let left = max_wait.saturating_sub(pause.elapsed_ns());
                if left == 0 {
                    return Ok(false);
                }
                pause.sleep(retry_in.min(left))?;
            }
        }
    };
    let stopped = loop {
        match until(at_ns) {
            Ok(0) => return Ok(true),
            Ok(left) => {
                if let Err(interrupted) = pause.sleep(left) {
                    break interrupted;
                }
            }
            Err(error) => break error,
        }
    };
    give_back(reserved_ns, at_ns);
    Err(stopped)
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    /// A fake clock: each sleep moves it, or is interrupted when told to be.
    #[derive(Default)]
    struct FakeTime {
        now: u128,
        interrupt: bool,
        sleeps: Vec<u128>,
    }

    impl Pause for FakeTime {
        type Error = &'static str;

        fn elapsed_ns(&self) -> u128 {
            self.now
        }

        fn sleep(&mut self, ns: u128) -> Result<(), &'static str> {
            if self.interrupt {
                return Err("interrupted");
            }
            self.sleeps.push(ns);
            self.now += ns;
            Ok(())
        }
    }

    /// The wait run on `time` with reservations answered from `answers` in turn, the
    /// limiter's clock standing at 0, and the turn it handed back, if any.
    fn wait(
        time: &mut FakeTime,
        max_wait: u128,
        answers: Vec<Reserved>,
    ) -> (Result<bool, &'static str>, Option<(i64, i64)>) {
        let answers = RefCell::new(answers);
        let given_back = Cell::new(None);
        let waited = wait_for_turn(
            time,
            max_wait,
            |_left| Ok(answers.borrow_mut().remove(0)),
            |at| Ok(u128::try_from(at).unwrap()),
            |reserved, at| given_back.set(Some((reserved, at))),
        );
        (waited, given_back.get())
    }

    fn at(reserved_ns: i64, at_ns: i64) -> Reserved {
        Reserved::At { reserved_ns, at_ns }
    }

    #[test]
    fn a_wait_in_seconds_is_a_duration_or_for_ever_and_never_negative() {
        assert_eq!(wait_of_seconds(1.5), Some(Duration::from_millis(1_500)));
        assert_eq!(wait_of_seconds(0.0), Some(Duration::ZERO));
        assert_eq!(wait_of_seconds(1e30), Some(Duration::MAX));
        assert_eq!(wait_of_seconds(2_f64.powi(64)), Some(Duration::MAX));
        assert_eq!(wait_of_seconds(-0.5), None);
        assert_eq!(wait_of_seconds(f64::INFINITY), None);
        assert_eq!(wait_of_seconds(f64::NAN), None);
    }

    #[test]
    fn a_turn_reserved_for_now_is_taken_without_sleeping() {
        let mut time = FakeTime::default();
        assert_eq!(wait(&mut time, u128::MAX, vec![at(0, 0)]), (Ok(true), None));
        assert!(time.sleeps.is_empty());
    }

    #[test]
    fn an_interrupted_sleep_hands_the_turn_back_and_passes_the_error_on() {
        let mut time = FakeTime {
            interrupt: true,
            ..FakeTime::default()
        };
        let waited = wait(&mut time, u128::MAX, vec![at(1, 5)]);
        assert_eq!(waited, (Err("interrupted"), Some((1, 5))));
    }

    #[test]
    fn too_late_takes_nothing_and_says_false() {
        let mut time = FakeTime::default();
        let waited = wait(&mut time, 10, vec![Reserved::TooLate]);
        assert_eq!(waited, (Ok(false), None));
    }

    #[test]
    fn a_refusal_sleeps_no_longer_than_the_time_left_then_asks_again() {
        let mut time = FakeTime::default();
        let answers = vec![Reserved::Refused(1_000), at(0, 0)];
        assert_eq!(wait(&mut time, 300, answers), (Ok(true), None));
        assert_eq!(time.sleeps, vec![300]);
    }

    #[test]
    fn a_refusal_with_no_time_left_says_false() {
        let mut time = FakeTime {
            now: 50,
            ..FakeTime::default()
        };
        let waited = wait(&mut time, 50, vec![Reserved::Refused(1_000)]);
        assert_eq!(waited, (Ok(false), None));
        assert!(time.sleeps.is_empty());
    }

    #[test]
    fn a_reservation_beyond_every_burst_is_never_enough() {
        assert_eq!(
            Reserved::of(Reservation::Never, 0, 7),
            Err(NeverEnough { n: 7 })
        );
        assert_eq!(
            NeverEnough { n: 7 }.to_string(),
            "n=7 is more than a band's burst: it can never be acquired"
        );
    }

    #[test]
    fn a_turn_past_the_end_of_time_is_kept_at_its_end() {
        let taken = Reservation::Taken { after_ns: 5 };
        assert_eq!(
            Reserved::of(taken, i64::MAX - 1, 1),
            Ok(at(i64::MAX - 1, i64::MAX))
        );
        let refused = KeyedReservation::Refused { retry_in: 9 };
        assert_eq!(Reserved::of_keyed(refused, 0, 1), Ok(Reserved::Refused(9)));
    }
}
