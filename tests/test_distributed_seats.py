"""In-flight limits on a real Redis server: the script against the model, the line, the leases.

What the server decides is pinned, never when a thread wakes: the line is driven through the
script's own calls (a waiter put in line, its grant list read), and threads are started one by
one, each seen in line before the next comes.
"""

from __future__ import annotations

import gc
import itertools
import os
import threading
import time
import traceback
from typing import Any

import pytest
import qos_support
from concurrency_model import Model, Refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedConcurrencyLimiter,
    LeaseExpired,
    RedisConcurrencyLimiter,
    RedisKeyedConcurrencyLimiter,
)
from protocol_in_code.qos.distributed._seats_core import Ask, Limit, grant_token, new_id
from redis_servers import wait_until

_names = itertools.count()


#: The lease time of the heartbeat tests: a beat every second, so that a loaded machine that
#: delays one beat (or two) does not let a lease lapse, which a third of it would take.
BEAT_TTL = 3.0


def fresh(client: Any, limit: int, **options: Any) -> RedisConcurrencyLimiter:
    return RedisConcurrencyLimiter(client, limit, name=f"seats-{next(_names)}", **options)


# The script against the model. Each operation is one script call; a waiter is put in line by
# the acquire call itself, and what the server decided for it is read from its grant list.

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("try"), st.integers(1, 5)),
        st.tuples(st.just("ask"), st.integers(1, 5)),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("leave"), st.integers(0, 20)),
        st.tuples(st.just("resize"), st.integers(1, 5)),
    ),
    max_size=25,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(limit=st.integers(1, 4), ops=OPS)
def test_the_script_decides_as_the_model(
    shared_redis_client: Any, limit: int, ops: list[Any]
) -> None:
    client = shared_redis_client
    limiter = fresh(client, limit, lease_ttl=600)
    where = limiter._where
    model = Model(limit)
    held: list[tuple[bytes, int]] = []  # (lease id, n), in the order they were seated
    line: list[bytes] = []  # our waiters' ids, in the order they asked
    tokens: dict[int, int] = {}  # the model's token -> ours

    def seat(lease_id: bytes, n: int, model_token: int, token: int) -> None:
        held.append((lease_id, n))
        tokens[model_token] = token

    def read_grants() -> None:
        for lease_id in list(line):
            raw = client.lpop(where.grant_key(lease_id))
            decided = model.decided.pop(lease_id.decode(), None)
            if raw is None:
                assert decided is None
                continue
            line.remove(lease_id)
            token = grant_token(raw)
            if token is None:
                assert decided == "refused"
            else:
                assert isinstance(decided, int)
                seat(lease_id, model_n[lease_id], decided, token)

    model_n: dict[bytes, int] = {}
    for op, value in ops:
        if op in ("try", "ask"):
            lease_id = new_id()
            model_n[lease_id] = value
            ask = Ask(b"acquire", lease_id, value, 600_000, join=op == "ask")
            reply = limiter.call(where, ask)
            try:
                expected = (
                    model.try_acquire(value) if op == "try" else model.ask(lease_id.decode(), value)
                )
            except Refused:
                assert reply.status == -1
                continue
            if expected is None:
                assert reply.status == 0
                if op == "ask":
                    line.append(lease_id)
            else:
                assert reply.status == 1
                seat(lease_id, value, expected, reply.value)
        elif op == "release" and held:
            lease_id, n = held.pop(value % len(held))
            assert limiter.call(where, Ask(b"release", lease_id)).status == 1
            model.release(n)
        elif op == "leave" and line:
            lease_id = line.pop(value % len(line))
            limiter.call(where, Ask(b"leave", lease_id))
            assert model.leave(lease_id.decode()) is None
        elif op == "resize":
            limiter.resize(value)
            model.resize(value)
        read_grants()
        reply = limiter.call(where, Ask(b"look"))
        assert (reply.held, reply.status, reply.limit) == (model.held, len(model.line), model.limit)
    ours = [tokens[t] for t in sorted(tokens)]
    assert ours == sorted(ours) and len(set(ours)) == len(ours)  # in the model's order


def test_a_lease_is_a_context_manager_and_releasing_twice_is_harmless(redis_client: Any) -> None:
    limiter = fresh(redis_client, 2)
    with limiter.acquire() as lease:
        assert limiter.in_flight == 1 and lease.n == 1
    assert limiter.in_flight == 0
    lease.release()
    with limiter:
        assert limiter.in_flight == 1
    assert limiter.in_flight == 0

    @limiter
    def inside() -> int:
        return limiter.in_flight

    assert inside() == 1


