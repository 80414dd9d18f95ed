"""A token bucket is where the refill math's answer gets stored.

A :class:`TokenBucket` holds four numbers: ``capacity`` (the most it keeps), ``tokens`` (the
balance), ``rate_per_sec`` (how fast it fills) and ``last_refill_at`` (when the balance was last
settled). It does no arithmetic of its own about time.

:func:`try_consume` hands the bucket's numbers, not the bucket, to
:func:`~protocol_in_code.qos.refill.compute_refill`, writes both numbers of the answer back onto
the bucket, and only then decides::

    bucket.tokens < n -> THROTTLED, nothing spent
    otherwise         -> bucket.tokens -= n; ALLOWED

A drained bucket fills itself back up without anyone touching it in between: the next call's
``now`` is what settles the growth. A request larger than ``capacity`` is throttled forever,
because refill never grows the balance past the cap.

The bucket is shared safely between threads: each ``try_consume`` stores its whole update or
retries it, so no update is lost.
"""

from protocol_in_code._native import ConsumeOutcome, ConsumeResult, TokenBucket, try_consume

__all__ = ["ConsumeOutcome", "ConsumeResult", "TokenBucket", "try_consume"]
