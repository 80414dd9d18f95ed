"""``acquire_async`` of the in-flight limits shared by the processes of a host.

A seat given back in one process goes to the head of the line at once, but nothing can wake
a task on another process's event loop. So a task in line looks at its place now and then,
sleeping on its loop between looks (never blocking it), from ``FIRST_PAUSE`` seconds doubling
to ``LONGEST_PAUSE``: seats given to it are noticed that late at most.
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol_in_code._native import SharedLease
from protocol_in_code.qos._conveniences import _give_up, seconds

#: A task's first sleep between looks at its place, in seconds; each sleep after doubles it.
FIRST_PAUSE = 0.000_05

#: A task's longest sleep between looks, in seconds.
LONGEST_PAUSE = 0.002


async def await_shared_lease(limiter: Any, args: tuple[Any, ...], timeout: Any) -> Any:
    """A ``SharedLease`` for ``args`` (``(n,)``, or ``(key, n)``), or None once ``timeout``
    seconds have passed.

    Seated at once if the seats are free and nobody waits; otherwise the task takes a place in
    the limit's one line, which every process's callers stand in, and looks at it between
    sleeps. With no room for a place (every record of the table in use, or a new key in a full
    table), it asks again after each sleep.

    Cancel-safe: a task cancelled (or timed out) while in line leaves the line, letting those
    behind it in, and gives back the seats if it was seated meanwhile.
    """
    left = None if timeout is None else seconds(timeout)
    lease = limiter.try_acquire(*args)
    if lease is not None or left == 0:
        return lease
    loop = asyncio.get_running_loop()
    deadline = None if left is None else loop.time() + left
    pause = FIRST_PAUSE
    waiter = None
    try:
        while True:
            if waiter is None:
                waiter = limiter._ask(*args)
                if isinstance(waiter, SharedLease):
                    return waiter
            if waiter is not None:
                lease = waiter._take()
                if lease is not None:
                    return lease
            now = loop.time()
            if deadline is not None and now >= deadline:
                return None if waiter is None else waiter._leave()
            await asyncio.sleep(pause if deadline is None else min(pause, deadline - now))
            pause = min(pause * 2, LONGEST_PAUSE)
    except BaseException:
        if waiter is not None:
            _give_up(waiter)
        raise
