"""``acquire``: a reservation of the caller's turn on the server, then a sleep until it.

One script call per admission: the script books the tokens at the moment they will be there,
and the native limiters' own waiting loops sleep until then (blocking, or awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from protocol_in_code._native import LimitOutcome, _wait_for_turn
from protocol_in_code.qos import _conveniences
from protocol_in_code.qos._give_backs import in_background as _in_background
from protocol_in_code.qos.distributed import _waits
from protocol_in_code.qos.distributed._core import Core
from protocol_in_code.qos.distributed._net_zero import net_zero, not_given_back
from protocol_in_code.qos.distributed._replies import Reserved, never, reservation
from protocol_in_code.qos.distributed._server import Server


class Waiter:
    """One ``acquire``'s reservations on the server, as the one deadline loop asks for them.

    The blocking forms wait in the native limiters' own loop (``wait_for_turn`` in
    ``src/python/waiting.rs``, through ``_wait_for_turn``) and the asyncio forms in theirs
    (:func:`_conveniences.await_turn`): each reserves (here, a script call), sleeps until the
    turn, and gives it back if it stops waiting. This holds what those loops need of a Redis
    reservation: the turn read from the script's reply, as ``at_ns`` on the local monotonic
    clock (:meth:`turn`, :meth:`until`); the ``on_error`` answer in its place when the server
    cannot answer (:meth:`fallen_back`); and the one reservation the loop sleeps on, to give back
    (:meth:`give_back`). ``late`` gives back a reservation whose turn came too late, and
    ``stopped`` one the caller stopped waiting for (interrupted, or cancelled).
    """

    def __init__(
        self,
        n: Any,
        fall_back: Callable[[BaseException], Any],
        late: Callable[[Reserved], object],
        stopped: Callable[[Reserved], object],
    ) -> None:
        self.n, self.fall_back, self.late, self.stopped = n, fall_back, late, stopped
        #: The reservation the loop sleeps on (None before one, or after an ``on_error`` answer).
        self.reserved: Reserved | None = None

    def turn(self, reply: Any, asked_ns: int, left: float | None) -> _conveniences.Turn:
        """The turn in the script's reply to a reservation asked at ``asked_ns`` with ``left``
        seconds to spare: None if it took nothing, or if the server ran it so late (it was
        slow, or stopped) that the turn comes more than :data:`ASK_GRACE` after the deadline;
        such a reservation goes to ``late``, so that the call keeps its deadline."""
        reserved = reservation(reply, self.n)
        if reserved is None:
            return None
        at_ns = time.monotonic_ns() + reserved.wait_us * 1000
        if left is not None and at_ns > asked_ns + (left + ASK_GRACE) * 1e9:
            self.late(reserved)
            return None
        self.reserved = reserved
        return True, at_ns

    def fallen_back(self, error: BaseException) -> _conveniences.Turn:
        """The ``on_error`` answer (asked as ``check``) as a turn: ALLOWED is a turn now, a
        DENIED a refusal to sleep on before asking again, NEVER a ValueError."""
        answer = self.fall_back(error)
        self.reserved = None
        if answer.outcome is LimitOutcome.ALLOWED:
            return True, time.monotonic_ns()
        if answer.wait_ns is None:
            raise never(self.n)
        return False, answer.wait_ns

    @staticmethod
    def until(at_ns: int) -> int:
        """Nanoseconds from now until the turn ``at_ns`` (0 once it is there)."""
        return max(at_ns - time.monotonic_ns(), 0)

    def give_back(self, _at_ns: int) -> None:
        """Give back the reservation the loop slept on: its caller stopped waiting."""
        if self.reserved is not None:
            self.stopped(self.reserved)


def blocking_acquire(
    core: Core,
    keys: list[bytes],
    n: Any,
    timeout: Any,
    limiter: str,
    fall_back: Callable[[BaseException], Any],
) -> bool:
    """Reserve ``n`` tokens on the server, then sleep until they are there (True); False at once
    if they would only be there after ``timeout`` seconds, as in-process. Refused on a thread
    running an event loop, as the in-process limiters refuse it: the wait is theirs, the native
    loop (see :class:`Waiter`).

    One script call per admission: the script books the tokens at the moment they will be there
    and moves the key's settlement point to it, so later callers queue behind (see
    ``settle.lua``). A waiter that stops waiting (interrupted, or past its deadline) gives its
    reservation back, which the script undoes only if nobody queued behind it.

    With a ``timeout``, the reservation is asked on the server's own threads (see ``_waits``)
    and waited for at most what is left of it (plus :data:`ASK_GRACE`), so the call returns by
    its deadline whatever the client's socket timeout; a reservation answered later is given
    back. A client with no socket timeout would leave such a question blocked for ever on a
    stopped server: ``timeout=`` is refused there. On the main thread, the reservation is asked
    there too, so that Ctrl-C (``KeyboardInterrupt``, or any exception raised meanwhile) ends
    the wait and the reservation is given back once the server answers. When the server cannot
    answer, ``fall_back`` (the ``on_error`` policy, asked as ``check``) answers instead, and a
    DENIED from it is slept on and asked again.
    """
    server = core.server
    where = _waits.of(server, keys[0])

    def late(reserved: Reserved) -> None:
        try:
            where.submit(functools.partial(_give_back, core, keys, n, reserved))
        except RuntimeError:  # the interpreter is shutting down: no new threads
            _give_back(core, keys, n, reserved)

    stopped = functools.partial(_give_back, core, keys, n)
    waiter = Waiter(n, fall_back, late=late, stopped=stopped)

    def reserve(left: float | None) -> _conveniences.Turn:
        if left is not None and server.socket_timeout is None:
            raise ValueError(
                f"{limiter}.acquire(timeout={timeout!r}) cannot return by its deadline on a "
                f"client with no socket_timeout: a stopped server would keep its question for "
                f"ever. Give the client socket_timeout (redis.Redis(..., socket_timeout=0.2, "
                f"socket_connect_timeout=0.2)), or use acquire_async"
            )
        asked_ns = time.monotonic_ns()
        args = core.reserve_args(n, left)
        try:
            if left is None and threading.current_thread() is not threading.main_thread():
                reply = server.run(keys, args)  # no deadline, and no signal lands here
            else:
                reply = _waits.asked(
                    where,
                    functools.partial(server.run, keys, args),
                    None if left is None else left + ASK_GRACE,
                    functools.partial(_give_back_reply, core, keys, n),
                )
        except server.unavailable as error:
            return waiter.fallen_back(error)
        return None if reply is _waits.NO_REPLY else waiter.turn(reply, asked_ns, left)

    return _wait_for_turn(limiter, timeout, reserve, waiter.until, waiter.give_back)


def _give_back_reply(core: Core, keys: list[bytes], n: Any, reply: Any) -> None:
    """Give back what the reply to a reservation says it took, for a caller that stopped
    waiting for it."""
    with contextlib.suppress(ValueError):  # NEVER: nothing taken
        reserved = reservation(reply, n)
        if reserved is not None:
            _give_back(core, keys, n, reserved)


def _give_back(core: Core, keys: list[bytes], n: Any, reserved: Reserved) -> None:
    """Give back a reservation nobody will use (see :meth:`Core.give_back_args`); a server that
    cannot be reached keeps it, as any lost reply's take stands."""
    args = core.give_back_args(n, reserved)
    if args is not None:
        with contextlib.suppress(*core.server.unavailable):
            core.server.run(keys, args)


