//! A token bucket is where the refill math's answer gets stored.
//!
//! The bucket holds four numbers: how much it can hold (`capacity`), what it holds now
//! (`tokens`), how fast it fills (`rate_per_sec`) and when it was last settled
//! (`last_refill_at`). It does no arithmetic of its own about time. [`try_consume`] asks
//! [`compute_refill`] to settle the balance up to `now`, writes both numbers of the answer back,
//! and only then decides: a request for `n` tokens is allowed if the settled balance covers it
//! (and the tokens are spent), throttled otherwise (and nothing is spent).
//!
//! This module depends on the refill module; the refill module does not know this one exists.

use crate::core::quantity::Quantity;
use crate::core::refill::{compute_refill, RefillResult};

/// A bucket's state, as four plain numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket<N> {
    /// The most tokens the bucket keeps; refill never grows the balance past it.
    pub capacity: N,
    /// The balance as of `last_refill_at`.
    pub tokens: N,
    /// Tokens earned per unit of the caller's clock.
    pub rate_per_sec: N,
    /// When `tokens` was last settled.
    pub last_refill_at: N,
}

/// Whether a request may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumeOutcome {
    /// The balance covered the request, and the tokens were spent.
    Allowed,
    /// The balance did not cover the request; nothing was spent.
    Throttled,
}

/// The decision and the balance left after it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumeResult<N> {
    /// Allowed or throttled.
    pub outcome: ConsumeOutcome,
    /// The bucket's balance after the decision.
    pub tokens_remaining: N,
}

impl<N> From<[N; 4]> for TokenBucket<N> {
    /// The fields in declaration order: capacity, tokens, rate, last refill time.
    fn from([capacity, tokens, rate_per_sec, last_refill_at]: [N; 4]) -> Self {
        Self {
            capacity,
            tokens,
            rate_per_sec,
            last_refill_at,
        }
    }
}

impl<N> From<TokenBucket<N>> for [N; 4] {
    fn from(bucket: TokenBucket<N>) -> Self {
        [
            bucket.capacity,
            bucket.tokens,
            bucket.rate_per_sec,
            bucket.last_refill_at,
        ]
    }
}

impl<N> TokenBucket<N> {
    /// Keep the refill math's answer: both numbers, always together.
    pub fn store(&mut self, refilled: RefillResult<N>) {
        self.tokens = refilled.tokens;
        self.last_refill_at = refilled.last_refill_at;
    }
}

/// Settle the bucket up to `now`, then spend `n` tokens if the balance covers them.
///
/// The bucket does not pass itself to the refill math, only its numbers; the math does not
/// need to know whose balance it is settling.
///
/// # Errors
///
/// The number type's error, at the first operation that fails. The bucket is left exactly as
/// the course leaves it: untouched if the refill failed, holding the settled balance if the
/// comparison or the spend failed after it.
pub fn try_consume<N: Quantity>(
    bucket: &mut TokenBucket<N>,
    n: &N,
    now: &N,
) -> Result<ConsumeResult<N>, N::Error> {
    let refilled = compute_refill(
        &bucket.tokens,
        &bucket.capacity,
        &bucket.rate_per_sec,
        &bucket.last_refill_at,
        now,
    )?;
    bucket.store(refilled);
    if bucket.tokens.less_than(n)? {
        return Ok(ConsumeResult {
            outcome: ConsumeOutcome::Throttled,
            tokens_remaining: bucket.tokens.clone(),
        });
    }
    bucket.tokens = bucket.tokens.minus_in_place(n)?;
    Ok(ConsumeResult {
        outcome: ConsumeOutcome::Allowed,
        tokens_remaining: bucket.tokens.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(capacity: i64, tokens: i64, rate: i64) -> TokenBucket<i64> {
        TokenBucket {
            capacity,
            tokens,
            rate_per_sec: rate,
            last_refill_at: 0,
        }
    }

    fn consume(b: &mut TokenBucket<i64>, n: i64, now: i64) -> (ConsumeOutcome, i64) {
        let r = try_consume(b, &n, &now).unwrap();
        (r.outcome, r.tokens_remaining)
    }

    #[test]
    fn drains_then_refills_lazily() {
        let mut b = bucket(5, 5, 1);
        assert_eq!(consume(&mut b, 5, 0), (ConsumeOutcome::Allowed, 0));
        assert_eq!(consume(&mut b, 1, 0), (ConsumeOutcome::Throttled, 0));
        assert_eq!(consume(&mut b, 3, 3), (ConsumeOutcome::Allowed, 0));
        assert_eq!(consume(&mut b, 2, 4), (ConsumeOutcome::Throttled, 1));
        assert_eq!(b.last_refill_at, 4);
        assert_eq!(consume(&mut b, 1, 1_000), (ConsumeOutcome::Allowed, 4));
    }

    #[test]
    fn a_request_above_capacity_is_always_throttled() {
        let mut b = bucket(5, 5, 1);
        assert_eq!(
            consume(&mut b, 6, 1_000_000),
            (ConsumeOutcome::Throttled, 5)
        );
    }

    #[test]
    fn a_failed_refill_leaves_the_bucket_untouched() {
        let mut b = bucket(i64::MAX, 1, i64::MAX);
        let before = b.clone();
        assert!(try_consume(&mut b, &1, &2).is_err());
        assert_eq!(b, before);
    }

    #[test]
    fn a_failed_spend_keeps_the_settled_balance() {
        // Settling succeeds (the balance reaches i64::MAX), then spending -5 overflows.
        let mut b = bucket(i64::MAX, i64::MAX - 1, 1);
        assert!(try_consume(&mut b, &-5, &1).is_err());
        assert_eq!((b.tokens, b.last_refill_at), (i64::MAX, 1));
    }
}
