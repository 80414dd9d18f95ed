"""Sending a call again: while the client's pool is full, and after a fault of the client's own.

A full pool on a healthy server is this process's own load, so a call waits for a connection
(:class:`Retries`), and asyncio callers wait in line (:class:`PoolQueue`) rather than each
trying again after every pause. A call whose client failed in its own code is sent again, with
the same record, a few times (see ``_client.ClientErrors``).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import time
from typing import TYPE_CHECKING, Any

from protocol_in_code.qos.distributed._client import PoolExhausted

if TYPE_CHECKING:
    from protocol_in_code.qos.distributed._server import Server

#: A call that finds every connection of the client's pool in use waits for one, looking again
#: after 0.1 ms, then twice as long each time up to 10 ms. A full pool on a healthy server is
#: this process's own load, not an unreachable server: answering it with ``on_error`` admitted
#: without limit under ``"allow"`` and refused what the limit allowed under ``"deny"``. A
#: connection frees as soon as a call using it returns, each within the client's socket timeout.
POOL_WAIT_FIRST = 0.0001
POOL_WAIT_MOST = 0.01
#: The longest a call waits for a connection in all, when the client has no socket timeout to
#: bound it: a pool held for good (by this very thread's pub/sub, say) must not hang a call.
POOL_WAIT_LIMIT = 5.0

#: How many times in all a call is sent when the client fails in its own code (see
#: :attr:`ClientErrors.faults`), and the pause before each sending again.
FAULT_SENDS = 3
FAULT_PAUSE = 0.001


class Retries:
    """One call's sendings again: while the client's pool is full (waited for, up to the
    client's socket timeout, or :data:`POOL_WAIT_LIMIT` without one, after the pool first said
    so; a blocking pool's own wait comes first), and after a fault of the client's own (at most
    :data:`FAULT_SENDS` sendings in all). Each method answers how long to pause before sending
    again, or raises the error the call ends with."""

    __slots__ = ("deadline", "faults", "pause", "server")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.deadline: float | None = None
        self.pause = POOL_WAIT_FIRST
        self.faults = 0

    def unavailable(self, error: BaseException) -> float:
        """The pause after ``error`` (one of the client's errors): raised again unless it says
        the pool is full; :class:`PoolExhausted` once the pool stayed full too long."""
        server = self.server
        if not server.errors.pool_full(error):
            raise error
        return self.full(error)

    def full(self, error: BaseException) -> float:
        """:meth:`unavailable` for an ``error`` known to say the pool is full."""
        server = self.server
        now = time.monotonic()
        if self.deadline is None:
            self.deadline = now + server.pool_wait_limit
        elif now >= self.deadline:
            raise PoolExhausted(
                f"the client's connection pool stayed full for {server.pool_wait_limit:.1f} s: "
                f"every connection is in use, and none came back (raise max_connections, or "
                f"look for connections held by pub/sub or unfinished pipelines)"
            ) from error
        pause = self.pause
        self.pause = min(2 * pause, POOL_WAIT_MOST)
        return pause

    def fault(self, error: BaseException) -> float:
        """The pause after a fault of the client's own code; a :class:`LimiterUnavailable`
        once the call was sent :data:`FAULT_SENDS` times."""
        self.faults += 1
        if self.faults >= FAULT_SENDS:
            raise self.server.errors.fault(error, self.faults)
        return FAULT_PAUSE


class PoolQueue:
    """The asyncio calls of one client waiting for a connection of its full pool.

    A waiter that looked again after every pause would cost a failed try per waiter per pause:
    1,600 tasks on a pool of 2 spent the event loop on failed tries, and most of them ended
    with :class:`PoolExhausted`. So only the first in line looks again after its pause; the
    others sleep until a call of this client ends (a connection is likely free then: the first
    in line is woken, see :meth:`wake`) or until their deadline. A waiter whose try failed
    again goes back to the front."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def wake(self) -> None:
        """Wake the first in line, if any: a call of this client ended, or gave up waiting."""
        waiting = self.waiting
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)
                return

    async def wait(self, pause: float, deadline: float, again: bool) -> None:
        """Sleep until woken, or for ``pause`` if first in line, or else until ``deadline``
        (on the monotonic clock). ``again``: this caller was woken before, and goes first."""
        waiting = self.waiting
        while waiting and waiting[0].done():
            waiting.popleft()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        if again or not waiting:
            waiting.appendleft(waiter)
            sleep = pause
        else:
            waiting.append(waiter)
            sleep = max(deadline - time.monotonic(), 0.0)
        timer = loop.call_later(sleep, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


#: Whether a connection pool's ``get_connection`` needs a command's name (redis-py before 5.3,
#: and valkey-py; later redis-py warns when given one), by the pool's class.
_NAMED: dict[type, bool] = {}


def get_connection(pool: Any) -> Any:
    named = _NAMED.get(type(pool))
    if named is None:
        try:
            parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
        except (TypeError, ValueError):
            parameter = None
        named = parameter is not None and parameter.default is inspect.Parameter.empty
        _NAMED[type(pool)] = named
    return pool.get_connection("EVALSHA") if named else pool.get_connection()
