//! Refill is lazy: the balance is settled when someone asks, never by a timer.
//!
//! Nothing in this crate ticks in the background. Between two calls, the growth a balance has
//! earned simply waits, unclaimed, as the gap between the last settlement time and the present.
//! The first call that brings a `now` settles it in one step: it measures that gap, turns it into
//! tokens at the fill rate, and clamps the result to what the holder can keep. A DNS cache entry
//! expires the same way: nobody deletes it on the hour; the next lookup asks "given now, are you
//! still good?" and does the arithmetic right then.
//!
//! # Why this file has no bucket in it
//!
//! [`compute_refill`] takes five plain scalars and returns a [`RefillResult`]; it stores nothing
//! and decides nothing about requests. The bucket module imports this one and writes the result
//! back onto its own state; this module imports nothing from it and could not name it if it
//! wanted to. That direction is the point: the math can be checked by hand, tested without
//! building any object, and reused by anything else that accrues at a rate (a meter, a quota, a
//! retry budget). Giving it a bucket parameter would tie it to one holder and let it reach into
//! that holder's other fields. A caller that needs identity keeps it on its own side: the bucket
//! passes its numbers in and stores the numbers that come out.
//!
//! # What the toy leaves out
//!
//! The clock is whatever number the caller passes, growth is one multiplication (in floats if the
//! caller uses floats, with the rounding that brings), and a clock that runs backwards is trusted
//! to mean "no time passed". Real limiters settle in integer nanoseconds and carry the fractional
//! remainder exactly; this module keeps the course's arithmetic on purpose.

use crate::core::quantity::{python_min, Quantity};

/// The settled balance and the moment it was settled: always produced together, so a result
/// can never carry new tokens with a stale timestamp, or a new timestamp with stale tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct RefillResult<N> {
    /// The balance after settling, never above `capacity` if it grew.
    pub tokens: N,
    /// `now` if the balance was settled, the old settlement time if it was left alone.
    pub last_refill_at: N,
}

/// Settle a balance for the time elapsed since it was last settled.
///
/// ```text
/// elapsed = now - last_refill_at
/// elapsed <= 0  -> untouched: (tokens, last_refill_at), exactly as given
/// otherwise     -> grown  = tokens + elapsed * rate_per_sec
///                  capped = min(grown, capacity)
///                  (capped, now)
/// ```
///
/// The two branches worth remembering:
///
/// * **No time, no growth.** When `now` equals `last_refill_at`, or is *before* it (a clock that
///   appears to run backwards), `elapsed <= 0` holds and both inputs come back unchanged: no
///   tokens are added and the timestamp does not move. That single comparison is the whole
///   defence; there is no error for a backwards clock.
/// * **The cap comes after the growth.** The full `elapsed * rate_per_sec` is added first and
///   `min(grown, capacity)` clamps the sum, so a bucket idle for an hour holds `capacity`, not an
///   hour's worth of tokens. Credit above the ceiling is lost, not banked.
///
/// The function has no hidden state: the same five inputs always give the same result.
///
/// # Errors
///
/// Whatever error the number type reports (overflow, a Python exception), at the first operation
/// that fails, in the order the expressions above are evaluated.
// Inlined into its callers so that their numbers stay in registers: called out of line, its
// result was written to memory in parts and read back whole, which stalls the processor's
// store-to-load forwarding (perf showed it as half of the function's time).
#[allow(clippy::inline_always)]
#[inline(always)]
pub fn compute_refill<N: Quantity>(
    tokens: &N,
    capacity: &N,
    rate_per_sec: &N,
    last_refill_at: &N,
    now: &N,
) -> Result<RefillResult<N>, N::Error> {
    let elapsed = now.minus(last_refill_at)?;
    if elapsed.at_most_zero()? {
        return Ok(RefillResult {
            tokens: tokens.clone(),
            last_refill_at: last_refill_at.clone(),
        });
    }
    let grown = tokens.plus(&elapsed.times(rate_per_sec)?)?;
    let capped = python_min(&grown, capacity)?;
    Ok(RefillResult {
        tokens: capped,
        last_refill_at: now.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refill(tokens: i64, capacity: i64, rate: i64, last: i64, now: i64) -> (i64, i64) {
        let r = compute_refill(&tokens, &capacity, &rate, &last, &now).unwrap();
        (r.tokens, r.last_refill_at)
    }

    #[test]
    fn growth_is_elapsed_times_rate() {
        assert_eq!(refill(10, 100, 2, 5, 8), (16, 8));
    }

    #[test]
    fn zero_elapsed_returns_the_inputs_unchanged() {
        assert_eq!(refill(10, 100, 2, 5, 5), (10, 5));
    }

    #[test]
    fn negative_elapsed_returns_the_inputs_unchanged() {
        assert_eq!(refill(10, 100, 2, 5, 3), (10, 5));
    }

    #[test]
    fn growth_is_capped_at_capacity_after_it_is_added() {
        assert_eq!(refill(0, 10, 1, 0, 1_000), (10, 1_000));
        assert_eq!(refill(7, 10, 1, 0, 2), (9, 2));
        assert_eq!(refill(7, 10, 1, 0, 5), (10, 5));
    }

    #[test]
    fn one_unit_of_time_is_enough_to_grow_and_growth_may_land_on_the_cap() {
        assert_eq!(refill(10, 100, 2, 5, 6), (12, 6));
        assert_eq!(refill(7, 10, 1, 0, 3), (10, 3));
        assert_eq!(refill(7, 10, 1, 0, 4), (10, 4));
    }

    #[test]
    fn a_balance_above_capacity_is_clamped_only_when_time_passes() {
        assert_eq!(refill(50, 10, 1, 0, 0), (50, 0));
        assert_eq!(refill(50, 10, 1, 0, 1), (10, 1));
    }

    #[test]
    fn float_growth_follows_ieee_and_nan_flows_through_min() {
        let r = compute_refill(&0.5, &10.0, &0.25, &0.0, &3.0).unwrap();
        assert_eq!((r.tokens, r.last_refill_at), (1.25, 3.0));
        let r = compute_refill(&f64::NAN, &10.0, &1.0, &0.0, &1.0).unwrap();
        assert!(r.tokens.is_nan());
        // `nan <= 0` is false, so a NaN clock counts as time passing.
        let r = compute_refill(&1.0, &10.0, &1.0, &0.0, &f64::NAN).unwrap();
        assert!(r.tokens.is_nan() && r.last_refill_at.is_nan());
    }

    #[test]
    fn overflow_is_reported_not_wrapped() {
        assert!(compute_refill(&1_i64, &i64::MAX, &i64::MAX, &0, &2).is_err());
    }
}
