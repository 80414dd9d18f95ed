"""What the Redis limiters declare to the layers that take any limiter, and the Redis store.

The web forms and :func:`~protocol_in_code.qos.stack.check_together` never name a Redis class:
they ask each limiter for its capabilities (:mod:`protocol_in_code.qos.capabilities`), and
the four classes of :mod:`.limiters` declare theirs with what is here:

* :data:`STACKING`: the parts of a stacked request on Redis are decided together, one script
  call per client and hash slot (:mod:`._together`);
* :func:`key_refusal`: a Redis key is text or bytes, so a keyed limiter takes only ``str`` and
  ``bytes`` keys;
* :data:`BLOCKS` and :data:`AWAITS`: how the web forms name a limiter whose client does not
  fit them, and which client to give instead.

And :func:`rate_store`, the store a Redis client given as ``store=`` is: each rate's limit is
a Redis keyed limiter of that name, and an int given as ``max_in_flight`` a Redis keyed
in-flight limiter.

Nothing here imports the limiters at import time (they import this module to declare
themselves); what needs them imports them when it is first used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from protocol_in_code._native import Decision
from protocol_in_code.qos.capabilities import Misfit, StackedPart


class _Stacking:
    """The Redis limiters' :class:`~protocol_in_code.qos.capabilities.Stacking`: every Redis part
    of a stack in one call of :mod:`._together`."""

    def check_together(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]:
        from protocol_in_code.qos.distributed import _together

        return _together.check_together(parts, now_ns=now_ns)

    async def check_together_async(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]:
        from protocol_in_code.qos.distributed import _together

        return await _together.check_together_async(parts, now_ns=now_ns)


#: The one stacking of every Redis limiter: a stack's Redis parts are handed to it together.
STACKING = _Stacking()

#: How the ASGI forms name a limiter on a synchronous client, which they refuse.
BLOCKS = Misfit(
    "a Redis limiter on a synchronous client", "give it an asyncio client (redis.asyncio.Redis)"
)

#: How the synchronous forms name a limiter on an asyncio client, which they refuse.
AWAITS = Misfit("an asyncio Redis limiter", "give it a synchronous client (redis.Redis)")


def key_refusal(key: object) -> str | None:
    """``None`` for a key a Redis keyed limiter takes (``str`` or ``bytes``), else why not."""
    if isinstance(key, (str, bytes)):
        return None
    return "a Redis limiter cannot take: its keys are str or bytes"


class RedisStore:
    """A Redis client given as ``store=``: each rate's limit is a keyed limiter of its name,
    one limit for every host (on an asyncio client, the asyncio limiter)."""

    named = "the Redis client"

    def __init__(self, client: Any) -> None:
        self.client = client

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any:
        from protocol_in_code.qos.distributed.limiters import RedisKeyedRateLimiter

        return RedisKeyedRateLimiter(self.client, rate, burst=burst, name=name)

    def keyed_in_flight(self, limit: int, name: str) -> Any:
        """Seats per key of that name, kept on the server: each call sends ``limit``. A
        request may run longer than a lease lives (a long stream), so every lease is kept
        alive by the heartbeat until the response ends; a worker that dies gives its seats
        back within ``lease_ttl``."""
        from protocol_in_code.qos.distributed._seats import RedisKeyedConcurrencyLimiter
        from protocol_in_code.qos.distributed._seats_async import (
            AsyncRedisKeyedConcurrencyLimiter,
        )
        from protocol_in_code.qos.distributed._server import Server

        if Server(self.client).is_async:
            return AsyncRedisKeyedConcurrencyLimiter(self.client, limit, name=name, heartbeat=True)
        return RedisKeyedConcurrencyLimiter(self.client, limit, name=name, heartbeat=True)


def rate_store(given: Any) -> RedisStore | None:
    """The store around ``given`` if it is a Redis client (sync or asyncio, or any client that
    runs scripts by ``evalsha``), else ``None``."""
    if callable(getattr(given, "evalsha", None)):
        return RedisStore(given)
    return None
