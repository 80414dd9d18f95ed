"""Stacked limits (``protocol_in_code.qos.stack``): one request under several limits, taken from
all of them or from none.

The contract is pinned against a model made of single calls on a twin of every limiter: ask
each bucket (``peek`` for the sum of its parts), then, only if every one allowed, take from
each (``check``). Then the seams: a stack against single calls on other threads, shared tables
stacked by several processes, limits in different stores (Redis, a limiter of the caller's
own), a part that raises, and the asyncio form.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.stack")

from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_in_code.qos import (
    Band,
    Decision,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)
from protocol_in_code.qos.stack import Part, Stacked, check_together, check_together_async

SECOND = 1_000_000_000
ALLOWED, DENIED, NEVER, REFUSED = (
    LimitOutcome.ALLOWED,
    LimitOutcome.DENIED,
    LimitOutcome.NEVER,
    LimitOutcome.REFUSED,
)
KEYS = ["a", "b", "c", 7, ("user", 1)]


#: The folders the shared tables of every world are made in, removed after the module's tests.
FOLDERS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _folders_removed() -> Iterator[None]:
    yield
    for folder in FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def world() -> list[Any]:
    """The limits a request may stack: one limit of one band, one of two, a keyed table, a
    small keyed table (it fills), a keyed table with plans, and a shared table of one limit
    and one per key (each in a folder of its own)."""
    folder = tempfile.mkdtemp(prefix="stack-")
    FOLDERS.append(folder)
    return [
        RateLimiter(5, start_ns=0),
        RateLimiter(bands=[Band(1, burst=3), Band(10, burst=20)], start_ns=0),
        KeyedRateLimiter(2, burst=4),
        KeyedRateLimiter(bands=[Band(1, burst=2), Band(3, burst=5)], max_keys=3, shards=2),
        KeyedRateLimiter(plans={"free": Band(1, burst=2), "pro": Band(5, burst=10)}),
        SharedRateLimiter("one", 4, burst=6, path=folder),
        SharedKeyedRateLimiter("keys", bands=[Band(1, burst=2), Band(4, burst=6)], path=folder),
    ]


def part(limits: list[Any], spec: tuple[int, int, int, str]) -> Part:
    limit, key, n, plan = spec
    if limit in (0, 1, 5):
        return Part(limits[limit], None, n)
    return Part(limits[limit], KEYS[key], n, plan if limit == 4 else None)


def model(limits: list[Any], specs: list[tuple[int, int, int, str]], now: int) -> list[Decision]:
    """The stack as single calls: each part answers for its bucket's sum; take if all allow."""
    parts = [part(limits, spec) for spec in specs]

    def bucket(p: Part) -> tuple[int, Hashable, str | None]:
        return (id(p.limiter), p.key, p.plan)

    totals: dict[tuple[int, Hashable, str | None], int] = {}
    for p in parts:
        totals[bucket(p)] = totals.get(bucket(p), 0) + p.n

    def call(method: str, p: Part) -> Decision:
        n = totals[bucket(p)]
        function = getattr(p.limiter, method)
        kwargs: dict[str, Any] = {"now_ns": now}
        if p.plan is not None:
            kwargs["plan"] = p.plan
        answer: Decision = function(n, **kwargs) if p.key is None else function(p.key, n, **kwargs)
        return answer

    asked = [call("peek", p) for p in parts]
    if any(d.outcome is not ALLOWED for d in asked):
        return asked
    taken: dict[tuple[int, Hashable, str | None], Decision] = {}
    for p in parts:
        if bucket(p) not in taken:
            taken[bucket(p)] = call("check", p)
    return [taken[bucket(p)] for p in parts]


def state(limits: list[Any], now: int) -> list[Any]:
    """What every limit and key holds, as ``band_levels`` says it."""
    seen: list[Any] = [limits[0].available(now_ns=now), limits[1].band_levels(now_ns=now)]
    for table in limits[2:4]:
        seen.append([table.band_levels(key, now_ns=now) for key in KEYS])
    for plan in ("free", "pro"):
        seen.append([limits[4].band_levels(key, now_ns=now, plan=plan) for key in KEYS])
    seen.append(limits[5].band_levels(now_ns=now))
    seen.append([limits[6].band_levels(key, now_ns=now) for key in KEYS])
    return seen


