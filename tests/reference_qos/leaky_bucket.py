"""Leaky bucket: the token bucket's cousin, settled lazily in the opposite direction.

Arrivals raise ``level``; time drains it at ``leak_per_sec`` (settled only when someone calls
with a ``now``); what does not fit under ``capacity`` is dropped, not queued.
"""

from dataclasses import dataclass
from enum import Enum
from typing import Any


class OfferOutcome(str, Enum):
    """What ``offer`` decided."""

    ACCEPTED = "Accepted"
    OVERFLOWED = "Overflowed"


@dataclass
class LeakyBucket:
    """A ``level`` (at most ``capacity``) drained at ``leak_per_sec`` since ``last_leak_at``."""

    capacity: Any
    level: Any
    leak_per_sec: Any
    last_leak_at: Any = 0


@dataclass(frozen=True)
class OfferResult:
    """The decision and the level after it."""

    outcome: OfferOutcome
    level: Any


def leak(bucket: LeakyBucket, now: Any) -> None:
    """Drain ``bucket`` for the time elapsed since ``last_leak_at``, flooring the level at 0."""
    elapsed = now - bucket.last_leak_at
    if elapsed <= 0:
        return
    bucket.level = max(bucket.level - elapsed * bucket.leak_per_sec, 0)
    bucket.last_leak_at = now


def offer(bucket: LeakyBucket, n: Any, now: Any) -> OfferResult:
    """Leak up to ``now``, then add ``n`` if it fits under ``capacity``, else drop it."""
    leak(bucket, now)
    if bucket.level + n > bucket.capacity:
        return OfferResult(OfferOutcome.OVERFLOWED, bucket.level)
    bucket.level += n
    return OfferResult(OfferOutcome.ACCEPTED, bucket.level)
