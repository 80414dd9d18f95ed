"""A cancelled stacked request leaves no part spent (issue 32, item 10).

``check_together_async`` takes the parts of other stores in turn and, when a later one
refuses, gives back the ones taken before it. A cancel that landed inside that give-back used
to stop it half way: 87 to 93 tokens of 300 stacks stayed spent for requests that never ran.

Here every stack is refused by its last part, so nothing may stay taken anywhere, however the
request ended: answered, or cancelled at a random moment (some before anything was taken,
some while a part was taken, some inside a give-back). Once the give-backs a cancel left
running have landed, every part must hold what it held before the first request. The stores:
asyncio Redis limiters on a real redis-server, and an asyncio limiter of the caller's own
whose every call is a short wait (a round trip) before it reads or changes its tokens.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.stack")

from protocol_in_code.qos import Decision, KeyedRateLimiter, LimitOutcome, RateLimiter
from protocol_in_code.qos.stack import Part, check_together_async

SECOND = 1_000_000_000
HOUR = 3600
BURST = 1_000  # one token an hour: nothing refills while a test runs
STACKS = 300
WAVE = 10  # stacks under way at once


class AsyncStore:
    """An asyncio limiter of the caller's own: ``limit`` tokens, no refill. Each call waits
    ``delay`` seconds first, as a round trip to its store would, and then reads or changes its
    tokens at once: a call cancelled during the wait does nothing."""

    def __init__(self, limit: int, delay: float = 0.001) -> None:
        self.left = limit
        self.delay = delay

    async def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        await asyncio.sleep(self.delay)
        if n > self.left:
            return Decision(LimitOutcome.DENIED, SECOND, self.left)
        self.left -= n
        return Decision(LimitOutcome.ALLOWED, 0, self.left)

    async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        await asyncio.sleep(self.delay)
        allowed = n <= self.left
        outcome = LimitOutcome.ALLOWED if allowed else LimitOutcome.DENIED
        return Decision(outcome, 0 if allowed else SECOND, self.left)

    async def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        await asyncio.sleep(self.delay)
        self.left += n


async def stacked_and_cancelled(
    parts: list[Part], levels: Callable[[], Awaitable[list[int]]]
) -> tuple[list[int], list[int], int]:
    """(the parts' levels before, and after, and how many stacks were cancelled): ``STACKS``
    stacks of ``parts``, ``WAVE`` at a time, each cancelled after a random moment within what
    a stack lasts here (measured first, on stacks let finish); the levels after are read once
    the give-backs left running have landed, or after 10 s (a bound on a hang, not a speed)."""
    rng = random.Random(32)
    before = await levels()
    started = time.monotonic()
    await asyncio.gather(*(check_together_async(parts) for _ in range(WAVE)))
    lasts = time.monotonic() - started
    cancelled = 0

    async def one() -> None:
        nonlocal cancelled
        try:
            stacked = await asyncio.wait_for(check_together_async(parts), rng.uniform(0, lasts))
        except asyncio.TimeoutError:
            cancelled += 1
            return
        assert not stacked, "every stack is refused by its last part"

    for _ in range(STACKS // WAVE):
        await asyncio.gather(*(one() for _ in range(WAVE)))
    deadline = time.monotonic() + 10
    while await levels() != before and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return before, await levels(), cancelled


def run(main: Callable[[], Awaitable[tuple[list[int], list[int], int]]]) -> None:
    with qos_support.watchdog(120):
        before, after, cancelled = asyncio.run(main())
    assert cancelled > STACKS // 10, "the cancels must land all along the stacks"
    lost = [b - a for b, a in zip(before, after, strict=True)]
    assert lost == [0] * len(lost), f"tokens spent for cancelled requests, by part: {lost}"


def test_cancelled_stacks_of_stores_of_ones_own_leave_nothing_taken() -> None:
    """Two parts taken, the third refuses: the first two are given back, one round trip
    each, while the cancels land."""

    async def main() -> tuple[list[int], list[int], int]:
        native = RateLimiter(1, burst=BURST, per=HOUR)
        first, second, refusing = AsyncStore(BURST), AsyncStore(BURST), AsyncStore(0)
        parts = [Part(native), Part(first, n=2), Part(second), Part(refusing)]

        async def levels() -> list[int]:
            return [native.available(), first.left, second.left, refusing.left]

        return await stacked_and_cancelled(parts, levels)

    run(main)


@pytest.mark.parametrize("refused_by", ["a store of one's own", "a second Redis client"])
def test_cancelled_stacks_with_asyncio_redis_parts_leave_nothing_taken(
    own_redis_server: Any, refused_by: str
) -> None:
    """The Redis parts are taken first (one script call per client), then the stack is
    refused by a later part: by a store of one's own, after which the stack gives the Redis
    parts back; or by a Redis key of another client (another group of the Redis stack), after
    which the Redis stack gives the first client's keys back."""
    import redis.asyncio
    from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, AsyncRedisRateLimiter

    async def main() -> tuple[list[int], list[int], int]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=own_redis_server.port)
        other = redis.asyncio.Redis(host="127.0.0.1", port=own_redis_server.port)
        try:
            native = RateLimiter(1, burst=BURST, per=HOUR)
            table = KeyedRateLimiter(1, burst=BURST, per=HOUR)
            everyone = AsyncRedisRateLimiter(client, 1, burst=BURST, per=HOUR, name="everyone")
            per_client = AsyncRedisKeyedRateLimiter(
                client, 1, burst=BURST, per=HOUR, name="per-client"
            )
            mine = AsyncStore(BURST, delay=0)
            clients = [f"client-{i}" for i in range(8)]  # a give-back: a round trip per key
            parts = [Part(native), Part(everyone, n=2)]
            parts += [Part(per_client, key) for key in clients] + [Part(mine)]
            if refused_by == "a store of one's own":
                refusing: Any = AsyncStore(0, delay=0)
                parts.append(Part(refusing))
            else:
                refusing = AsyncRedisRateLimiter(other, 1, burst=1, per=HOUR, name="spent")
                assert await refusing.check()  # spent: refuses from now on
                parts.insert(-1, Part(refusing))
            parts.insert(1, Part(table, "k"))

            async def levels() -> list[int]:
                return [
                    native.available(),
                    table.available("k"),
                    await everyone.available(),
                    *[await per_client.available(key) for key in clients],
                    mine.left,
                ]

            return await stacked_and_cancelled(parts, levels)
        finally:
            await client.aclose()
            await other.aclose()

    run(main)
