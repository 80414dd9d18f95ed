"""Leaky and token are cousins: the same lazy settlement, run in the opposite direction.

A :class:`LeakyBucket` holds a ``level`` that arrivals raise and time drains at
``leak_per_sec``. As with refill, nothing drains it in the background: :func:`leak` settles the
drain owed since ``last_leak_at`` when a call brings a ``now``::

    elapsed = now - bucket.last_leak_at
    elapsed <= 0 -> nothing changes
    otherwise    -> bucket.level = max(bucket.level - elapsed * bucket.leak_per_sec, 0)
                    bucket.last_leak_at = now

:func:`offer` leaks first, then admits ``n`` only if ``level + n`` stays within ``capacity``.
What does not fit is dropped on the spot (OVERFLOWED), not queued.

=========================  ==============================  ==============================
                           token bucket                    leaky bucket
=========================  ==============================  ==============================
what it holds              credit (``tokens``)             fullness (``level``)
what time does             adds ``elapsed * rate``         takes off ``elapsed * leak``
the clamp                  ``min(grown, capacity)``        ``max(drained, 0)``
a request that won't fit   THROTTLED (wait for tokens)     OVERFLOWED (dropped)
after a long idle          full: a whole burst passes      empty: only ``capacity`` fits
=========================  ==============================  ==============================

So the same burst that a full token bucket allows at once overflows a leaky bucket with no
room: a token bucket banks idle time as credit, a leaky bucket only as room.

The course's ``leak()`` writes its answer onto the bucket; the native core computes it with a
pure function shaped like ``compute_refill`` (``src/core/leak.rs``) and the bucket stores it.
"""

from protocol_in_code._native import LeakyBucket, OfferOutcome, OfferResult, leak, offer

__all__ = ["LeakyBucket", "OfferOutcome", "OfferResult", "leak", "offer"]