def test_a_lease_lost_to_expiry_says_so_and_its_seats_come_back(redis_client: Any) -> None:
    limiter = fresh(redis_client, 1, lease_ttl=0.2)
    lease = limiter.acquire()
    assert lease is not None and limiter.try_acquire() is None
    wait_until(lambda: limiter.in_flight == 0, 5, "the lease to lapse")
    other = limiter.try_acquire()
    assert other is not None and other.token > lease.token
    with pytest.raises(LeaseExpired):
        lease.extend()
    with pytest.raises(LeaseExpired):
        lease.release()
    lease.release()  # the second time: nothing


def test_extend_and_the_heartbeat_keep_a_lease(redis_client: Any) -> None:
    limiter = fresh(redis_client, 1, lease_ttl=0.3)
    lease = limiter.acquire()
    assert lease is not None
    lease.extend(30)
    time.sleep(0.5)
    assert limiter.in_flight == 1
    lease.release()
    beating = fresh(redis_client, 1, lease_ttl=BEAT_TTL, heartbeat=True)
    kept = beating.acquire()
    assert kept is not None
    time.sleep(BEAT_TTL * 1.5)  # longer than a lease lives: only the heartbeat keeps it
    assert beating.in_flight == 1
    kept.release()
    assert beating.in_flight == 0


def _hearts(limiter: RedisConcurrencyLimiter) -> int:
    """The heartbeat threads of ``limiter`` (named after it) running now."""
    name = f"qos-seats-heartbeat {limiter.options.name.decode()}"
    return sum(thread.name == name for thread in threading.enumerate())


def test_one_heartbeat_thread_keeps_every_lease_of_a_limiter_and_ends_with_them(
    redis_client: Any,
) -> None:
    """A lease costs no thread of its own: one thread beats for all of a limiter's leases, a
    lease dropped unreleased is no longer kept (it lapses, as every dropped lease does), and the
    thread ends once none is held."""
    limiter = fresh(redis_client, 10, lease_ttl=BEAT_TTL, heartbeat=True)
    leases = [limiter.try_acquire() for _ in range(5)]
    assert all(leases) and _hearts(limiter) == 1
    dropped = leases.pop()
    assert dropped is not None
    dropped_token = dropped.token
    del dropped
    gc.collect()
    time.sleep(BEAT_TTL * 1.5)  # the heartbeat alone keeps the four
    assert limiter.in_flight == 4, f"the dropped lease {dropped_token} should have lapsed"
    for lease in leases:
        assert lease is not None
        lease.release()  # none had lapsed: no LeaseExpired
    wait_until(lambda: _hearts(limiter) == 0, 5 * BEAT_TTL, "the heartbeat thread to end")
    again = limiter.try_acquire()  # a lease kept after the thread ended starts one again
    assert again is not None
    time.sleep(BEAT_TTL * 1.5)  # kept: its release raises no LeaseExpired
    again.release()


def test_a_heartbeat_outlives_an_unexpected_error_of_the_client(
    redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An extension that fails with an error no one expected (a reply parser that lost its
    place) is logged and tried again at the next beat: the thread goes on for every lease."""
    limiter = fresh(redis_client, 2, lease_ttl=BEAT_TTL, heartbeat=True)
    call = limiter.call
    failed: list[bool] = []

    def call_failing_once(limit: Any, ask: Any) -> Any:
        if ask.op == b"extend" and not failed:
            failed.append(True)
            raise ValueError("the reply parser lost its place")
        return call(limit, ask)

    limiter.call = call_failing_once  # type: ignore[method-assign]
    first = limiter.try_acquire()
    second = limiter.try_acquire()
    assert first is not None and second is not None
    time.sleep(BEAT_TTL * 1.5)  # longer than a lease lives
    assert failed and _hearts(limiter) == 1
    first.release()  # both kept: no LeaseExpired
    second.release()
    assert "a heartbeat failed to extend lease" in caplog.text


def test_a_forked_child_s_own_lease_has_a_heartbeat_of_its_own(redis_client: Any) -> None:
    limiter = fresh(redis_client, 2, lease_ttl=BEAT_TTL, heartbeat=True)
    parent = limiter.try_acquire()  # the parent's thread runs before the fork
    assert parent is not None
    pid = os.fork()
    if pid == 0:  # the child: the parent's limiter (redis-py opens the child's connections)
        code = 1
        try:
            lease = limiter.try_acquire()
            time.sleep(BEAT_TTL * 1.5)  # longer than a lease lives
            if lease is not None:
                lease.release()  # raises LeaseExpired had no heartbeat kept it
                code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent.release()


def test_resize_is_stored_for_every_limiter_of_the_name(redis_client: Any) -> None:
    first = RedisConcurrencyLimiter(redis_client, 2, name="shared")
    second = RedisConcurrencyLimiter(redis_client, 5, name="shared")
    a = first.try_acquire()
    assert second.try_acquire(2) is None and second.limit == 2  # the stored limit wins
    second.resize(1)  # evicts nobody
    assert first.in_flight == 1 and first.try_acquire() is None and first.limit == 1
    assert a is not None
    a.release()


class Counting:
    """A client whose script calls are counted."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.scripts = 0

    def evalsha(self, *args: Any) -> Any:
        self.scripts += 1
        return self._client.evalsha(*args)

    def eval(self, *args: Any) -> Any:
        return self._client.eval(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.parametrize("lapse", [False, True])
def test_a_waiter_is_seated_in_at_most_two_script_calls(redis_client: Any, lapse: bool) -> None:
    name = f"count-{lapse}"
    holder = RedisConcurrencyLimiter(redis_client, 1, name=name, lease_ttl=0.3 if lapse else 30)
    counting = Counting(redis_client)
    waiter = RedisConcurrencyLimiter(counting, 1, name=name)
    held = holder.acquire()
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=20)))
    thread.start()
    wait_until(lambda: holder.waiting == 1, 10, "the waiter in line")
    if not lapse:
        assert held is not None
        held.release()  # the release seats the waiter and wakes it
    thread.join(20)
    assert got and got[0] is not None
    assert counting.scripts == (2 if lapse else 1)  # a lapse is nobody's call: it asks again
    got[0].release()
    assert counting.scripts == (3 if lapse else 2)  # and one call to release


