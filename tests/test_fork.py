"""A fork at any moment leaves the child's limiters working (issue 21).

``os.fork()`` copies only the thread that calls it. A keyed table's ``try_acquire_many`` holds
every shard lock with the interpreter released, so a fork from another thread during a batch
used to copy those locks held, and the child's first call on the table waited for ever (2
forks in 5). The library's fork hooks now wait for such sections before the fork. A meter's
``mark_many`` runs the same way.

A child also has a copy of every limiter it inherited: its first call on one warns once.
"""

from __future__ import annotations

import array
import os
import signal
import sys
import threading
import time
import warnings

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

if not hasattr(os, "fork"):
    pytest.skip("no os.fork on this platform", allow_module_level=True)

from protocol_in_code.qos import (
    ConcurrencyLimiter,
    KeyedConcurrencyLimiter,
    KeyedRateLimiter,
    RateLimiter,
    TwoRateMeter,
)

#: A child that has not finished by then is taken to hang (a hang detector, not a speed target).
HANG_SECONDS = 10


def wait_for_child(pid: int) -> int | None:
    """The child's exit status, or None if it is still running after HANG_SECONDS (then it is
    killed)."""
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def in_child(work: object) -> int:
    """Fork; run ``work()`` in the child, which exits 0 if it returned, 1 if it raised."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            signal.alarm(HANG_SECONDS * 2)  # never outlive the test, whatever happens
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                work()  # type: ignore[operator]
            code = 0
        finally:
            sys.stdout.flush()
            os._exit(code)
    status = wait_for_child(pid)
    assert status is not None, "the child hung"
    return status


def test_a_fork_during_running_batches_leaves_the_child_deciding() -> None:
    limiter = KeyedRateLimiter(1000, burst=10, max_keys=1_000_000)
    meter = TwoRateMeter(cir=125_000, cbs=12_000, pir=250_000, pbs=24_000, start_ns=0)
    keys = array.array("q", range(100_000))
    times = array.array("q", [10**9] * len(keys))
    sizes = array.array("q", [1500] * len(keys))
    stop = threading.Event()
    batches = {"keyed": 0, "meter": 0}

    def keyed_batches() -> None:
        while not stop.is_set():
            limiter.try_acquire_many(keys, times)
            batches["keyed"] += 1

    def meter_batches() -> None:
        while not stop.is_set():
            meter.mark_many(sizes, times)
            batches["meter"] += 1

    def child() -> None:
        assert limiter.try_acquire(-1, now_ns=10**9)
        assert len(limiter.try_acquire_many([1, 2], [10**9, 10**9])) == 2
        meter.mark(1500, now_ns=10**9)
        assert len(meter.mark_many([1500], [10**9])) == 1

    threads = [threading.Thread(target=f, daemon=True) for f in (keyed_batches, meter_batches)]
    with qos_support.watchdog(120):
        for thread in threads:
            thread.start()
        try:
            statuses = []
            for _ in range(20):
                time.sleep(0.01)  # somewhere inside a batch
                statuses.append(in_child(child))
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
    assert statuses == [0] * 20
    assert batches["keyed"] > 0 and batches["meter"] > 0, "the batches ran meanwhile"


def test_an_inherited_limiter_warns_once_in_the_child() -> None:
    inherited = {"RateLimiter": RateLimiter(10), "KeyedRateLimiter": KeyedRateLimiter(10)}

    def child() -> None:
        for name, limiter in inherited.items():
            args = () if name == "RateLimiter" else ("k",)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                limiter.try_acquire(*args)
                limiter.try_acquire(*args)
            assert len(caught) == 1, [str(w.message) for w in caught]
            assert caught[0].category is RuntimeWarning
            assert f"this {name} was made before os.fork()" in str(caught[0].message)
            # It names the limiters that do share one limit between the processes of a host.
            assert "protocol_in_code.qos.shared" in str(caught[0].message)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            RateLimiter(10).try_acquire()  # made in the child: its own
            KeyedRateLimiter(10).try_acquire("k")

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, limiter in inherited.items():  # the parent's own: no warning
            assert limiter.try_acquire() if name == "RateLimiter" else limiter.try_acquire("k")
    assert in_child(child) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert inherited["RateLimiter"].try_acquire(), "still no warning in the parent"


def test_an_inherited_in_flight_limiter_warns_and_starts_with_no_seat_held() -> None:
    """A child does not see the seats the parent's holders hold (they are not there to give
    them back), and a lease taken before the fork gives nothing back in the child: its count
    is only ever of its own leases. The parent's count is untouched by the child."""
    one, keyed = ConcurrencyLimiter(2), KeyedConcurrencyLimiter(1)
    parents, parents_key = one.try_acquire(), keyed.try_acquire("k")
    assert parents is not None and parents_key is not None

    def child() -> None:
        for name, limiter, args in (
            ("ConcurrencyLimiter", one, ()),
            ("KeyedConcurrencyLimiter", keyed, ("k",)),
        ):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert limiter.in_flight == 0, "the parent's seats are not the child's"
                own = limiter.try_acquire(*args, limiter.limit)  # every seat: none is held here
                assert own is not None
                assert limiter.try_acquire(*args) is None
            assert len(caught) == 1, [str(w.message) for w in caught]
            message = str(caught[0].message)
            assert caught[0].category is RuntimeWarning
            assert f"this {name} was made before os.fork()" in message
            assert "Seats held in the parent are not seen here" in message
            assert "SharedConcurrencyLimiter" in message
            (parents if name == "ConcurrencyLimiter" else parents_key).release()
            assert limiter.in_flight == limiter.limit, "a lease of the parent gave back nothing"
            own.release()
            assert limiter.in_flight == 0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ConcurrencyLimiter(1).try_acquire() is not None  # made in the child: its own

    assert in_child(child) == 0
    assert (one.in_flight, keyed.in_flight) == (1, 1), "the child changed nothing here"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the parent's own: no warning
        parents.release()
        parents_key.release()
        assert one.try_acquire(2) is not None
    assert (one.in_flight, keyed.in_flight) == (0, 0)


def test_an_inherited_shared_limiter_does_not_warn_and_shares_its_limit(tmp_path) -> None:
    from protocol_in_code.qos.shared import SharedKeyedRateLimiter, SharedRateLimiter

    now = 10**12
    one = SharedRateLimiter("fork-one", 1, burst=3, per=3600, path=tmp_path)
    keyed = SharedKeyedRateLimiter("fork-keyed", 1, burst=3, per=3600, max_keys=8, path=tmp_path)
    assert one.try_acquire(now_ns=now) and keyed.try_acquire("k", now_ns=now)

    def child() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the state is shared: nothing to warn of
            assert [one.try_acquire(now_ns=now) for _ in range(3)] == [True, True, False]
            assert [keyed.try_acquire("k", now_ns=now) for _ in range(3)] == [True, True, False]

    assert in_child(child) == 0
    # The child's takes are the parent's too: one limit.
    assert not one.try_acquire(now_ns=now) and not keyed.try_acquire("k", now_ns=now)
