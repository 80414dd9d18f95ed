"""Processes that hold seats of a shared in-flight limit, for ``test_shared_concurrency_processes``.

Run as ``python -m seats_workers <command> <folder> <name> <limit> <n>``: each opens the
``SharedConcurrencyLimiter`` ``name`` in ``folder``, takes ``n`` seats, says ``held <token>``
on its standard output, and then:

* ``hold``: sleeps until killed.
* ``exec``: replaces itself with ``sleep`` (the process lives on, its open table closed).
* ``fork-hold``: forks a child that sleeps and never touches the limiter, says ``child <pid>``,
  and sleeps until killed.

``share_one_limit`` is the body of the four processes that share one limit.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from protocol_in_code.qos import SharedConcurrencyLimiter

WAIT = 60  # seconds: a hang detector, not a speed target


def share_one_limit(
    folder: str, name: str, limit: int, rounds: int, holding: Any, most: Any, lock: Any
) -> None:
    """``rounds`` times: take one or two seats, count the seats held by every process in
    ``holding`` (under ``lock``), note the most ever held in ``most``, and give them back."""
    limiter = SharedConcurrencyLimiter(name, limit, path=folder)
    for round_ in range(rounds):
        n = 1 + round_ % 2
        lease = limiter.acquire(n, timeout=WAIT)
        assert lease is not None, "no seat within the hang detector's time"
        with lock:
            holding.value += n
            most.value = max(most.value, holding.value)
        time.sleep(0.0005)
        with lock:
            holding.value -= n
        lease.release()


def main(command: str, folder: str, name: str, limit: str, n: str) -> None:
    limiter = SharedConcurrencyLimiter(name, int(limit), path=folder)
    lease = limiter.acquire(int(n), timeout=WAIT)
    assert lease is not None
    print(f"held {lease.token}", flush=True)
    if command == "exec":
        os.execv("/bin/sleep", ["sleep", "600"])
    if command == "fork-hold":
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        print(f"child {child}", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main(*sys.argv[1:])
