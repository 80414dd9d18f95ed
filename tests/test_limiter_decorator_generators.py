"""The decorator on generators (issue 14): an ``async def`` generator awaits its token.

``inspect.iscoroutinefunction`` is False for an async generator function, so a decorator that
only asks that question wraps it as a plain function and takes the token with a blocking
``acquire`` on the event loop, stalling every other task. The token is taken when the body
would start, for every kind of function: a generator's (async or not) at its first iteration.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Generator, Iterator

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from limiter_model import FakeClock
from protocol_in_code.qos.limiter import RateLimiter

SECOND = 1_000_000_000


def test_an_async_generator_awaits_its_token_and_the_loop_runs_other_tasks() -> None:
    # One token per 0.3 s, none left: the generator's first item is 0.3 s away.
    limiter = RateLimiter(1, per="0.3")
    assert limiter.try_acquire()

    @limiter
    async def numbers() -> AsyncIterator[int]:
        yield 1
        yield 2

    events: list[str] = []

    async def consume() -> list[int]:
        items = [item async for item in numbers()]
        events.append("items")
        return items

    async def tick() -> None:
        while "items" not in events:
            events.append("tick")
            await asyncio.sleep(0.01)

    async def main() -> list[int]:
        # The consumer is scheduled first: a blocking acquire in it would hold the loop until
        # its items were out, before the ticker ever ran.
        consumer = asyncio.ensure_future(consume())
        ticker = asyncio.ensure_future(tick())
        items = await consumer
        await ticker
        return items

    assert asyncio.run(main()) == [1, 2]
    assert events[0] == "tick", (
        "the decorated async generator held the event loop while it waited for its token"
    )
    assert events[-1] == "items"


def test_a_decorated_async_generator_is_one_and_takes_its_token_at_first_iteration() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1, burst=2, clock=clock)

    @limiter
    async def numbers(count: int) -> AsyncIterator[int]:
        """Count up."""
        for i in range(count):
            yield i

    assert inspect.isasyncgenfunction(numbers)
    assert numbers.__name__ == "numbers"
    assert numbers.__doc__ == "Count up."

    async def main() -> None:
        iterator = numbers(3)
        assert limiter.available() == 2, "calling takes nothing: the body has not started"
        assert await iterator.__anext__() == 0
        assert limiter.available() == 1
        assert [item async for item in iterator] == [1, 2]
        assert limiter.available() == 1, "one token per call, not per item"
        never_iterated = numbers(5)
        await never_iterated.aclose()
        assert limiter.available() == 1

    asyncio.run(main())


def test_a_decorated_async_generator_passes_on_send_throw_and_close() -> None:
    limiter = RateLimiter(1000)
    log: list[object] = []

    @limiter
    async def echo() -> AsyncIterator[object]:
        received: object = "start"
        try:
            while True:
                try:
                    received = yield received
                    log.append(received)
                except ValueError as error:
                    received = f"caught {error}"
        finally:
            log.append("closed")

    async def main() -> None:
        generator = echo()
        assert await generator.asend(None) == "start"
        assert await generator.asend("a") == "a"
        assert await generator.athrow(ValueError("boom")) == "caught boom"
        with pytest.raises(KeyError):
            await generator.athrow(KeyError("not caught"))
        assert log == ["a", "closed"]

        generator = echo()
        assert await generator.__anext__() == "start"
        await generator.aclose()
        assert log == ["a", "closed", "closed"]

    asyncio.run(main())


def test_a_decorated_generator_takes_its_token_at_first_iteration() -> None:
    clock = FakeClock()
    limiter = RateLimiter(1, burst=2, clock=clock)

    @limiter
    def numbers(count: int) -> Iterator[int]:
        yield from range(count)

    assert inspect.isgeneratorfunction(numbers)
    iterator = numbers(3)
    assert limiter.available() == 2, "calling takes nothing: the body has not started"
    assert next(iterator) == 0
    assert limiter.available() == 1
    assert list(iterator) == [1, 2]
    assert limiter.available() == 1, "one token per call, not per item"


def test_a_decorated_generator_passes_on_send_throw_close_and_its_return_value() -> None:
    limiter = RateLimiter(1000)

    @limiter
    def running_total() -> Generator[int, int, None]:
        total = 0
        try:
            while True:
                try:
                    total += yield total
                except ValueError:
                    total = 0
        finally:
            log.append("closed")

    log: list[str] = []
    generator = running_total()
    assert next(generator) == 0
    assert generator.send(5) == 5
    assert generator.throw(ValueError()) == 0
    generator.close()
    assert log == ["closed"]

    @limiter
    def returns() -> Generator[int, None, str]:
        yield 1
        return "done"

    generator_with_result = returns()
    assert next(generator_with_result) == 1
    with pytest.raises(StopIteration) as stopped:
        next(generator_with_result)
    assert stopped.value.value == "done"


def test_a_decorated_async_generator_with_tokens_at_hand_yields_at_once() -> None:
    limiter = RateLimiter(10, clock=FakeClock())

    @limiter
    async def one() -> AsyncIterator[str]:
        yield "x"

    async def main() -> list[str]:
        return [item async for item in one()]

    assert asyncio.run(main()) == ["x"]
    assert limiter.available() == 9
