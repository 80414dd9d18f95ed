"""Timeouts on a stopped server: what one caller's wait costs everyone else (issue 33).

* **A stopped server holds only its own waits.** Blocking ``acquire(timeout=)`` used to ask
  through one process-wide pool of a few threads: with its threads stuck on a stopped server,
  ``acquire(timeout=1.0)`` on a healthy server holding 100 tokens answered False. The asyncio
  forms on a synchronous client used the event loop's default executor, so the application's
  own ``asyncio.to_thread`` waited behind them (35 s in the issue).
* **Ctrl-C during a blocking reservation gives the turn back** once the server answers: a
  process interrupted while its reservation was in flight used to leave the key empty (0 of a
  burst of 1, refilling in an hour).
* **A batch waits one timeout, not one per 1,000 keys.** 5,000 keys against a stopped server
  used to send their five script calls in turn, a timeout each, and all five ran when the
  server resumed; now the first failure sends the others to ``on_error`` unsent.

Each server is stopped with SIGSTOP, so that the calls sent to it stay in its socket buffers,
unread, until it resumes. No test asserts a duration: each asserts what was sent, what ran, or
what a call answered; the bounds on waits only catch a hang.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import qos_support
import redis_servers
from protocol_in_code.qos.distributed import (
    RedisKeyedRateLimiter,
    RedisRateLimiter,
    check_together_async,
)

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

#: Callers stuck on the stopped server: more than any process-wide pool's threads (Python's
#: ThreadPoolExecutor and the event loop's default executor have at most 32).
STUCK = 40

#: Longer than any of these tests leaves a server stopped: the stuck calls stay stuck.
LONG_SOCKET_TIMEOUT = 30

#: Bounds that only catch a hang.
HANG = 20.0


def count_sends(client: Any) -> list[int]:
    """A list that grows by one each time ``client`` is asked an ``EVALSHA`` (the limiters'
    every script call), whichever thread asks."""
    sends: list[int] = []
    evalsha = client.evalsha

    def counted(*args: Any, **kwargs: Any) -> Any:
        sends.append(1)
        return evalsha(*args, **kwargs)

    client.evalsha = counted
    return sends


def until_still(sends: list[int]) -> int:
    """Wait until no more calls join ``sends`` (none for 0.2 s, at least one in all), and
    say how many there are: the callers stuck on a stopped server have all sent theirs, or
    are queued behind those."""
    seen, still_since = -1, time.monotonic()
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        if len(sends) != seen:
            seen, still_since = len(sends), time.monotonic()
        elif seen and time.monotonic() - still_since >= 0.2:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"calls kept coming, or none came: {len(sends)}")


def test_a_stopped_server_never_delays_a_blocking_wait_on_another(
    own_redis_server: Any, redis_server: Any
) -> None:
    """40 blocking ``acquire(timeout=)`` stuck on a stopped server; ``acquire(timeout=1.0)`` on
    a healthy server that holds its tokens is admitted (it used to queue behind them, and
    answer False at its deadline)."""
    stopped = own_redis_server.client(socket_timeout=LONG_SOCKET_TIMEOUT)
    healthy = redis_server.client(socket_timeout=LONG_SOCKET_TIMEOUT)
    stuck = RedisKeyedRateLimiter(stopped, 1, name="stuck", burst=100, per=3600)
    free = RedisRateLimiter(healthy, 1, name="free", burst=100, per=3600)
    healthy.delete(free.redis_key)
    assert stuck.acquire("warm", timeout=1) and free.acquire(timeout=1)  # connected, loaded
    sends = count_sends(stopped)
    callers = [
        threading.Thread(target=stuck.acquire, args=(f"k{i}",), kwargs={"timeout": HANG})
        for i in range(STUCK)
    ]
    own_redis_server.pause()
    try:
        for caller in callers:
            caller.start()
        assert until_still(sends) >= 1
        admitted = free.acquire(timeout=1.0)
    finally:
        own_redis_server.resume()
        for caller in callers:
            caller.join(HANG)
    assert admitted is True
    assert free.available() == 98


def test_a_stopped_cluster_node_never_delays_a_blocking_wait_on_another_node(
    redis_cluster: Any,
) -> None:
    """One client of a three-master cluster: 40 blocking waits stuck on a stopped master, and
    ``acquire(timeout=1.0)`` on a key of another master is admitted. Each node of a client has
    its own threads, so the node that answers never queues behind the one that does not."""
    from redis.cluster import RedisCluster

    client = RedisCluster(
        host=redis_servers.HOST,
        port=redis_cluster.nodes[0].port,
        socket_timeout=LONG_SOCKET_TIMEOUT,
    )
    limiter = RedisKeyedRateLimiter(client, 1, name="nodes", burst=100, per=3600)
    victim = redis_cluster.nodes[1]

    def port_of(key: str) -> int:
        return int(client.get_node_from_key(limiter.redis_key(key)).port)

    keys = [f"n{i}" for i in range(200)]
    on_victim = [key for key in keys if port_of(key) == victim.port][:STUCK]
    elsewhere = next(key for key in keys if port_of(key) != victim.port)
    assert len(on_victim) == STUCK
    client.delete(*(limiter.redis_key(key) for key in [*on_victim, elsewhere]))
    assert limiter.acquire(on_victim[0], timeout=1) and limiter.acquire(elsewhere, timeout=1)
    sends = count_sends(client)
    callers = [
        threading.Thread(target=limiter.acquire, args=(key,), kwargs={"timeout": HANG})
        for key in on_victim
    ]
    victim.pause()
    try:
        for caller in callers:
            caller.start()
        assert until_still(sends) >= 1
        admitted = limiter.acquire(elsewhere, timeout=1.0)
    finally:
        victim.resume()
        for caller in callers:
            caller.join(HANG)
    assert admitted is True
    assert limiter.available(elsewhere) == 98
    client.close()


@pytest.mark.parametrize("form", ["acquire_async", "check_together_async"])
def test_a_stopped_server_never_delays_the_applications_own_threads(
    own_redis_server: Any, form: str
) -> None:
    """40 awaited calls of a synchronous client stuck on a stopped server: the application's own
    ``asyncio.to_thread`` still runs while the server is stopped (the calls used to fill the
    event loop's default executor, and it waited for the client's socket timeouts)."""
    stopped = own_redis_server.client(socket_timeout=LONG_SOCKET_TIMEOUT)
    limiter = RedisKeyedRateLimiter(stopped, 1, name="stuck", burst=100, per=3600)
    assert limiter.acquire("warm")  # connected, and the script loaded
    sends = count_sends(stopped)

    def call(i: int) -> Any:
        if form == "acquire_async":
            return limiter.acquire_async(f"k{i}")
        return check_together_async([(limiter, f"k{i}", 1, None)])

    async def main() -> bool:
        watcher = concurrent.futures.ThreadPoolExecutor(1)  # not the loop's, which may be full
        own_redis_server.pause()
        resumed = False
        try:
            calls = [asyncio.ensure_future(call(i)) for i in range(STUCK)]
            await asyncio.wrap_future(watcher.submit(until_still, sends))
            app = asyncio.ensure_future(asyncio.to_thread(lambda: not resumed))
            await asyncio.wait({app}, timeout=HANG)
        finally:
            resumed = True
            own_redis_server.resume()
            watcher.shutdown()
        ran_while_stopped = await app
        await asyncio.wait_for(asyncio.gather(*calls), HANG)
        return ran_while_stopped

    with qos_support.watchdog(120):
        assert asyncio.run(main()) is True, "the application's thread waited for the server"
    assert limiter.available("k0") == 99


def test_a_call_still_queued_when_its_caller_stops_waiting_is_never_sent() -> None:
    """A node's threads all busy: a call queued behind them whose caller stops waiting is
    withdrawn, never run later; one already running when its caller stops waiting has its
    result given back once it comes."""
    from protocol_in_code.qos.distributed import _waits

    where = _waits.Workers("test", most=1)
    release = threading.Event()
    busy = where.submit(lambda: release.wait(HANG))
    ran: list[int] = []
    given_back: list[Any] = []
    assert _waits.asked(where, lambda: ran.append(1), 0.05, given_back.append) is _waits.NO_REPLY
    release.set()
    assert busy.result(HANG) is True
    where.submit(lambda: None).result(HANG)  # the calls queued before it have run, or not
    assert ran == [] and given_back == []

    release.clear()

    def answered_late() -> str:
        release.wait(HANG)
        return "reply"

    assert _waits.asked(where, answered_late, 0.05, given_back.append) is _waits.NO_REPLY
    release.set()
    redis_servers.wait_until(lambda: given_back == ["reply"], HANG, "the late reply given back")


def test_ctrl_c_while_the_thread_that_runs_the_call_starts_still_gives_the_reply_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node's first call starts the thread that runs it, and ``Thread.start`` waits for that
    thread: a Ctrl-C landing in that wait, after the call was queued and perhaps sent, still
    has its reply given back once it comes (it was lost: a reservation kept for an hour)."""
    from protocol_in_code.qos.distributed import _waits

    started = threading.Thread.start

    def start_then_ctrl_c(thread: threading.Thread) -> None:
        started(thread)
        raise KeyboardInterrupt  # as a signal handler raises it in the starting thread's wait

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    where = _waits.Workers("test", most=1)
    release = threading.Event()
    given_back: list[Any] = []

    def answered_late() -> str:
        release.wait(HANG)
        return "reply"

    with pytest.raises(KeyboardInterrupt):
        _waits.asked(where, answered_late, None, given_back.append)
    monkeypatch.undo()
    release.set()
    redis_servers.wait_until(lambda: given_back == ["reply"], HANG, "the reply given back")


