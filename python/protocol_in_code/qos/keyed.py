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
checked when it is touched, and a full shard of the table is swept for refilled keys when a new
key needs room. There is no background thread. If nothing can be forgotten, the new key is
**refused** (``LimitOutcome.REFUSED``, counted in ``stats.refused``), not let in by evicting
someone: under a flood of new keys faster than buckets refill, new clients wait, but no
throttled client is ever let off. That is the trade-off, chosen on purpose.

Keys are any hashable objects, equal as dict keys are (``1``, ``1.0`` and ``True`` are one
client; one exception: a ``str`` or ``bytes`` subclass whose ``__eq__`` equals it to a
*different* plain value is a key of its own). ``str``, ``bytes``, ``int`` and integral
``float`` keys never call Python's ``__hash__``/``__eq__``; other keys are looked up in a
Python dict, one thread at a time.

Usage, in a web-style handler::

    per_client = KeyedRateLimiter(5, burst=10)    # 5 requests/s per client, bursts of 10

    def handle(request):
        if not per_client.try_acquire(request.client_ip):
            return 429, "Too Many Requests"
        ...

``try_acquire_many(keys, now_ns)`` decides a whole trace of integer keys (numpy arrays or any
integer buffer) with the GIL released, exactly as the calls one by one would.
"""

from __future__ import annotations

from collections.abc import Hashable

from protocol_in_code._native import Decision, KeyedStats, LimitOutcome, NativeKeyedRateLimiter
from protocol_in_code.qos.limiter import Band, _await_allowed, _PicklesAttributes

__all__ = ["Band", "Decision", "KeyedRateLimiter", "KeyedStats", "LimitOutcome"]


class KeyedRateLimiter(_PicklesAttributes, NativeKeyedRateLimiter):
    """One exact rate limiter per key, at most ``max_keys`` keys remembered.

    ``KeyedRateLimiter(rate, burst=None, *, per=1, bands=None, max_keys=100_000, shards=None,
    clock=None)``: every key is limited by the same bands, given as for :class:`RateLimiter`.
    Each key starts full. The table is split into ``shards`` locks (default
    ``min(16, max_keys)``) that share ``max_keys`` between them; a new key is refused when its
    own shard is full.

    Per key (each takes ``now_ns=`` to override the clock): ``try_acquire(key, n=1) -> bool``,
    ``check(key, n=1) -> Decision``, ``peek(key, n=1) -> Decision``, ``refund(key, n=1)``,
    ``available(key) -> int``, blocking ``acquire(key, n=1, timeout=None)`` and
    ``await acquire_async(key, n=1, timeout=None)``. The table: ``len()``, iteration over the
    keys remembered, ``key in limiter``, ``stats``, and ``try_acquire_many(keys, now_ns, n=None)``
    for whole traces of integer keys.

    The table has one clock that never goes backwards: a call made at a time before the latest
    one the table has seen is decided at that latest time (its ``wait_ns`` still counts from the
    caller's time). With the default monotonic clock this never matters.
    """

    async def acquire_async(self, key: Hashable, n: int = 1, timeout: float | None = None) -> bool:
        """Take ``n`` tokens for ``key``, awaiting until allowed; False if ``timeout`` passes.

        Raises ValueError if ``n`` exceeds a band's burst (no wait would ever be enough). A
        refusal (the table is full) awaits until room may appear, then tries again.
        """
        return await _await_allowed(lambda: self.check(key, n), n, timeout)
