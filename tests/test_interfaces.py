"""Every limiter is one of the four interfaces of ``protocol_in_code.qos.interfaces`` (issue 23).

mypy checks the declarations: each limiter class is assignable to its own interface and to no
other (``--strict`` reports an ``ignore`` that is not needed, so the refusals are checked too).
At run time :func:`kind_of` tells the four apart, and the web middleware takes any object of
them, not only the package's own classes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code.qos import (
    Band,
    Decision,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)
from protocol_in_code.qos.asgi import RateLimitMiddleware
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.interfaces import kind_of

CHECKED = textwrap.dedent(
    """
    from collections.abc import Hashable

    import redis
    import redis.asyncio

    from protocol_in_code.qos import (
        KeyedRateLimiter,
        RateLimiter,
        SharedKeyedRateLimiter,
        SharedRateLimiter,
    )
    from protocol_in_code.qos.distributed import (
        AsyncRedisKeyedRateLimiter,
        AsyncRedisRateLimiter,
        RedisKeyedRateLimiter,
        RedisRateLimiter,
    )
    from protocol_in_code.qos.interfaces import (
        AsyncKeyedLimiter,
        AsyncLimiter,
        KeyedLimiter,
        Limiter,
    )

    client = redis.Redis()
    aclient = redis.asyncio.Redis()

    one: Limiter = RateLimiter(1)
    one = RedisRateLimiter(client, 1, name="k")
    one = SharedRateLimiter("one", 1)
    keyed: KeyedLimiter[Hashable] = KeyedRateLimiter(1)
    keyed = SharedKeyedRateLimiter("clients", 1)
    keyed_text: KeyedLimiter[str] = RedisKeyedRateLimiter(client, 1, name="clients")
    awaited: AsyncLimiter = AsyncRedisRateLimiter(aclient, 1, name="k")
    awaited_keyed: AsyncKeyedLimiter[bytes] = AsyncRedisKeyedRateLimiter(aclient, 1, name="clients")

    # Each is its own kind only.
    wrong_1: Limiter = KeyedRateLimiter(1)  # type: ignore[assignment]
    wrong_2: KeyedLimiter[Hashable] = RateLimiter(1)  # type: ignore[assignment]
    wrong_3: Limiter = AsyncRedisRateLimiter(aclient, 1, name="k")  # type: ignore[assignment]
    wrong_4: AsyncLimiter = RedisRateLimiter(client, 1, name="k")  # type: ignore[assignment]
    wrong_6: Limiter = SharedKeyedRateLimiter("c", 1)  # type: ignore[assignment]
    wrong_7: KeyedLimiter[Hashable] = SharedRateLimiter("c", 1)  # type: ignore[assignment]
    redis_keyed = RedisKeyedRateLimiter(client, 1, name="c")
    wrong_5: KeyedLimiter[Hashable] = redis_keyed  # type: ignore[assignment]

    # With plans (every call then takes plan=), each is still of its own kind.
    keyed = KeyedRateLimiter(plans={"free": "100/hour", "pro": 10})
    keyed = SharedKeyedRateLimiter("planned", plans={"free": 1})
    keyed_text = RedisKeyedRateLimiter(client, name="planned", plans={"free": 1})
    awaited_keyed = AsyncRedisKeyedRateLimiter(aclient, name="planned", plans={"free": 1})
    keyed.check(1, plan="free")
    """
)


def test_mypy_finds_every_limiter_of_its_own_interface_and_of_no_other(tmp_path: Path) -> None:
    qos_support.mypy_strict(CHECKED, tmp_path)


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: RateLimiter(1), (False, False)),
        (lambda: KeyedRateLimiter(1), (True, False)),
        (lambda: KeyedRateLimiter(plans={"free": 1}), (True, False)),
        (lambda: SharedKeyedRateLimiter("kinds", plans={"a": 1}, max_keys=8), (True, False)),
        (
            lambda: RedisKeyedRateLimiter(qos_support.NoServer(), name="c", plans={"a": 1}),
            (True, False),
        ),
        (lambda: SharedRateLimiter("kinds", 1), (False, False)),
        (lambda: SharedKeyedRateLimiter("kinds", 1, max_keys=8), (True, False)),
        (lambda: RedisRateLimiter(qos_support.NoServer(), 1, name="k"), (False, False)),
        (lambda: RedisKeyedRateLimiter(qos_support.NoServer(), 1, name="clients"), (True, False)),
        (lambda: AsyncRedisRateLimiter(qos_support.AsyncNoServer(), 1, name="k"), (False, True)),
        (
            lambda: AsyncRedisKeyedRateLimiter(qos_support.AsyncNoServer(), 1, name="clients"),
            (True, True),
        ),
    ],
    ids=[
        "RateLimiter",
        "KeyedRateLimiter",
        "KeyedRateLimiter with plans",
        "SharedKeyed with plans",
        "RedisKeyed with plans",
        "Shared",
        "SharedKeyed",
        "Redis",
        "RedisKeyed",
        "AsyncRedis",
        "AsyncRedisKeyed",
    ],
)
def test_kind_of_tells_the_four_apart(make: Any, kind: tuple[bool, bool]) -> None:
    limiter = make()
    assert kind_of(limiter) == kind
    if isinstance(limiter, (SharedRateLimiter, SharedKeyedRateLimiter)):
        limiter.remove()


def test_kind_of_refuses_what_is_no_limiter_naming_what_it_lacks() -> None:
    class Half:
        bands = (Band(1, burst=1),)

        def try_acquire(self, n: int = 1) -> bool:
            return True

    with pytest.raises(TypeError, match="Half has no check, peek, refund, available, acquire"):
        kind_of(Half())


class Always:
    """A limiter of the package's interface from elsewhere: every request allowed."""

    bands = (Band(10, burst=10),)

    def try_acquire(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> bool:
        return True

    def check(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> Decision:
        return Decision(LimitOutcome.ALLOWED, 0, 10)

    peek = check

    def refund(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> None:
        return None

    def available(self, key: Hashable, now_ns: int | None = None) -> int:
        return 10

    def acquire(self, key: Hashable, n: int = 1, timeout: float | None = None) -> bool:
        return True

    async def acquire_async(self, key: Hashable, n: int = 1, timeout: float | None = None) -> bool:
        return True

    def try_acquire_many(self, keys: Any, *args: Any, **kwargs: Any) -> Any:
        return [0] * len(keys)


def test_the_middleware_takes_any_object_of_the_interfaces() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None

    RateLimitMiddleware(app, limiter=Always())
    with pytest.raises(TypeError, match="limiter must be a limiter"):
        RateLimitMiddleware(app, limiter=object())


def test_a_keyed_limiter_without_a_batch_method_is_still_keyed() -> None:
    class KeyedNoBatch:
        bands = (Band(1, burst=1),)

        def try_acquire(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> bool:
            return True

        def check(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> Decision:
            return Decision(LimitOutcome.ALLOWED, 0, 1)

        peek = check

        def refund(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> None:
            return None

        def available(self, key: Hashable, now_ns: int | None = None) -> int:
            return 1

        def acquire(self, key: Hashable, n: int = 1, timeout: float | None = None) -> bool:
            return True

    assert kind_of(KeyedNoBatch()) == (True, False)


def test_a_check_that_takes_neither_n_nor_key_first_is_refused() -> None:
    class Odd:
        bands = (Band(1, burst=1),)

        def check(self, request: Any) -> Decision:
            return Decision(LimitOutcome.ALLOWED, 0, 1)

        try_acquire = peek = refund = available = acquire = check

    with pytest.raises(TypeError, match="must take n first"):
        kind_of(Odd())
