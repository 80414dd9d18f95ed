"""``settle(reserved, actual)`` on every rate limiter, and the :class:`Charge` that holds one.

A cost taken as ``reserved`` and known afterwards to be ``actual``: less gives the difference
back (as ``refund``), more takes it even beyond the balance, a debt held as time that later
calls wait out to the nanosecond (to the microsecond on Redis, whose clock has no finer grain).
Every limiter is asked on an explicit clock, so every wait is exact.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos settle")

from protocol_in_code.qos import (
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)
from protocol_in_code.qos.charge import (
    AsyncCharge,
    Charge,
    SettledTwice,
    charge_for,
    charge_for_async,
)
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    LimiterUnavailable,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)

SECOND = 10**9
#: Keys kept this long on the server, whose TTLs run on its real clock, not the test's.
KEEP_MS = 600_000
_names = itertools.count()


class Limiter:
    """One limiter of one key, however it is called: ``check(n, now)``, ``settle(reserved,
    actual, now)``, ``refund(n, now)``, for a keyed one on the key ``"k"``."""

    def __init__(self, limiter: Any, keyed: bool) -> None:
        self.limiter, self.key = limiter, ("k",) if keyed else ()

    def check(self, n: int, now: int) -> Any:
        return self.limiter.check(*self.key, n, now_ns=now)

    def settle(self, reserved: int, actual: int, now: int) -> None:
        self.limiter.settle(*self.key, reserved, actual, now_ns=now)

    def refund(self, n: int, now: int) -> None:
        self.limiter.refund(*self.key, n, now_ns=now)


Maker = Callable[..., Limiter]


@pytest.fixture(params=["one", "keyed", "shared", "shared keyed", "redis", "redis keyed"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Maker]:
    """Each limiter kind, made from ``RateLimiter``'s band arguments."""
    kind = request.param
    made: list[Any] = []

    def maker(*args: Any, **kwargs: Any) -> Limiter:
        name = f"settle{next(_names)}"
        if kind == "one":
            limiter: Any = RateLimiter(*args, **kwargs)
        elif kind == "keyed":
            limiter = KeyedRateLimiter(*args, **kwargs)
        elif kind == "shared":
            limiter = SharedRateLimiter(name, *args, path=tmp_path, **kwargs)
        elif kind == "shared keyed":
            limiter = SharedKeyedRateLimiter(name, *args, path=tmp_path, **kwargs)
        else:
            client = request.getfixturevalue("redis_client")
            cls = RedisRateLimiter if kind == "redis" else RedisKeyedRateLimiter
            limiter = cls(client, *args, name=name, min_ttl_ms=KEEP_MS, **kwargs)
        made.append(limiter)
        return Limiter(limiter, keyed="keyed" in kind)

    yield maker
    for limiter in made:
        if hasattr(limiter, "remove"):
            limiter.remove()


def test_less_than_reserved_gives_the_difference_back(make: Maker) -> None:
    limiter = make(1, burst=5)
    assert limiter.check(4, 0).remaining == 1
    limiter.settle(4, 1, 0)
    assert limiter.check(0, 0).remaining == 4
    # Capped at the burst, as a refund is.
    limiter.settle(9, 0, 0)
    assert limiter.check(0, 0).remaining == 5


def test_the_same_as_reserved_changes_nothing(make: Maker) -> None:
    limiter = make(1, burst=5)
    assert limiter.check(2, 0).allowed
    limiter.settle(2, 2, 0)
    assert limiter.check(0, 0).remaining == 3


def test_more_than_reserved_is_a_debt_repaid_exactly(make: Maker) -> None:
    # One token a second: 5 reserved, 8 used owes 3 s, so the next token is there at 4 s.
    limiter = make(1, burst=5)
    assert limiter.check(5, 0).allowed
    limiter.settle(5, 8, 0)
    denied = limiter.check(1, 0)
    assert (denied.outcome, denied.wait_ns, denied.remaining) == (
        LimitOutcome.DENIED,
        4 * SECOND,
        0,
    )
    assert not limiter.check(1, 4 * SECOND - 1000).allowed
    assert limiter.check(1, 4 * SECOND).allowed


def test_a_refund_while_in_debt_is_forfeited(make: Maker) -> None:
    limiter = make(1, burst=5)
    assert limiter.check(5, 0).allowed
    limiter.settle(5, 7, 0)
    limiter.refund(3, SECOND)
    limiter.settle(3, 0, SECOND)
    assert limiter.check(1, 3 * SECOND - 1000).wait_ns == 1000
    assert limiter.check(1, 3 * SECOND).allowed


def test_each_band_owes_its_own_debt(make: Maker) -> None:
    # 1/s burst 4 and 2/s burst 2: 2 reserved, 5 used. The slow band owes 1 s, the fast one
    # 1.5 s: the wait for one more token is the fast band's, 2 s.
    limiter = make(bands=[(1, 4), (2, 2)])
    assert limiter.check(2, 0).allowed
    limiter.settle(2, 5, 0)
    assert limiter.check(1, 0).wait_ns == 2 * SECOND


