"""Refill is lazy: a balance is settled when someone asks, never by a timer.

Nothing ticks in the background. Between two calls, the tokens a balance has earned simply wait,
as the gap between ``last_refill_at`` and the present. The first call that brings a ``now``
settles the gap in one step::

    elapsed = now - last_refill_at
    elapsed <= 0 -> untouched: RefillResult(tokens, last_refill_at), the inputs unchanged
    otherwise    -> grown  = tokens + elapsed * rate_per_sec
                    capped = min(grown, capacity)
                    RefillResult(capped, now)

Two branches are worth remembering. Zero or negative elapsed time (the same instant, or a clock
that seems to run backwards) adds nothing and leaves the timestamp where it was; it is not an
error. And the cap comes after the growth: a bucket idle for an hour holds ``capacity``, not an
hour of tokens.

A DNS cache entry expires the same way: it is not deleted on a timer, the next lookup checks it
against ``now``. ``compute_refill`` applies that trick to a balance instead of a boolean.

Import layout: this module takes five plain numbers and knows nothing of buckets; search it for
the bucket class's name and you will not find it. :mod:`protocol_in_code.qos.token_bucket` imports
``compute_refill`` from here and stores the two numbers it returns on its own fields. The math
stays pure (no side effects, no hidden state: the same inputs always give the same result), so it
can be checked by hand and reused by anything that accrues at a rate.

Toy boundary: the clock is whatever number you pass, growth is one multiplication (with float
rounding if you use floats), and a backwards clock is trusted to mean "no time passed".

The arithmetic runs in the native core (``src/core/refill.rs``), with Python's number semantics:
ints in, ints out.
"""

from protocol_in_code._native import RefillResult, compute_refill

__all__ = ["RefillResult", "compute_refill"]
