"""Shared in-flight limits across real processes: several processes on one limit, holders
that are killed, that ``exec``, that fork, and holders in containers.

* **Four processes** take one or two seats at a time of one limit, counting every process's
  holders in a shared counter: the most ever held at once is never over the limit.
* **A holder SIGKILLed** while holding: its seats come back to the others (a waiter blocked
  in ``acquire`` is seated), however long the dead process's id stays in use.
* **A holder that execs** ``sleep``: the process lives on, but its seats come back (its table
  was closed by ``exec``).
* **A holder that forked** a child that sleeps on: killing the holder gives its seats back, the
  child's inherited copy of its table holding nothing.
* **Containers:** holders in a PID namespace of their own, or with an empty ``/proc``, killed:
  their seats come back to a process on the host, which could never have asked about their
  ids.
* **Another user's table** is refused; **two limits of one name** share the file's limit.

Every table is made in ``tmp_path``.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from protocol_in_code.qos import SharedConcurrencyLimiter, SharedKeyedConcurrencyLimiter
from seats_workers import share_one_limit
from test_shared_containers import (
    IN_PID_NAMESPACE,
    NOBODY,
    WITH_EMPTY_PROC,
    Children,
    Lines,
    kill_now,
    leaves,
    require,
)

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="open-file-description locks are Linux's"
)

WAIT = 60  # seconds: a hang detector, not a speed target


@pytest.fixture
def children() -> Iterator[Children]:
    """The processes a test starts, killed (with whatever they started) at teardown."""
    made = Children()
    try:
        yield made
    finally:
        made.kill_all()


def folder_of(tmp_path: Path) -> str:
    tmp_path.chmod(0o700)
    return str(tmp_path)


def comes_back(limiter: SharedConcurrencyLimiter, in_flight: int) -> bool:
    """Whether the seats held come down to ``in_flight`` within the hang detector's time."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if limiter.in_flight == in_flight:
            return True
        time.sleep(0.005)
    return False


def hold(children: Children, prefix: list[str], *args: str) -> Lines:
    """A ``seats_workers`` holder started under ``prefix``, once it says it holds."""
    command = [*prefix, sys.executable, "-m", "seats_workers", *args]
    holder = Lines(children.popen(command, stdout=subprocess.PIPE))
    assert holder.next(WAIT).startswith("held ")
    return holder


def test_four_processes_never_hold_more_than_the_limit(tmp_path: Path) -> None:
    folder, limit = folder_of(tmp_path), 3
    context = multiprocessing.get_context("spawn")
    holding, most = context.Value("q", 0, lock=False), context.Value("q", 0, lock=False)
    lock = context.Lock()
    workers = [
        context.Process(
            target=share_one_limit, args=(folder, "four", limit, 150, holding, most, lock)
        )
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT)
        assert worker.exitcode == 0
    assert most.value <= limit
    assert most.value >= 2, "the processes never held seats together: the run proves little"
    limiter = SharedConcurrencyLimiter("four", limit, path=folder)
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


def test_a_killed_holders_seats_go_to_a_waiter(tmp_path: Path, children: Children) -> None:
    folder = folder_of(tmp_path)
    holder = hold(children, [], "hold", folder, "killed", "3", "2")
    limiter = SharedConcurrencyLimiter("killed", 3, path=folder)
    assert limiter.in_flight == 2
    assert limiter.try_acquire(2) is None
    kill_now(holder.process.pid)
    lease = limiter.acquire(2, timeout=WAIT)  # seated once the dead holder's seats come back
    assert lease is not None and lease.n == 2
    assert limiter.in_flight == 2
    lease.release()
    assert limiter.in_flight == 0


def test_a_holder_that_execs_gives_its_seats_back(tmp_path: Path, children: Children) -> None:
    folder = folder_of(tmp_path)
    holder = hold(children, [], "exec", folder, "execs", "2", "2")
    limiter = SharedConcurrencyLimiter("execs", 2, path=folder)
    assert comes_back(limiter, 0)
    assert holder.process.poll() is None, "the process lives on, running sleep"
    assert Path(f"/proc/{holder.process.pid}/comm").read_text().strip() == "sleep"


def test_a_forked_child_keeps_nothing_of_its_parents_seats(
    tmp_path: Path, children: Children
) -> None:
    folder = folder_of(tmp_path)
    holder = hold(children, [], "fork-hold", folder, "forks", "2", "1")
    child = int(holder.next(WAIT).split()[1])
    limiter = SharedConcurrencyLimiter("forks", 2, path=folder)
    assert limiter.in_flight == 1
    kill_now(holder.process.pid)
    assert comes_back(limiter, 0)
    assert Path(f"/proc/{child}").exists(), "the child lives on"
    kill_now(child)


@pytest.mark.parametrize("where", ["pid-namespace", "empty-proc"])
def test_a_holder_killed_in_a_container_gives_its_seats_back(
    tmp_path: Path, children: Children, where: str
) -> None:
    """The holder is in a PID namespace of its own (its id there is 1 or 2, meaning another
    process or none on the host), or sees an empty ``/proc``."""
    prefix = IN_PID_NAMESPACE if where == "pid-namespace" else WITH_EMPTY_PROC
    require(*prefix, "true")
    folder = folder_of(tmp_path)
    holder = hold(children, prefix, "hold", folder, "contained", "2", "2")
    limiter = SharedConcurrencyLimiter("contained", 2, path=folder)
    assert limiter.in_flight == 2
    for pid in leaves(holder.process.pid) or [holder.process.pid]:
        kill_now(pid)
    assert comes_back(limiter, 0)
    assert limiter.try_acquire(2) is not None


def test_another_users_table_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    folder = folder_of(tmp_path)
    limiter = SharedKeyedConcurrencyLimiter("theirs", 2, max_keys=4, path=folder)
    os.chown(limiter.path, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="owned by uid"):
        SharedKeyedConcurrencyLimiter("theirs", 2, max_keys=4, path=folder)


def test_two_limits_of_one_name_share_the_files_limit(tmp_path: Path) -> None:
    folder = folder_of(tmp_path)
    first = SharedConcurrencyLimiter("one-name", 2, path=folder)
    second = SharedConcurrencyLimiter("one-name", 5, path=folder)
    assert second.limit == 2, "the table's limit, not the one asked for"
    second.resize(4)
    assert first.limit == 4, "a resize is every process's"
    leases = [first.try_acquire(2), second.try_acquire(2)]
    assert all(leases) and first.try_acquire() is None