@pytest.mark.parametrize(
    ("reserved", "actual", "error", "match"),
    [
        (-1, 2, ValueError, "reserved must be between 0 and 2\\*\\*64 - 1, not -1"),
        (1, 2**64, ValueError, "actual must be between 0 and 2\\*\\*64 - 1, not 1844674"),
        (1, "2", TypeError, "actual must be an int, not str \\('2'\\)"),
        (True, 2, TypeError, "reserved must be an int, not bool \\(True\\)"),
        (1.0, 2, TypeError, "reserved must be an int, not float \\(1.0\\)"),
    ],
)
def test_bad_costs_are_refused_naming_the_parameter_and_the_value(
    make: Maker, reserved: Any, actual: Any, error: type, match: str
) -> None:
    limiter = make(1, burst=5)
    with pytest.raises(error, match=match):
        limiter.settle(reserved, actual, 0)
    assert limiter.check(0, 0).remaining == 5, "nothing changed"


def test_a_keyed_limiter_settles_under_a_plan() -> None:
    limiter = KeyedRateLimiter(plans={"free": [(1, 2)], "pro": [(10, 10)]})
    assert limiter.check("k", 2, now_ns=0, plan="free").allowed
    limiter.settle("k", 2, 3, now_ns=0, plan="free")
    assert limiter.check("k", 1, now_ns=0, plan="free").wait_ns == 2 * SECOND
    assert limiter.check("k", 1, now_ns=0, plan="pro").allowed


def test_a_key_in_debt_is_remembered_until_repaid() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=1)
    limiter.settle("a", 0, 4, now_ns=0)
    assert "a" in limiter
    assert limiter.check("b", 1, now_ns=3 * SECOND).outcome is LimitOutcome.REFUSED
    assert limiter.check("b", 1, now_ns=4 * SECOND).allowed


def test_redis_settles_in_one_script_call(redis_client: Any) -> None:
    limiter = RedisRateLimiter(redis_client, 1, burst=5, name="one-call", min_ttl_ms=KEEP_MS)
    assert limiter.check(5, now_ns=0).allowed
    sent: list[Any] = []
    server = limiter._core.server
    run = server.run
    server.run = lambda keys, args: sent.append(args) or run(keys, args)  # type: ignore[method-assign]
    limiter.settle(5, 8, now_ns=0)
    limiter.settle(3, 3, now_ns=0)  # the same: nothing to send
    limiter.settle(3, 1, now_ns=0)
    assert len(sent) == 2
    assert limiter.check(1, now_ns=0).wait_ns == 4 * SECOND


def test_a_cluster_settles_each_key_in_its_own_slot_as_in_process(redis_cluster: Any) -> None:
    """Keys spread over the cluster's slots (each settled by one script call on its node) owe
    and repay their debts exactly as the in-process table's keys do."""
    client = redis_cluster.client()
    name = f"cluster-settle-{next(_names)}"
    redis = RedisKeyedRateLimiter(client, 1, burst=5, name=name, min_ttl_ms=KEEP_MS)
    model = KeyedRateLimiter(1, burst=5)
    keys = [f"client-{i}" for i in range(12)]
    for i, key in enumerate(keys):
        for limiter in (redis, model):
            assert limiter.check(key, 4, now_ns=0).allowed
            limiter.settle(key, 4, i % 9, now_ns=0)  # less, the same, and more than reserved
    for now in (0, SECOND, 3 * SECOND):
        assert [redis.check(key, 1, now_ns=now) for key in keys] == [
            model.check(key, 1, now_ns=now) for key in keys
        ]


def test_a_debt_on_a_band_faster_than_its_burst_stores_no_more_than_the_burst_on_redis(
    redis_client: Any,
) -> None:
    """A hundred tokens a microsecond, a burst of 5: a debt of 3 tokens is repaid in 30 ns,
    which the server rounds up to 1 µs. Of that microsecond's 100 tokens the band stores its
    capacity (the script's invariant), as a refund to full does, and answers as the
    in-process limiter (exact to the nanosecond) does."""
    owing, full = f"fast-{next(_names)}", f"fast-{next(_names)}"
    redis = RedisRateLimiter(redis_client, 10**8, burst=5, name=owing, min_ttl_ms=KEEP_MS)
    model = RateLimiter(10**8, burst=5)
    for limiter in (redis, model):
        assert limiter.check(5, now_ns=0).allowed
        limiter.settle(5, 8, now_ns=0)
    refunded = RedisRateLimiter(redis_client, 10**8, burst=5, name=full, min_ttl_ms=KEEP_MS)
    assert refunded.check(5, now_ns=0).allowed
    refunded.refund(5, now_ns=0)

    def stored(name: str) -> int:
        (key,) = [key for key in redis_client.scan_iter(match=f"*{{{name}}}:*", _type="HASH")]
        return int(redis_client.hget(key, "1"))

    assert stored(owing) <= stored(full)
    for n in (5, 1, 1):  # the waits differ: the server's are in whole microseconds
        got, want = redis.check(n, now_ns=1_000), model.check(n, now_ns=1_000)
        assert (got.outcome, got.remaining) == (want.outcome, want.remaining), n


