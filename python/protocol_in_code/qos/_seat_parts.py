"""The in-flight parts of a stacked request: seats taken with the rate parts' tokens, all or none.

An in-flight limiter (:mod:`protocol_in_code.qos.concurrency`, or any limiter of the interfaces'
``InFlightLimiter`` kinds) may be a part of :func:`~protocol_in_code.qos.stack.check_together`,
spelled as a rate part is: ``Part(limiter)`` for one limit, ``Part(limiter, key, n)`` for a key
of a keyed one. A stacked request never waits, so each in-flight part is asked with
``try_acquire``: it holds a lease, or it refuses.

The stack takes the in-flight parts first, before the rate parts of any store, because seats
come back exactly: a lease released is the same count as before it was taken, whereas a rate
token given back late is capped at its burst. So a rate part that refuses after the seats were
taken costs nothing: the seats are released and the in-flight counts are what they were. And a
refused seat has taken nothing of the rate parts yet. (The rate parts of this host are asked
first, taking nothing, so a request refused by its rate limits never touches a seat.)

Each in-flight part answers a :class:`~protocol_in_code.qos.limiter.Decision`, as a rate part
does, so the request's decision is made by the same rule:

* seated: ALLOWED, ``wait_ns`` 0;
* refused (every seat taken, waiters ahead, or a keyed table without room): REFUSED, with a
  ``wait_ns`` of 0: a seat comes free when a holder gives it back, which no clock can promise;
* ``n`` more than the limit: NEVER (``wait_ns`` None), until the limit is resized;

and ``remaining`` is the seats left free, where the limiter says it (one limit, with an
``in_flight`` read at once, not a round trip to a server); a keyed limiter, which counts over
every key, says 0, as one behind a server does.

The leases are handed back on the :class:`~protocol_in_code.qos.stack.Stacked` answer; its
``release()`` and ``release_async()`` are this module's :func:`release` and
:func:`release_async`.
"""

from __future__ import annotations

import inspect
from typing import Any

from protocol_in_code._native import Decision, LimitOutcome
from protocol_in_code.qos._give_backs import run_to_the_end
from protocol_in_code.qos.interfaces import holds_seats

__all__ = [
    "SeatParts",
    "awaits_seats",
    "holds_seats",
    "itself_async",
    "release",
    "release_async",
]

#: A part as the stack reads it: ``(limiter, key, n, plan)``.
_Asked = tuple[Any, Any, Any, Any]


def awaits_seats(limiter: object) -> bool:
    """Whether an in-flight limiter's ``try_acquire`` is awaited (an asyncio limiter)."""
    return inspect.iscoroutinefunction(getattr(type(limiter), "try_acquire", None))