#: A process that waits on the main thread (so on the server's threads), then forks, as a
#: pre-forking server does, and waits again in the child.
FORKED = """
import os
import sys

import redis
from protocol_in_code.qos.distributed import RedisRateLimiter

client = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=30)
limiter = RedisRateLimiter(client, 1, name="forked", burst=10, per=3600)
assert limiter.acquire()
child = os.fork()
if child == 0:
    os._exit(0 if limiter.acquire(timeout=5) else 1)
_, status = os.waitpid(child, 0)
print(os.waitstatus_to_exitcode(status), limiter.available(), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_waits_on_threads_of_its_own(own_redis_server: Any) -> None:
    """The parent's threads do not exist in a forked child: the child's waits get threads of
    their own (counting the parent's, it would queue its calls behind nobody, and answer False
    at its deadline)."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED, str(own_redis_server.port)],
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert done.stdout.split() == ["0", "8"], done.stderr


# -- Ctrl-C during a blocking reservation ---------------------------------------------------

#: The interrupted process: a limiter with a burst of 1 refilling in an hour, full; on "go", a
#: blocking ``acquire`` on the main thread, where SIGINT lands.
CHILD = """
import sys

import redis
from protocol_in_code.qos.distributed import RedisRateLimiter

port, timeout = int(sys.argv[1]), None if sys.argv[2] == "none" else float(sys.argv[2])
client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
limiter = RedisRateLimiter(client, 1, name="hourly", burst=1, per=3600)
assert limiter.available() == 1
print("ready", flush=True)
sys.stdin.readline()
try:
    limiter.acquire(timeout=timeout)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
print("acquired", flush=True)
"""