def test_waiters_are_seated_first_come_first_seated(redis_client: Any) -> None:
    limiter = fresh(redis_client, 2)
    first = limiter.acquire(2)
    assert first is not None
    tokens: dict[str, int] = {}

    def wait(label: str, n: int) -> None:
        lease = limiter.acquire(n, timeout=20)
        assert lease is not None
        tokens[label] = lease.token
        lease.release()

    threads = []
    for count, (label, n) in enumerate([("big", 2), ("small", 1), ("last", 1)], start=1):
        threads.append(threading.Thread(target=wait, args=(label, n)))
        threads[-1].start()
        wait_until(lambda count=count: limiter.waiting == count, 10, f"{label} in line")
    first.release()
    for thread in threads:
        thread.join(20)
    assert tokens["big"] < tokens["small"] < tokens["last"]  # nobody overtook the big one


def test_a_waiter_that_times_out_holds_nothing_and_passes_its_turn(redis_client: Any) -> None:
    limiter = fresh(redis_client, 2)
    one = limiter.acquire()
    assert one is not None
    assert limiter.acquire(2, timeout=0.2) is None  # at the head, holding the line back
    assert limiter.waiting == 0
    other = limiter.try_acquire()
    assert other is not None  # nobody in line: seated at once
    assert limiter.in_flight == 2


def test_a_smaller_limit_refuses_a_waiter_that_could_never_be_seated(redis_client: Any) -> None:
    limiter = fresh(redis_client, 3)
    lease = limiter.acquire(3)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            limiter.acquire(3, timeout=20)
        except ValueError as error:
            errors.append(error)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_until(lambda: limiter.waiting == 1, 10, "the waiter in line")
    limiter.resize(2)
    thread.join(20)
    assert errors and "at most the limit" in str(errors[0])
    assert lease is not None and limiter.in_flight == 3  # the holder kept its seats
    lease.release()


def test_a_keyed_limit_per_key_and_forgotten_when_idle(redis_client: Any) -> None:
    limiter = RedisKeyedConcurrencyLimiter(redis_client, 1, name="per-client")
    lease = limiter.acquire("203.0.113.9")
    assert lease is not None
    assert limiter.try_acquire("203.0.113.9") is None
    other = limiter.try_acquire(b"198.51.100.4")
    assert other is not None and limiter.in_flight == 2
    assert limiter.in_flight_of("203.0.113.9") == 1
    lease.release()
    other.release()
    assert limiter.in_flight == 0
    # Nothing held, nothing kept but each release's record, for a minute (a release the
    # client sends again is told it was released).
    kept = redis_client.keys("*")
    assert sorted(kept) == sorted(
        limiter_key.released_key(held.lease_id)
        for limiter_key, held in (
            (Limit.of(limiter.options, "203.0.113.9"), lease),
            (Limit.of(limiter.options, b"198.51.100.4"), other),
        )
    )
    assert all(0 < redis_client.pttl(key) <= 60_000 for key in kept)


