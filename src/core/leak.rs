//! Leaking is lazy too: the token bucket's refill, run in the opposite direction.
//!
//! A leaky bucket holds a `level` that arrivals raise and time drains at `leak_per_sec`. As with
//! refill, nothing drains it in the background: the drain owed since `last_leak_at` is settled
//! in one step by the first call that brings a `now`. [`compute_leak`] has the shape of
//! [`compute_refill`](crate::core::refill::compute_refill) (plain numbers in, the settled pair
//! out, no bucket in sight) and the same two branches, mirrored:
//!
//! | | token bucket (refill) | leaky bucket (leak) |
//! | --- | --- | --- |
//! | what time does | adds `elapsed * rate` to `tokens` | takes `elapsed * leak_per_sec` off `level` |
//! | the clamp | `min(grown, capacity)`: no credit above the top | `max(drained, 0)`: no level below empty |
//! | zero or negative `elapsed` | untouched | untouched |
//! | a request that does not fit | throttled: wait for tokens | overflowed: dropped, never queued |
//!
//! The course's `leak()` writes its answer straight onto the bucket instead of returning it; the
//! Rust core keeps the math pure here and lets [`leaky_bucket`](crate::core::leaky_bucket) store
//! it, exactly as the token bucket stores the refill.

use crate::core::quantity::{python_max_with_zero, Quantity};

/// The settled level and when it was settled, always produced together.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakResult<N> {
    /// The level after draining, never below zero if it drained.
    pub level: N,
    /// `now` if the level was settled, the old settlement time if it was left alone.
    pub last_leak_at: N,
}

/// Drain a level for the time elapsed since it was last settled.
///
/// ```text
/// elapsed = now - last_leak_at
/// elapsed <= 0  -> untouched: (level, last_leak_at), exactly as given
/// otherwise     -> drained = level - elapsed * leak_per_sec
///                  (max(drained, 0), now)
/// ```
///
/// The floor comes after the drain, so a bucket idle for an hour is empty, not negative; the
/// zero that replaces a negative level is the integer `0`, as Python's `max(drained, 0)` gives.
///
/// # Errors
///
/// Whatever error the number type reports, at the first operation that fails, in the order
/// the expressions above are evaluated.
pub fn compute_leak<N: Quantity>(
    level: &N,
    leak_per_sec: &N,
    last_leak_at: &N,
    now: &N,
) -> Result<LeakResult<N>, N::Error> {
    let elapsed = now.minus(last_leak_at)?;
    if elapsed.at_most_zero()? {
        return Ok(LeakResult {
            level: level.clone(),
            last_leak_at: last_leak_at.clone(),
        });
    }
    let drained = level.minus(&elapsed.times(leak_per_sec)?)?;
    Ok(LeakResult {
        level: python_max_with_zero(&drained)?,
        last_leak_at: now.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(level: i64, rate: i64, last: i64, now: i64) -> (i64, i64) {
        let r = compute_leak(&level, &rate, &last, &now).unwrap();
        (r.level, r.last_leak_at)
    }

    #[test]
    fn drains_elapsed_times_rate() {
        assert_eq!(leak(10, 2, 0, 3), (4, 3));
    }

    #[test]
    fn no_time_no_drain() {
        assert_eq!(leak(10, 2, 5, 5), (10, 5));
        assert_eq!(leak(10, 2, 5, 1), (10, 5));
    }

    #[test]
    fn floors_at_zero_after_draining() {
        assert_eq!(leak(3, 2, 0, 100), (0, 100));
    }
}
