"""The capstone: classify, refill, spend, with one independent token bucket per class.

A :class:`ToyShaper` keeps a bucket per traffic class in ``buckets`` (by class name). Each
:meth:`ToyShaper.enqueue` looks up the packet's class, asks that class's own bucket with
``try_consume``, records a line in ``trace`` and returns an :class:`EnqueueResult`.

Isolation is the point: a class that floods drains only its own bucket, so at the same instant
another class still sails through. :meth:`ToyShaper.tick` moves the shaper's clock; tokens come
back on the next enqueue, lazily, as in every session before. :func:`run_contention` offers a
list of ``(class_name, size)`` packets at the current clock, in order.

An unknown class raises ``KeyError``: the shaper does not invent buckets.
"""

from protocol_in_code._native import EnqueueResult, ToyShaper, run_contention

__all__ = ["EnqueueResult", "ToyShaper", "run_contention"]
