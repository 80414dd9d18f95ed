"""Refill is lazy: the pure math that brings a balance up to date.

Nothing ticks in the background. A balance stays exactly as stored until some caller asks
"given now, what is it?", and the growth accrued since ``last_refill_at`` is settled right then:

    elapsed = now - last_refill_at
    elapsed <= 0  -> untouched: the inputs come back unchanged
    elapsed > 0   -> grown = tokens + elapsed * rate_per_sec
                     capped = min(grown, capacity)
                     the result is (capped, now)

Import layout: this module takes plain scalars and returns a plain pair. It has no idea what a
bucket is and never imports the bucket module; the bucket module imports ``compute_refill``
from here and stores the two returned values on its own fields.
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RefillResult:
    """The refilled balance and the time it was settled at, always returned together.

    If ``tokens`` changed, ``last_refill_at`` moved to ``now`` in the same result; if it did not
    change, neither did the timestamp.
    """

    tokens: Any
    last_refill_at: Any


def compute_refill(
    tokens: Any,
    capacity: Any,
    rate_per_sec: Any,
    last_refill_at: Any,
    now: Any,
) -> RefillResult:
    """Settle the growth of a balance between ``last_refill_at`` and ``now``.

    Two branches are worth remembering:

    * ``elapsed <= 0`` (same instant, or a clock that went backwards): no growth and no
      timestamp move; the inputs come back unchanged, no error is raised.
    * the cap: a long idle period can grow ``tokens`` far past what the bucket holds, so the
      sum is clamped with ``min(grown, capacity)`` after the growth is added. Credit never
      banks past the capacity.

    The function has no hidden state: the same five inputs always give the same result.
    """
    elapsed = now - last_refill_at
    if elapsed <= 0:
        return RefillResult(tokens=tokens, last_refill_at=last_refill_at)
    grown = tokens + elapsed * rate_per_sec
    capped = min(grown, capacity)
    return RefillResult(tokens=capped, last_refill_at=now)