#: How long past its deadline an ``acquire(timeout=...)`` lets its reservation's round trip
#: run, and how far past it the turn it was given may come: later than that, the reservation is
#: given back and the call returns False.
ASK_GRACE = 0.05


async def awaited_acquire(
    core: Core,
    keys: list[bytes],
    n: Any,
    timeout: Any,
    run: Callable[[list[bytes], Any], Awaitable[Any]],
    fall_back: Callable[[BaseException], Any],
) -> bool:
    """:func:`blocking_acquire` for asyncio, in the native limiters' asyncio loop (see
    :class:`Waiter`): awaits the reservation (``run`` runs the script: awaited on an asyncio
    client, on the server's own threads on a synchronous one: see ``_waits``) and the sleep.

    With a ``timeout``, the reservation is waited for at most what is left of it (plus
    :data:`ASK_GRACE`), whatever the client's socket timeout: a stopped server makes the call
    return False at its deadline. A waiter cancelled at any point is net zero: a reservation
    under way is let finish and given back, and one made is given back (undone if nobody queued
    behind it, else forfeited, as in-process)."""
    server = core.server

    def give_back(reserved: Reserved) -> Awaitable[None] | None:
        args = core.give_back_args(n, reserved)
        if args is None:
            return None

        async def give() -> None:
            try:
                await run(keys, args)
            except Exception as error:
                not_given_back(error, "the give-back of a reservation failed")

        return give()

    def give_back_reply(reply: Any) -> Awaitable[None] | None:
        try:
            reserved = reservation(reply, n)
        except ValueError:  # NEVER: nothing taken
            return None
        return None if reserved is None else give_back(reserved)

    def in_background(reserved: Reserved) -> None:
        undo = give_back(reserved)
        if undo is not None:
            _in_background(undo)

    waiter = Waiter(n, fall_back, late=in_background, stopped=in_background)

    async def reserve(left: float | None) -> _conveniences.Turn:
        asked_ns = time.monotonic_ns()
        asked = net_zero(run(keys, core.reserve_args(n, left)), give_back_reply)
        try:
            if left is None:
                reply = await asked
            else:
                reply = await asyncio.wait_for(asked, left + ASK_GRACE)
        except asyncio.TimeoutError:
            return None
        except server.unavailable as error:
            return waiter.fallen_back(error)
        return waiter.turn(reply, asked_ns, left)

    return await _conveniences.await_turn(reserve, waiter.until, waiter.give_back, timeout)


def on_threads(server: Server) -> Callable[[list[bytes], Any], Awaitable[Any]]:
    """Run the script on a synchronous client on the server's own threads (see ``_waits``),
    for an awaiting caller: never on the event loop's default executor, the application's."""
    return lambda keys, args: _waits.awaited(
        _waits.of(server, keys[0]), functools.partial(server.run, keys, args)
    )


def on_asyncio_client(server: Server) -> Callable[[list[bytes], Any], Awaitable[Any]]:
    """Run the script on an asyncio client."""
    return lambda keys, args: server.run_async(keys, args)