def unreachable_client() -> Any:
    """A client of a port nobody listens on, which reports at once (no retries)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis_servers import free_port

    return redis.Redis(
        host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )


def test_an_unreachable_server_settles_as_on_error_says() -> None:
    client = unreachable_client()
    with pytest.raises(LimiterUnavailable):
        RedisRateLimiter(client, 1, name="dead").settle(1, 3)
    for on_error in ("allow", "deny"):
        RedisRateLimiter(client, 1, name="dead", on_error=on_error).settle(1, 3)
    local = KeyedRateLimiter(1, burst=5)
    keyed = RedisKeyedRateLimiter(client, 1, burst=5, name="dead", on_error=local)
    keyed.settle("k", 0, 7, now_ns=0)
    assert local.check("k", 1, now_ns=0).wait_ns == 3 * SECOND


def test_the_asyncio_limiters_settle_as_the_synchronous_ones(redis_server: Any) -> None:
    import redis.asyncio

    async def run() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            await client.flushall()
            one = AsyncRedisRateLimiter(client, 1, burst=5, name="a1", min_ttl_ms=KEEP_MS)
            keyed = AsyncRedisKeyedRateLimiter(client, 1, burst=5, name="ak", min_ttl_ms=KEEP_MS)
            assert (await one.check(5, now_ns=0)).allowed
            await one.settle(5, 8, now_ns=0)
            assert (await one.check(1, now_ns=0)).wait_ns == 4 * SECOND
            assert (await keyed.check("k", 4, now_ns=0)).allowed
            await keyed.settle("k", 4, 1, now_ns=0)
            assert await keyed.available("k", now_ns=0) == 4
        finally:
            await client.aclose()

    asyncio.run(run())


# -- Charge -----------------------------------------------------------------------------------


def test_a_charge_settles_its_estimate_once() -> None:
    limiter = RateLimiter(1, burst=5)
    charge = charge_for(limiter, 3, now_ns=0)
    assert isinstance(charge, Charge) and charge.allowed
    charge.settle(6, now_ns=0)
    assert limiter.check(1, now_ns=0).wait_ns == 2 * SECOND
    with pytest.raises(SettledTwice, match="already settled or closed"):
        charge.settle(1, now_ns=0)


def test_a_charge_not_allowed_has_nothing_to_settle() -> None:
    limiter = RateLimiter(1, burst=5)
    charge = charge_for(limiter, 6, now_ns=0)
    assert not charge.allowed and charge.decision.outcome is LimitOutcome.NEVER
    with pytest.raises(SettledTwice, match="not allowed took nothing"):
        charge.settle(1, now_ns=0)
    assert limiter.available(now_ns=0) == 5


def test_a_charge_left_unsettled_keeps_its_estimate_and_refuses_a_late_settle() -> None:
    limiter = KeyedRateLimiter(1, burst=5)
    with pytest.raises(RuntimeError, match="the work failed"):
        with charge_for(limiter, 4, key="k", now_ns=0) as charge:
            raise RuntimeError("the work failed")
    assert limiter.available("k", now_ns=0) == 1
    with pytest.raises(SettledTwice):
        charge.settle(0, now_ns=0)
    assert limiter.available("k", now_ns=0) == 1


def test_a_charge_passes_the_key_and_the_plan_on() -> None:
    limiter = KeyedRateLimiter(plans={"free": [(1, 2)], "pro": [(10, 10)]})
    with charge_for(limiter, 2, key="k", plan="free", now_ns=0) as charge:
        charge.settle(3, now_ns=0)
    assert limiter.check("k", 1, now_ns=0, plan="free").wait_ns == 2 * SECOND


def test_a_charge_on_redis_settles_in_the_server(redis_client: Any) -> None:
    limiter = RedisKeyedRateLimiter(redis_client, 1, burst=5, name="charged", min_ttl_ms=KEEP_MS)
    with charge_for(limiter, 5, key="k", now_ns=0) as charge:
        charge.settle(8, now_ns=0)
    assert limiter.check("k", 1, now_ns=0).wait_ns == 4 * SECOND


def test_an_asyncio_charge_is_awaited(redis_server: Any) -> None:
    import redis.asyncio

    async def run() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            await client.flushall()
            limiter = AsyncRedisRateLimiter(client, 1, burst=5, name="ac", min_ttl_ms=KEEP_MS)
            async with await charge_for_async(limiter, 5, now_ns=0) as charge:
                assert isinstance(charge, AsyncCharge) and charge.allowed
                await charge.settle(7, now_ns=0)
            with pytest.raises(SettledTwice):
                await charge.settle(1, now_ns=0)
            assert (await limiter.check(1, now_ns=0)).wait_ns == 3 * SECOND
        finally:
            await client.aclose()

    asyncio.run(run())
