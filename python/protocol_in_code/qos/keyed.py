"""Many clients at once: one exact rate limiter per key, in bounded memory.

A server limits each client separately (per IP, per API key), so it keeps one bucket per key.
Two things make such a table dangerous, and :class:`KeyedRateLimiter` avoids both:

* **Memory that grows without bound** under a flood of distinct keys. The table remembers at
  most ``max_keys`` keys.
* **Forgetting a throttled client.** A table that evicts its least recently used key hands that
  client a fresh, full bucket: rotate through enough keys and you are never limited. Here a key
  is forgotten only when its state is *indistinguishable from a new key's* (every band full
  again), so forgetting changes no answer, ever.

Forgetting is lazy, like a DNS cache entry that expires only when someone looks: a key is
checked when it is touched, and a full table is swept for refilled keys when a new key needs
room. There is no background thread. If nothing can be forgotten, the new key is
**refused** (``LimitOutcome.REFUSED``, counted in ``stats.refused``), not let in by evicting
someone: under a flood of new keys faster than buckets refill, new clients wait, but no
throttled client is ever let off. That is the trade-off, chosen on purpose.

Keys are any hashable objects, equal as dict keys are (``1``, ``1.0`` and ``True`` are one
client; one exception: a ``str`` or ``bytes`` subclass whose ``__eq__`` equals it to a
*different* plain value is a key of its own). ``str``, ``bytes``, ``int`` (of any size) and
``float`` keys, and tuples of them, never call Python's ``__hash__``/``__eq__`` and are hashed
with the table's own seed; other keys are found by their Python hash, then by ``==``. A key
longer than 128 bytes is kept as a seeded 128-bit digest, so ``max_keys`` bounds the table's
bytes too; iteration and pickling give it back as a :class:`KeyDigest`, which every call takes
in its place.

Usage, in a web-style handler::

    per_client = KeyedRateLimiter(5, burst=10)    # 5 requests/s per client, bursts of 10

    def handle(request):
        if not per_client.try_acquire(request.client_ip):
            return 429, "Too Many Requests"
        ...

Per-client plans: ``KeyedRateLimiter(plans={"free": "100/hour", "pro": [Band("10/second",
burst=20)]})`` and ``try_acquire(key, plan="pro")``. Each plan keeps its own state per key, so a
key that changes plan starts fresh on the new plan: never more than one new burst of it (see
``docs/keyed.md``, "Plans").

``try_acquire_many(keys, now_ns)`` decides a whole trace of integer keys (numpy arrays or any
integer buffer) with the GIL released, exactly as the calls one by one would.
"""

from __future__ import annotations

from protocol_in_code._native import (
    Decision,
    KeyDigest,
    KeyedRateLimiter,
    KeyedStats,
    LimitOutcome,
)
from protocol_in_code.qos.limiter import Band

__all__ = ["Band", "Decision", "KeyDigest", "KeyedRateLimiter", "KeyedStats", "LimitOutcome"]