def test_acquire_async_of_the_sync_form_is_cancel_safe(redis_client: Any) -> None:
    import asyncio

    limiter = fresh(redis_client, 1)
    held = limiter.acquire()

    async def main() -> None:
        task = asyncio.ensure_future(limiter.acquire_async(timeout=30))
        for _ in range(200):
            await asyncio.sleep(0.02)
            if await asyncio.to_thread(lambda: limiter.waiting) == 1:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        lease = await limiter.acquire_async(timeout=0.1)
        assert lease is None

    asyncio.run(main())
    wait_until(lambda: limiter.waiting == 0, 10, "the cancelled waiter to leave")
    assert held is not None
    held.release()
    assert limiter.in_flight == 0


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"limit": 0}, ValueError, "limit must be between 1"),
        ({"limit": 1.5}, TypeError, "limit must be an int"),
        ({"lease_ttl": 0}, ValueError, "lease_ttl must be between"),
        ({"lease_ttl": "1"}, TypeError, "lease_ttl must be a number"),
        ({"heartbeat": 1}, TypeError, "heartbeat must be True or False"),
        ({"prefix": "a{"}, ValueError, "prefix must not contain"),
        ({"name": ""}, ValueError, "name must not be empty"),
    ],
)
def test_bad_options_are_named(
    redis_client: Any, options: dict[str, Any], error: type, words: str
) -> None:
    arguments: dict[str, Any] = {"limit": 1, "name": "bad"} | options
    with pytest.raises(error, match=words):
        RedisConcurrencyLimiter(redis_client, **arguments)


def test_bad_calls_are_named(redis_client: Any) -> None:
    limiter = fresh(redis_client, 2)
    with pytest.raises(ValueError, match="n must be between 1"):
        limiter.try_acquire(0)
    with pytest.raises(ValueError, match=r"n must be at most the limit \(2\), not 3"):
        limiter.acquire(3)
    with pytest.raises(ValueError, match="timeout must be at least 0"):
        limiter.acquire(1, timeout=-1)
    with pytest.raises(TypeError, match="key must be str or bytes"):
        RedisKeyedConcurrencyLimiter(redis_client, 1, name="k").try_acquire(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client must be a Redis client"):
        RedisConcurrencyLimiter(object(), 1, name="x")
    with pytest.raises(ValueError, match="limit must be between 1"):
        limiter.resize(0)
    import redis.asyncio

    with pytest.raises(TypeError, match="use AsyncRedisConcurrencyLimiter"):
        RedisConcurrencyLimiter(redis.asyncio.Redis(), 1, name="x")
    with pytest.raises(TypeError, match="use RedisKeyedConcurrencyLimiter"):
        AsyncRedisKeyedConcurrencyLimiter(redis_client, 1, name="x")


CHECKED = """
import redis
import redis.asyncio

from protocol_in_code.qos.distributed import (
    AsyncRedisConcurrencyLimiter,
    AsyncRedisKeyedConcurrencyLimiter,
    RedisConcurrencyLimiter,
    RedisKeyedConcurrencyLimiter,
)
from protocol_in_code.qos.interfaces import (
    AsyncInFlightLimiter,
    AsyncKeyedInFlightLimiter,
    InFlightLimiter,
    KeyedInFlightLimiter,
)

client = redis.Redis()
aclient = redis.asyncio.Redis()
one: InFlightLimiter = RedisConcurrencyLimiter(client, 1, name="a")
keyed: KeyedInFlightLimiter[str] = RedisKeyedConcurrencyLimiter(client, 1, name="b")
awaited: AsyncInFlightLimiter = AsyncRedisConcurrencyLimiter(aclient, 1, name="c")
awaited_keyed: AsyncKeyedInFlightLimiter[bytes] = AsyncRedisKeyedConcurrencyLimiter(
    aclient, 1, name="d"
)
a_one = AsyncRedisConcurrencyLimiter(aclient, 1, name="c")
wrong_1: InFlightLimiter = a_one  # type: ignore[assignment]
s_one = RedisConcurrencyLimiter(client, 1, name="a")
wrong_2: AsyncInFlightLimiter = s_one  # type: ignore[assignment]
s_keyed = RedisKeyedConcurrencyLimiter(client, 1, name="b")
wrong_3: InFlightLimiter = s_keyed  # type: ignore[assignment]
"""


def test_mypy_finds_each_redis_in_flight_limiter_of_its_interface(tmp_path: Any) -> None:
    qos_support.mypy_strict(CHECKED, tmp_path)


def test_a_blocking_acquire_is_refused_on_a_thread_running_an_event_loop(redis_client: Any) -> None:
    import asyncio

    limiter = fresh(redis_client, 1)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="would stall this thread's running event loop"):
            limiter.acquire(timeout=1)
        lease = limiter.try_acquire()  # never waits: allowed
        assert lease is not None
        lease.release()

    asyncio.run(main())
