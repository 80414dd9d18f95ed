//! A leaky bucket: where the leak math's answer is stored, and the decision to admit.
//!
//! The same four numbers as a token bucket, read the other way round: `level` is how full the
//! bucket is, not how much credit it holds. [`offer`] settles the drain up to `now` with
//! [`compute_leak`], stores it, and then admits `n` only if it fits under `capacity`. What does
//! not fit is dropped on the spot (overflowed), not queued: a leaky bucket smooths by refusing.
//!
//! The same burst that a full token bucket allows at once overflows a leaky bucket that has no
//! room: a token bucket banks idle time as credit, a leaky bucket only as room.

use crate::core::leak::{compute_leak, LeakResult};
use crate::core::quantity::Quantity;

/// A leaky bucket's state, as four plain numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakyBucket<N> {
    /// The highest level the bucket accepts.
    pub capacity: N,
    /// How full the bucket is, as of `last_leak_at`.
    pub level: N,
    /// How much drains per unit of the caller's clock.
    pub leak_per_sec: N,
    /// When `level` was last settled.
    pub last_leak_at: N,
}

impl<N> From<[N; 4]> for LeakyBucket<N> {
    /// The fields in declaration order: capacity, level, leak rate, last leak time.
    fn from([capacity, level, leak_per_sec, last_leak_at]: [N; 4]) -> Self {
        Self {
            capacity,
            level,
            leak_per_sec,
            last_leak_at,
        }
    }
}

impl<N> From<LeakyBucket<N>> for [N; 4] {
    fn from(bucket: LeakyBucket<N>) -> Self {
        [
            bucket.capacity,
            bucket.level,
            bucket.leak_per_sec,
            bucket.last_leak_at,
        ]
    }
}

/// Whether an arrival got in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OfferOutcome {
    /// It fit; the level rose by `n`.
    Accepted,
    /// It did not fit; it was dropped and the level is unchanged.
    Overflowed,
}

/// The decision on an arrival and the level after it.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferResult<N> {
    /// Accepted or overflowed.
    pub outcome: OfferOutcome,
    /// The bucket's level after the decision.
    pub level: N,
}

/// Settle the bucket's level up to `now` and store it.
///
/// # Errors
///
/// The number type's error; the bucket is then untouched.
// Inlined into its callers, so that their numbers stay in registers (see
// `refill::compute_refill` for what returning them through memory cost).
#[allow(clippy::inline_always)]
#[inline(always)]
pub fn leak<N: Quantity>(bucket: &mut LeakyBucket<N>, now: &N) -> Result<(), N::Error> {
    let LeakResult {
        level,
        last_leak_at,
    } = compute_leak(
        &bucket.level,
        &bucket.leak_per_sec,
        &bucket.last_leak_at,
        now,
    )?;
    bucket.level = level;
    bucket.last_leak_at = last_leak_at;
    Ok(())
}

/// Settle the level up to `now`, then admit `n` if `level + n` stays within `capacity`.
///
/// # Errors
///
/// The number type's error, at the first operation that fails. The bucket is left as the
/// course leaves it: untouched if the leak failed, holding the settled level after it.
pub fn offer<N: Quantity>(
    bucket: &mut LeakyBucket<N>,
    n: &N,
    now: &N,
) -> Result<OfferResult<N>, N::Error> {
    leak(bucket, now)?;
    if bucket.level.plus(n)?.greater_than(&bucket.capacity)? {
        return Ok(OfferResult {
            outcome: OfferOutcome::Overflowed,
            level: bucket.level.clone(),
        });
    }
    bucket.level = bucket.level.plus_in_place(n)?;
    Ok(OfferResult {
        outcome: OfferOutcome::Accepted,
        level: bucket.level.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer_i(b: &mut LeakyBucket<i64>, n: i64, now: i64) -> (OfferOutcome, i64) {
        let r = offer(b, &n, &now).unwrap();
        (r.outcome, r.level)
    }

    #[test]
    fn fills_overflows_then_drains_room() {
        let mut b = LeakyBucket::from([5, 0, 1, 0]);
        assert_eq!(offer_i(&mut b, 5, 0), (OfferOutcome::Accepted, 5));
        assert_eq!(offer_i(&mut b, 1, 0), (OfferOutcome::Overflowed, 5));
        assert_eq!(offer_i(&mut b, 3, 3), (OfferOutcome::Accepted, 5));
        assert_eq!(offer_i(&mut b, 0, 1_000), (OfferOutcome::Accepted, 0));
    }

    #[test]
    fn an_overflowed_offer_keeps_the_settled_level() {
        let mut b = LeakyBucket::from([5, 5, 1, 0]);
        assert_eq!(offer_i(&mut b, 4, 2), (OfferOutcome::Overflowed, 3));
        assert_eq!(b.last_leak_at, 2);
    }
}