class SeatParts:
    """The in-flight parts of a request, by their indices in it: taken in turn, all or none.

    Read by the stack as any group of its parts (``take``, ``peek``, ``give_back`` and their
    asyncio forms, each filling ``decisions`` at its parts' indices); the leases taken are in
    ``leases`` until given back.
    """

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices
        self.leases: dict[int, Any] = {}

    def take(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        try:
            for place, i in enumerate(self.indices):
                decisions[i] = self._seated(i, asked[i], _try(asked[i]))
                if not decisions[i]:
                    self._refused(place, asked, decisions)
                    return False
        except BaseException:
            self.give_back(asked, decisions, now_ns)
            raise
        return True

    async def take_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        try:
            for place, i in enumerate(self.indices):
                lease = _try(asked[i])
                if inspect.isawaitable(lease):
                    lease = await lease
                decisions[i] = self._seated(i, asked[i], lease)
                if not decisions[i]:
                    await run_to_the_end(self.give_back_async(asked, decisions, now_ns))
                    self._peek_after(place, asked, decisions)
                    return False
        except BaseException:
            await run_to_the_end(self.give_back_async(asked, decisions, now_ns))
            raise
        return True

    def _seated(self, i: int, part: _Asked, lease: Any) -> Decision:
        """Part ``i``'s answer for ``lease`` (None: refused), the lease kept."""
        if lease is None:
            return _refusal(part)
        self.leases[i] = lease
        return Decision(LimitOutcome.ALLOWED, 0, _free(part))

    def _refused(self, place: int, asked: list[_Asked], decisions: list[Decision | None]) -> None:
        """The part at ``place`` refused: give back the seats taken, and let the parts not yet
        asked say what they would answer."""
        self.give_back(asked, decisions, None)
        self._peek_after(place, asked, decisions)

    def _peek_after(
        self, place: int, asked: list[_Asked], decisions: list[Decision | None]
    ) -> None:
        for i in self.indices[place + 1 :]:
            decisions[i] = _peeked(asked[i])

    def peek(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        """What each part would answer now, taking nothing (see :func:`_peeked`)."""
        for i in self.indices:
            decisions[i] = _peeked(asked[i])

    async def peek_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        self.peek(asked, decisions, now_ns)

    def give_back(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        """Release the leases taken, the last first; the parts keep the answers they had when
        taken."""
        release(self._taken_back())

    async def give_back_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        await _released_async(self._taken_back())

    def _taken_back(self) -> tuple[Any, ...]:
        leases = tuple(self.leases.values())
        self.leases.clear()
        return leases

    def in_order(self) -> tuple[Any, ...]:
        """The leases held, in the request's order of their parts."""
        return tuple(self.leases[i] for i in self.indices if i in self.leases)


def _try(part: _Asked) -> Any:
    """The part's ``try_acquire`` (awaitable for an asyncio limiter), or None where its ``n``
    (an int of at least 1: the stack checked it) is more than the limit (the limiter itself
    would raise)."""
    limiter, key, n, _ = part
    if n > limiter.limit:
        return None
    return limiter.try_acquire(n) if key is None else limiter.try_acquire(key, n)


def _refusal(part: _Asked) -> Decision:
    """A refused part's answer: NEVER for more than the limit, else REFUSED."""
    limiter, _, n, _ = part
    if n > limiter.limit:
        return Decision(LimitOutcome.NEVER, None, _free(part))
    return Decision(LimitOutcome.REFUSED, 0, _free(part))


def _peeked(part: _Asked) -> Decision:
    """What the part would answer now, taking nothing: NEVER for more than the limit; for one
    limit whose ``in_flight`` can be read at once, ALLOWED if its ``n`` is free and nobody
    waits, else REFUSED; for any other (a keyed limiter, an asyncio one), ALLOWED: it cannot
    say more without taking."""
    limiter, key, n, _ = part
    if n > limiter.limit:
        return _refusal(part)
    free = _free(part)
    in_flight = _readable(limiter, "in_flight") if key is None else None
    if in_flight is None:
        return Decision(LimitOutcome.ALLOWED, 0, free)
    if n <= free and not _readable(limiter, "waiting"):
        return Decision(LimitOutcome.ALLOWED, 0, free)
    return Decision(LimitOutcome.REFUSED, 0, free)


def _free(part: _Asked) -> int:
    """The seats free of a one-limit part's limiter, where it can say (else 0)."""
    limiter, key, _, _ = part
    in_flight = _readable(limiter, "in_flight") if key is None else None
    if in_flight is None:
        return 0
    return max(int(limiter.limit) - in_flight, 0)


def _readable(limiter: object, name: str) -> int | None:
    """``limiter.<name>`` if it is an int read at once, else None: never read from a limiter
    whose calls wait on the network (it declares ``blocks``,
    :class:`~protocol_in_code.qos.capabilities.Blocking`), where each read is a round trip,
    nor awaited from an asyncio one."""
    if hasattr(limiter, "blocks"):
        return None
    value = getattr(limiter, name, None)
    return value if type(value) is int else None


# ---------------------------------------------------------------------------------------------
# Giving a request's leases back (Stacked.release, release_async, async with)
# ---------------------------------------------------------------------------------------------


def release(leases: tuple[Any, ...]) -> None:
    """Release every lease, the last first (a lease released twice does nothing). Every lease
    is released even if one raises; the first error is raised after. ``TypeError``, releasing
    nothing, if a lease is released by awaiting: that needs :func:`release_async`."""
    awaited = [lease for lease in leases if inspect.iscoroutinefunction(lease.release)]
    if awaited:
        raise TypeError(
            f"{awaited[0]!r} is released by awaiting: use await stacked.release_async() "
            "or async with stacked"
        )
    first: BaseException | None = None
    for lease in reversed(leases):
        try:
            lease.release()
        except BaseException as error:  # raised below, once all are released
            first = first or error
    if first is not None:
        raise first


async def release_async(leases: tuple[Any, ...]) -> None:
    """:func:`release`, awaiting the leases released so, run to its end even if the awaiting
    task is cancelled meanwhile."""
    await run_to_the_end(_released_async(leases))


async def _released_async(leases: tuple[Any, ...]) -> None:
    first: BaseException | None = None
    for lease in reversed(leases):
        try:
            released = lease.release()
            if inspect.isawaitable(released):
                await released
        except BaseException as error:  # raised below, once all are released
            first = first or error
    if first is not None:
        raise first


async def itself_async(stacked: Any) -> Any:
    """``async with stacked`` enters as ``stacked`` itself."""
    return stacked