#: A request: up to four parts. At most one key of the small table (limit 3) per request: the
#: model asks each part alone, and a small table may have room for each of several new keys
#: alone but not for all of them, which the stack (rightly) refuses. Keys of one request
#: competing for a table's room are pinned in test_stack_seams.py.
request = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.integers(0, len(KEYS) - 1),
        st.integers(0, 4),
        st.sampled_from(["free", "pro"]),
    ),
    min_size=1,
    max_size=4,
).filter(lambda specs: len({key for limit, key, _, _ in specs if limit == 3}) <= 1)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(request, st.integers(0, SECOND)), min_size=1, max_size=25))
def test_every_stack_answers_as_single_calls_would_and_takes_all_or_nothing(steps):
    stacked, modelled = world(), world()
    now = 0
    for specs, elapsed in steps:
        now += elapsed
        got = check_together([part(stacked, spec) for spec in specs], now_ns=now)
        want = model(modelled, specs, now)
        assert got.parts == tuple(want)
        assert got.allowed == all(d.outcome is ALLOWED for d in want)
        assert state(stacked, now) == state(modelled, now)


def test_the_requests_decision_is_the_strictest_of_its_parts():
    limits = world()
    limits[0].check(5, now_ns=0)  # empty: the next token in 200 ms
    stacked = check_together(
        [Part(limits[0]), Part(limits[1], n=2), Part(limits[2], "a")], now_ns=0
    )
    assert not stacked
    assert stacked.decision == Decision(DENIED, SECOND // 5, 0)  # remaining: the least part's
    assert [d.outcome for d in stacked.parts] == [DENIED, ALLOWED, ALLOWED]
    # Nothing was taken from the parts that would have allowed.
    assert limits[1].available(now_ns=0) == 3
    assert limits[2].available("a", now_ns=0) == 4
    # NEVER wins over a wait: no wait fixes it.
    stacked = check_together([Part(limits[0]), Part(limits[2], "a", 5)], now_ns=0)
    assert stacked.decision == Decision(NEVER, None, 0)
    # A full table: REFUSED, with the longest wait.
    table = limits[3]
    for key in KEYS[:3]:
        table.check(key, 1, now_ns=0)
    stacked = check_together([Part(table, "new"), Part(limits[0])], now_ns=0)
    assert stacked.decision.outcome is REFUSED
    assert stacked.decision.wait_ns == max(d.wait_ns for d in stacked.parts)
    assert len(table) == 3 and "new" not in table


def test_parts_on_one_bucket_draw_from_it_together():
    limiter = RateLimiter(5, start_ns=0)
    stacked = check_together([Part(limiter, n=3), Part(limiter, n=3)], now_ns=0)
    # 6 from a burst of 5: never, though each half alone would pass.
    assert stacked.decision.outcome is NEVER
    assert limiter.available(now_ns=0) == 5
    table = KeyedRateLimiter(1, burst=4)
    stacked = check_together([Part(table, "k", 2), Part(table, "k", 2)], now_ns=0)
    assert stacked and table.available("k", now_ns=0) == 0


def test_a_stack_and_single_calls_on_other_threads_never_overspend():
    """Threads stack a global limit with a per-client one while other threads take from the
    global limit alone: the global limit is never overspent, and the per-client limits took
    exactly when a stack was taken."""
    clock = [0]
    everyone = RateLimiter(1, burst=400, clock=lambda: clock[0])
    per_client = KeyedRateLimiter(1, burst=50, clock=lambda: clock[0])
    stacked_taken = [0] * 4
    alone_taken = [0] * 2

    def stacker(t: int) -> None:
        for i in range(300):
            if check_together([Part(everyone), Part(per_client, f"c{(t + i) % 5}")]):
                stacked_taken[t] += 1

    def alone(t: int) -> None:
        for _ in range(300):
            if everyone.try_acquire():
                alone_taken[t] += 1

    threads = [threading.Thread(target=stacker, args=(t,)) for t in range(4)]
    threads += [threading.Thread(target=alone, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(stacked_taken) + sum(alone_taken) == 400 - everyone.available()
    assert sum(stacked_taken) == per_client.stats.allowed
    assert sum(stacked_taken) <= 5 * 50


def test_shared_tables_stack_with_in_process_limits_in_one_step(tmp_path: Path):
    local = RateLimiter(10, per=3600)
    shared = SharedRateLimiter("stack-global", 1, burst=1, per=3600, path=tmp_path)
    per_client = SharedKeyedRateLimiter("stack-client", 1, burst=5, per=3600, path=tmp_path)
    parts = [Part(local, n=2), Part(shared), Part(per_client, "k")]
    assert check_together(parts)
    refused = check_together(parts)
    assert not refused
    # Decided together: the parts that would have allowed took nothing, and say so.
    assert [d.outcome for d in refused.parts] == [ALLOWED, DENIED, ALLOWED]
    assert refused.parts[0].remaining == 8
    assert (local.available(), per_client.available("k")) == (8, 4)


def stack_in_a_child(path: str, rounds: int, out: Any) -> None:
    """A worker process: stack the shared global limit with its client's, ``rounds`` times."""
    everyone = SharedRateLimiter("stack-procs-global", 1, burst=60, per=3600, path=path)
    per_client = SharedKeyedRateLimiter("stack-procs-client", 1, burst=10, per=3600, path=path)
    taken = 0
    for i in range(rounds):
        client = f"c{i % 8}"
        # Every other request costs the client 3, so clients run out at different times.
        if check_together([Part(everyone), Part(per_client, client, 1 + 2 * (i % 2))]):
            taken += 1
    out.put(taken)


def test_processes_stacking_shared_tables_take_from_all_or_none(tmp_path: Path):
    """Four processes stack one shared global limit with per-client ones: the global limit is
    never overspent, and it lost a token exactly for each request admitted."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = [
        context.Process(target=stack_in_a_child, args=(str(tmp_path), 100, out)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    taken = sum(out.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    out.close()
    out.join_thread()
    everyone = SharedRateLimiter("stack-procs-global", 1, burst=60, per=3600, path=tmp_path)
    per_client = SharedKeyedRateLimiter("stack-procs-client", 1, burst=10, per=3600, path=tmp_path)
    spent_by_clients = sum(10 - per_client.available(f"c{i}") for i in range(8))
    assert taken == 60 - everyone.available()
    assert 0 < taken <= 60
    # Each admitted request cost its client 1 or 3; a refused one cost nothing anywhere.
    assert taken <= spent_by_clients <= 3 * taken


class Counter:
    """A limiter of the caller's own: ``limit`` tokens, no refill; it records every call."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.calls: list[str] = []

    def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        self.calls.append("check")
        if n > self.left:
            return Decision(DENIED, SECOND, self.left)
        self.left -= n
        return Decision(ALLOWED, 0, self.left)

    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        self.calls.append("peek")
        return Decision(
            ALLOWED if n <= self.left else DENIED, 0 if n <= self.left else SECOND, self.left
        )

    def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        self.calls.append("refund")
        self.left += n


def test_limiters_of_other_kinds_are_asked_in_turn_and_refunded_on_a_refusal():
    first, second, third = Counter(5), Counter(0), Counter(5)
    native = RateLimiter(10, start_ns=0)
    stacked = check_together([Part(first, n=2), Part(native), Part(second), Part(third)])
    assert not stacked
    assert (first.left, second.left, third.left) == (5, 0, 5)
    assert first.calls == ["check", "refund", "peek"]
    assert third.calls == ["peek"]
    assert native.available() == 10
    assert [d.outcome for d in stacked.parts] == [ALLOWED, ALLOWED, DENIED, ALLOWED]


def test_a_part_that_raises_leaves_nothing_taken():
    native = RateLimiter(10, start_ns=0)

    class Broken(Counter):
        def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
            raise ConnectionError("the store is down")

    with pytest.raises(ConnectionError):
        check_together([Part(native, n=3), Part(Broken(5))])
    assert native.available() == 10


def test_bad_parts_raise_before_anything_is_taken():
    limiter, table = RateLimiter(10, start_ns=0), KeyedRateLimiter(1, burst=5)
    with pytest.raises(ValueError, match="n"):
        check_together([Part(limiter, n=2), Part(table, "k", -1)])
    with pytest.raises(TypeError, match="values") as raised:
        check_together([Part(limiter, n=2), Part(table, object())])
    assert raised.value.__notes__ == ["in part 1 of a stacked request"]
    with pytest.raises(TypeError, match="no key"):
        check_together([Part(limiter, "k")])
    with pytest.raises(ValueError, match="plan"):
        check_together([Part(world()[4], "k", 1, "gold")])
    assert limiter.available() == 10 and len(table) == 0
    with pytest.raises(TypeError, match="Part"):
        check_together([limiter])
    with pytest.raises(TypeError, match=r"parts\[1\]: None is not a limiter"):
        check_together([Part(limiter), Part(None)])
    with pytest.raises(ValueError, match="at least one"):
        check_together([])
    with pytest.raises(TypeError, match="list of Part"):
        check_together(limiter)


def test_a_tuple_is_read_as_a_part():
    limiter = RateLimiter(10, start_ns=0)
    assert check_together([(limiter,), (limiter, None, 2)], now_ns=0).parts[0].remaining == 7


def test_the_asyncio_form_awaits_limiters_of_its_own_kind():
    class AsyncCounter:
        def __init__(self, limit: int) -> None:
            self.inner = Counter(limit)

        async def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
            return self.inner.check(n)

        async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
            return self.inner.peek(n)

        async def refund(self, n: int = 1, now_ns: int | None = None) -> None:
            self.inner.refund(n)

    native = RateLimiter(10, start_ns=0)
    remote = AsyncCounter(1)
    with pytest.raises(TypeError, match="check_together_async"):
        check_together([Part(native), Part(remote)])

    async def main() -> tuple[Stacked, Stacked]:
        first = await check_together_async([Part(native), Part(remote)])
        second = await check_together_async([Part(native), Part(remote)])
        return first, second

    first, second = asyncio.run(main())
    assert first and not second
    assert native.available() == 9
    assert remote.inner.calls == ["check", "check"]


# ---------------------------------------------------------------------------------------------
# In-process and Redis limits on one request (a real redis-server; rates slow enough that
# nothing refills while a test runs)
# ---------------------------------------------------------------------------------------------


def test_a_redis_refusal_gives_back_the_in_process_parts(redis_client: Any) -> None:
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter

    local = KeyedRateLimiter(1, burst=5, per=3600)
    everyone = RedisRateLimiter(redis_client, 1, burst=2, per=3600, name="stack-global")
    per_client = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=3600, name="stack-client")
    parts = [Part(local, "k"), Part(everyone), Part(per_client, "k")]
    assert [bool(check_together(parts)) for _ in range(3)] == [True, True, False]
    refused = check_together(parts)
    # The in-process part was taken, then given back: it holds what two requests left it.
    assert [d.outcome for d in refused.parts] == [ALLOWED, DENIED, ALLOWED]
    assert local.available("k") == 3
    assert per_client.available("k") == 3
    assert refused.decision.outcome is DENIED


def test_the_asyncio_form_stacks_asyncio_redis_limits_with_in_process_ones(
    redis_server: Any,
) -> None:
    pytest.importorskip("redis")
    import redis.asyncio
    from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter

    async def main() -> tuple[list[bool], int]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        try:
            await client.flushall()
            remote = AsyncRedisKeyedRateLimiter(client, 1, burst=2, per=3600, name="stack-async")
            local = RateLimiter(1, burst=5, per=3600)
            parts = [Part(local), Part(remote, "k")]
            allowed = [bool(await check_together_async(parts)) for _ in range(3)]
            return allowed, local.available()
        finally:
            await client.aclose()

    allowed, left = asyncio.run(main())
    assert allowed == [True, True, False]
    assert left == 3


def test_a_redis_server_that_is_down_leaves_nothing_taken(own_redis_server: Any) -> None:
    from protocol_in_code.qos.distributed import LimiterUnavailable, RedisRateLimiter

    client = own_redis_server.client()
    remote = RedisRateLimiter(client, 1, burst=5, per=3600, name="stack-down", on_error="raise")
    local = RateLimiter(1, burst=5, per=3600)
    assert check_together([Part(local), Part(remote)])
    own_redis_server.stop()
    with pytest.raises(LimiterUnavailable):
        check_together([Part(local, n=2), Part(remote)])
    assert local.available() == 4


def test_a_subclass_with_a_check_of_its_own_is_asked_through_it():
    """A subclass that keeps the native ``check`` is decided natively; one with its own is
    asked through it (in turn, with the others), so what it adds (here: counting) happens."""

    class Counted(RateLimiter):
        checks = 0

        def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
            type(self).checks += 1
            return super().check(n, now_ns)

    class Plain(KeyedRateLimiter):
        pass

    counted, plain = Counted(5, per=3600), Plain(1, burst=2, per=3600)
    assert check_together([Part(counted), Part(plain, "k")])
    assert Counted.checks == 1
    assert (counted.available(), plain.available("k")) == (4, 1)
    # Decided natively: its two parts on one key draw from it together (2 of the 1 left).
    assert check_together([Part(plain, "k"), Part(plain, "k")]).decision.outcome is DENIED
