//! How far a call's time may be from a limiter's clock.
//!
//! A limiter, or a keyed table, keeps one clock: the latest time any call has used. Every
//! balance is settled against it, so a time read on another clock spoils them all at once.
//! `time.time_ns()` (nanoseconds since 1970) given to a limiter on `time.monotonic_ns()`
//! (since boot) is about 55 years ahead: the clock would jump there, and every throttled
//! balance would be full again, a whole table of clients let off by one call; the calls after
//! it, decided at that time, would each get one burst and then wait decades. Seen from the
//! other side (`start_ns=time.time_ns()` on a monotonic clock), the next call is 55 years
//! behind, and would be told to wait that long.
//!
//! No two calls on one clock are anywhere near ten years apart (a monotonic clock counts from
//! boot, and a process waits for nothing that long), while two clocks differ by decades. So a
//! time farther than ten years from the clock, either way, is refused before it changes
//! anything.

/// How far from the clock a call's time may be, either way: ten years (of 365.25 days,
/// 31,557,600 s each), in nanoseconds.
pub const MAX_CLOCK_GAP_NS: i64 = 10 * 31_557_600 * 1_000_000_000;

/// How far `now_ns` is from a clock reading `latest` (positive when ahead), if farther than
/// [`MAX_CLOCK_GAP_NS`] either way.
#[must_use]
pub fn off_the_clock(latest: i64, now_ns: i64) -> Option<i128> {
    let gap = i128::from(now_ns) - i128::from(latest);
    (gap.abs() > i128::from(MAX_CLOCK_GAP_NS)).then_some(gap)
}

/// How far a saved state's times move to mean the same on a clock that reads `now_ns`: its
/// clock, `latest`, moves to now, and every other time with it (see [`shifted`]), so that saved
/// balances take up refilling where they were, however far apart the two clocks are. Within
/// the clock's range.
#[must_use]
pub fn shift_onto(latest: i64, now_ns: i64) -> i64 {
    let by = i128::from(now_ns) - i128::from(latest);
    i64::try_from(by).unwrap_or(if by < 0 { i64::MIN } else { i64::MAX })
}

/// A saved time moved by `by` nanoseconds (see [`shift_onto`]), within the clock's range.
#[must_use]
pub fn shifted(time: Option<i64>, by: i64) -> Option<i64> {
    time.map(|time| time.saturating_add(by))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_years_either_way_is_still_the_same_clock() {
        assert_eq!(off_the_clock(0, MAX_CLOCK_GAP_NS), None);
        assert_eq!(off_the_clock(0, -MAX_CLOCK_GAP_NS), None);
        assert_eq!(
            off_the_clock(0, MAX_CLOCK_GAP_NS + 1),
            Some(i128::from(MAX_CLOCK_GAP_NS) + 1)
        );
        assert_eq!(
            off_the_clock(MAX_CLOCK_GAP_NS + 1, 0),
            Some(-i128::from(MAX_CLOCK_GAP_NS) - 1)
        );
    }

    #[test]
    fn a_saved_clock_moves_onto_now_and_every_time_with_it() {
        let by = shift_onto(1_000, 250);
        assert_eq!(by, -750);
        assert_eq!(shifted(Some(1_000), by), Some(250));
        assert_eq!(shifted(Some(900), by), Some(150));
        assert_eq!(shifted(None, by), None);
        // Clocks farther apart than 64 bits reach: the move stops at the clock's ends.
        assert_eq!(shift_onto(i64::MIN, i64::MAX), i64::MAX);
        assert_eq!(shift_onto(i64::MAX, i64::MIN), i64::MIN);
        assert_eq!(shifted(Some(5), i64::MAX), Some(i64::MAX));
    }

    #[test]
    fn the_ends_of_the_clock_do_not_overflow() {
        assert_eq!(
            off_the_clock(i64::MIN, i64::MAX),
            Some(i128::from(i64::MAX) - i128::from(i64::MIN))
        );
    }
}