def unread_bytes(port: int) -> int:
    """Bytes that clients sent to the server listening on ``port`` and it has not read: the
    receive queues of its established connections (``/proc/net/tcp``)."""
    total = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        if local_port == port and fields[3] == "01":  # ESTABLISHED
            total += int(fields[4].split(":")[1], 16)
    return total


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net/tcp (Linux)")
@pytest.mark.parametrize("timeout", ["none", "20"], ids=["acquire()", "acquire(timeout=20)"])
def test_ctrl_c_during_a_blocking_reservation_gives_the_turn_back(
    own_redis_server: Any, timeout: str
) -> None:
    """SIGINT to a process whose blocking ``acquire`` has sent its reservation to a stopped
    server: the process stops with KeyboardInterrupt, and once the server resumes and answers,
    the reservation is given back: the key is full again (it used to stay empty, for an
    hour)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(own_redis_server.port), timeout],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        own_redis_server.pause()
        try:
            child.stdin.write("go\n")
            child.stdin.flush()
            redis_servers.wait_until(
                lambda: unread_bytes(own_redis_server.port) > 0,
                HANG,
                "the reservation reaches the stopped server",
            )
            child.send_signal(signal.SIGINT)
            said = child.stdout.readline().strip()
        finally:
            own_redis_server.resume()
        assert said == "interrupted"
        child.wait(HANG)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(HANG)
    assert child.returncode != 0  # it stopped, with the KeyboardInterrupt
    client = own_redis_server.client()
    limiter = RedisRateLimiter(client, 1, name="hourly", burst=1, per=3600)
    assert limiter.available() == 1, "the interrupted reservation was not given back"
    client.close()


# -- A batch against a stopped server ---------------------------------------------------------

KEYS = 5000  # five script calls of 1,000 keys


def quick_client(server: Any, kind: str) -> Any:
    """A client of ``server`` with a 0.3 s socket timeout and no retries, that sends a command
    first thing on a new connection (no ``HELLO`` or ``CLIENT SETINFO`` before it, which a
    stopped server would leave unanswered, so the command itself would never be sent)."""
    options: dict[str, Any] = dict(
        host=redis_servers.HOST,
        port=server.port,
        socket_timeout=0.3,
        socket_connect_timeout=0.3,
        lib_name=None,
        lib_version=None,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # lib_name, in redis-py 8
        if kind == "valkey-py":
            import valkey
            from valkey.backoff import NoBackoff as ValkeyNoBackoff
            from valkey.retry import Retry as ValkeyRetry

            return valkey.Valkey(retry=ValkeyRetry(ValkeyNoBackoff(), 0), **options)
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if kind == "redis-py asyncio":
            import redis.asyncio

            return redis.asyncio.Redis(retry=Retry(NoBackoff(), 0), protocol=2, **options)
        import redis

        return redis.Redis(retry=Retry(NoBackoff(), 0), protocol=2, **options)


def after_resume(server: Any) -> tuple[int, int]:
    """Once the resumed server has read every connection its stopped self was sent (each
    closed by its client after its timeout): how many script calls it ran, and how many keys
    they wrote."""
    checker = server.client()
    redis_servers.wait_until(
        lambda: checker.info("clients")["connected_clients"] == 1,
        HANG,
        "the server has read what it was sent while stopped",
    )
    ran = checker.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    keys = len(checker.keys("*{k*}:*:batch"))  # the limit's keys, not the calls' records
    checker.close()
    return ran, keys


@pytest.mark.parametrize("kind", ["redis-py", "redis-py asyncio", "valkey-py"])
def test_a_batch_against_a_stopped_server_sends_one_call(own_redis_server: Any, kind: str) -> None:
    """5,000 keys against a stopped server: one script call is sent and times out, the other
    four get the ``on_error`` answer unsent, and once the server resumes only the one sent runs
    (1,000 keys written). Five calls used to be sent, one timeout each, and all five ran."""
    client = quick_client(own_redis_server, kind)
    limiter = RedisKeyedRateLimiter(client, 1, name="batch", burst=5, per=3600, on_error="deny")
    keys = [f"k{i}" for i in range(KEYS)]

    async def batch() -> list[bool]:
        answers: list[bool] = await limiter.try_acquire_many(keys)  # type: ignore[misc]
        return answers

    ask: Callable[[], list[bool]]
    if kind == "redis-py asyncio":
        loop = asyncio.new_event_loop()
        ask = lambda: loop.run_until_complete(batch())  # noqa: E731
    else:
        ask = lambda: limiter.try_acquire_many(keys)  # noqa: E731
    try:
        assert ask() == [True] * KEYS  # connected, and the script loaded
        admin = own_redis_server.client()
        admin.flushall()
        admin.config_resetstat()
        admin.close()
        sends = count_sends(client)
        own_redis_server.pause()
        try:
            with qos_support.watchdog(120):
                answers = ask()
        finally:
            own_redis_server.resume()
        assert answers == [False] * KEYS  # on_error="deny"
        assert len(sends) == 1, f"{len(sends)} script calls sent to a stopped server"
        assert after_resume(own_redis_server) == (1, 1000)
    finally:
        if kind == "redis-py asyncio":
            loop.run_until_complete(client.aclose())
            loop.close()
        else:
            client.close()
