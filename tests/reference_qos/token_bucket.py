"""Token bucket: a mutable balance that refills lazily, on each request.

``try_consume`` first settles the refill up to ``now`` with the pure ``compute_refill`` from the
refill module and writes both results back onto the bucket; only then does it decide: if the
balance is below ``n`` the request is throttled and nothing is taken, otherwise ``n`` tokens are
taken. The bucket is just where the refill math's answer gets stored.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .refill import compute_refill


class ConsumeOutcome(str, Enum):
    """What ``try_consume`` decided."""

    ALLOWED = "Allowed"
    THROTTLED = "Throttled"


@dataclass
class TokenBucket:
    """A balance of ``tokens`` (at most ``capacity``) refilled at ``rate_per_sec``.

    ``last_refill_at`` is when the balance was last brought up to date.
    """

    capacity: Any
    tokens: Any
    rate_per_sec: Any
    last_refill_at: Any = 0


@dataclass(frozen=True)
class ConsumeResult:
    """The decision and the balance left after it."""

    outcome: ConsumeOutcome
    tokens_remaining: Any


def try_consume(bucket: TokenBucket, n: Any, now: Any) -> ConsumeResult:
    """Refill ``bucket`` up to ``now``, then take ``n`` tokens if the balance allows it."""
    r = compute_refill(
        bucket.tokens, bucket.capacity, bucket.rate_per_sec, bucket.last_refill_at, now
    )
    bucket.tokens = r.tokens
    bucket.last_refill_at = r.last_refill_at
    if bucket.tokens < n:
        return ConsumeResult(ConsumeOutcome.THROTTLED, bucket.tokens)
    bucket.tokens -= n
    return ConsumeResult(ConsumeOutcome.ALLOWED, bucket.tokens)
