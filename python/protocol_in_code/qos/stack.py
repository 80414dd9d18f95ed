"""Stacked limits: one request under several limits at once, taken from all of them or none.

A service often limits a request several ways together: every client at once (a global limit),
the route, and the client. Asked one after another, they go wrong where they meet: the global
limit takes a token, the client's limit refuses, and the global token is spent on a request
that never ran. :func:`check_together` asks them as one::

    from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
    from protocol_in_code.qos.stack import Part, check_together

    everyone = RateLimiter("1000/second")
    per_client = KeyedRateLimiter("10/second", burst=20)

    stacked = check_together([Part(everyone), Part(per_client, "203.0.113.9")])
    if not stacked:
        print(stacked.decision.wait_ns, [d.outcome for d in stacked.parts])

The request is allowed only if every part allows it, and then every part has taken its tokens.
Otherwise nothing stays taken anywhere, ``decision`` is the refusal (NEVER if some part can
never allow it, else REFUSED if a keyed table had no room, else DENIED; its ``wait_ns`` is the
longest of the parts' waits, after which every part would allow), and ``parts`` says what
each limit alone answered, so a refusal can name every limit that refused.

In-flight limiters (how many at once, :mod:`protocol_in_code.qos.concurrency`) are parts too,
spelled the same way (``Part(seats)``, ``Part(per_client_seats, key, n)``): an allowed request
holds their leases in ``stacked.leases``, given back by ``stacked.release()`` or by leaving
``with stacked:`` (``async with`` and ``release_async()`` for leases given back by awaiting).
They are taken before the rate parts of other stores and released on any refusal
(:mod:`protocol_in_code.qos._seat_parts` says why and how they answer).

How much "together" holds depends on where the limits keep their state:

* **Limiters of this host** (:class:`~protocol_in_code.qos.RateLimiter`,
  :class:`~protocol_in_code.qos.KeyedRateLimiter`, and the shared
  :class:`~protocol_in_code.qos.SharedRateLimiter` and
  :class:`~protocol_in_code.qos.SharedKeyedRateLimiter`) are decided in one native call that
  holds every lock the request needs, taken in one global order (the same in every process of
  the host): no other call, in this process or another, ever sees some parts taken and others
  not. Their keys must be values (int, float, str, bytes, tuples of these).
* **Limiters of a store that decides its parts together** declare it
  (:class:`~protocol_in_code.qos.capabilities.Stackable`: ``stacking``, one object for the
  store), and each such store is handed all its parts at once. The Redis limiters do: their
  parts are decided atomically, in one script call, for keys in one slot (on a single server,
  all of them); across slots, slot by slot, with what was taken given back when a later slot
  refuses.
* **Any other limiter** of the interfaces (a limiter of your own) is asked with ``check``, one
  after another; when one refuses, the parts already taken are given
  back with ``refund``. Between the taking and the giving back, another caller may find those
  tokens missing.

The parts of this host are asked first (no I/O, taking nothing), then each store's parts and
the others are taken in turn, and this host's parts are taken last, so they are never given back
after a wait on another store (a refund is capped at the burst only: given back late, it could
bring back refill the limit would have lost at its burst). Once a part has refused, the parts
not yet asked are only ``peek``-ed, so each still answers. Parts that name the same bucket (the
same limiter and key) draw from it together: the request needs the sum of their tokens there,
wherever the limiter keeps them. A keyed table's ``stats`` counts the request once, on every
path: allowed if taken, else its key's own refusal, or DENIED where the key would have allowed.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple

from protocol_in_code._native import (
    Decision,
    LimitOutcome,
    Stacked,
    _combined,
    _of_this_host,
)
from protocol_in_code._native import _check_together as _native_together
from protocol_in_code.qos._give_backs import run_to_the_end
from protocol_in_code.qos._seat_parts import SeatParts, awaits_seats, holds_seats
from protocol_in_code.qos.capabilities import Stacking

__all__ = ["Part", "Stacked", "check_together", "check_together_async"]


class Part(NamedTuple):
    """One limit of a stacked request: the limiter, the key for a keyed one (``None`` for one
    limit), the tokens the request takes from it, and the plan for a limiter with plans.

    Any tuple of these, in this order, will do as well (``(limiter,)``, ``(table, key, 2)``).
    """

    limiter: Any
    key: Hashable | None = None
    n: int = 1
    plan: str | None = None


#: A part as the groups read it: ``(limiter, key, n, plan)``.
_Asked = tuple[Any, Any, Any, Any]


def check_together(parts: Iterable[Part | tuple[Any, ...]], now_ns: int | None = None) -> Stacked:
    """Decide ``parts`` together: every part takes its tokens, or none does (see the module's
    help for what holds where). ``now_ns`` replaces every limiter's clock, as for ``check``.

    An asyncio limiter's parts need :func:`check_together_async`.
    """
    asked = _parts(parts)
    # The usual stack, every limit of this host: one native call, nothing to give back.
    stacked = _native_together(asked, now_ns)
    if stacked is not None:
        return stacked
    local, seats, remote = _groups(asked, awaited=False)
    decisions: list[Decision | None] = [None] * len(asked)
    if local is not None:
        # This host's parts are asked first, and taken last: they are never given back after
        # a wait on another store (a give-back can only be capped at the burst, and whatever
        # the limit refilled meanwhile above its burst would come back with it).
        local.peek(asked, decisions, now_ns)
        if _refused(decisions):
            for group in remote:
                group.peek(asked, decisions, now_ns)
            local.count_refusal(asked, now_ns)
            return _stacked(decisions, seats)
    taken: list[_Group | SeatParts] = []
    try:
        for place, group in enumerate(remote):
            if not group.take(asked, decisions, now_ns):
                _give_back(taken, asked, decisions, now_ns)
                for rest in remote[place + 1 :]:
                    rest.peek(asked, decisions, now_ns)
                if local is not None:
                    local.count_refusal(asked, now_ns)
                return _stacked(decisions, seats)
            taken.append(group)
        if local is not None and not local.take(asked, decisions, now_ns):
            # Someone took this host's tokens since they were asked: the others give back.
            _give_back(taken, asked, decisions, now_ns)
    except BaseException:
        # A part that raised (a server down, a bad argument) takes nothing: nor do the others.
        _give_back(taken, asked, decisions, now_ns)
        raise
    return _stacked(decisions, seats)


async def check_together_async(
    parts: Iterable[Part | tuple[Any, ...]], now_ns: int | None = None
) -> Stacked:
    """:func:`check_together` where parts may be asyncio limiters (awaited): the same steps,
    each awaited where its limiter's calls are. If the caller is cancelled meanwhile, the cancel
    is raised at once and nothing stays taken: what the parts took is given back by a task the
    cancel does not reach."""
    asked = _parts(parts)
    stacked = _native_together(asked, now_ns)
    if stacked is not None:  # every limit of this host: nothing to await
        return stacked
    local, seats, remote = _groups(asked, awaited=True)
    decisions: list[Decision | None] = [None] * len(asked)
    if local is not None:
        local.peek(asked, decisions, now_ns)
        if _refused(decisions):
            for group in remote:
                await group.peek_async(asked, decisions, now_ns)
            local.count_refusal(asked, now_ns)
            return _stacked(decisions, seats)
    taken: list[_Group | SeatParts] = []
    try:
        for place, group in enumerate(remote):
            if not await group.take_async(asked, decisions, now_ns):
                await _give_back_async(taken, asked, decisions, now_ns)
                for rest in remote[place + 1 :]:
                    await rest.peek_async(asked, decisions, now_ns)
                if local is not None:
                    local.count_refusal(asked, now_ns)
                return _stacked(decisions, seats)
            taken.append(group)
        if local is not None and not local.take(asked, decisions, now_ns):
            await _give_back_async(taken, asked, decisions, now_ns)
    except BaseException:
        await _give_back_async(taken, asked, decisions, now_ns)
        raise
    return _stacked(decisions, seats)


def _refused(decisions: list[Decision | None]) -> bool:
    """Whether a part decided so far refused."""
    return any(d is not None and d.outcome is not LimitOutcome.ALLOWED for d in decisions)


def _give_back(
    taken: list[_Group | SeatParts],
    asked: list[_Asked],
    decisions: list[Decision | None],
    now_ns: int | None,
) -> None:
    """Give back what the groups in ``taken`` took, the last first; ``taken`` is emptied."""
    while taken:
        taken.pop().give_back(asked, decisions, now_ns)


async def _give_back_async(
    taken: list[_Group | SeatParts],
    asked: list[_Asked],
    decisions: list[Decision | None],
    now_ns: int | None,
) -> None:
    """:func:`_give_back`, awaited, and run to its end even if the caller is cancelled
    meanwhile (the cancel is raised at once; the give-back goes on without it)."""

    async def give_back() -> None:
        while taken:
            await taken.pop().give_back_async(asked, decisions, now_ns)

    await run_to_the_end(give_back())


def _parts(parts: Iterable[Part | tuple[Any, ...]]) -> list[_Asked]:
    """Each part as a 4-tuple (a :class:`Part` is one; a shorter tuple is padded as ``Part``
    pads it), checked for its shape."""
    if type(parts) is not list:
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Iterable):
            raise TypeError(f"parts must be a list of Part, not {type(parts).__name__}")
        parts = list(parts)
    asked = [
        part if type(part) is Part or (type(part) is tuple and len(part) == 4) else _part(i, part)
        for i, part in enumerate(parts)
    ]
    if not asked:
        raise ValueError("parts: a stacked request needs at least one part")
    return asked


def _part(i: int, part: object) -> _Asked:
    if isinstance(part, tuple) and 1 <= len(part) <= 4:
        return tuple(Part(*part))
    raise TypeError(f"parts[{i}] must be a Part(limiter, key=None, n=1, plan=None), not {part!r}")


def _stacked(decisions: list[Decision | None], seats: SeatParts | None) -> Stacked:
    """The request's decision from its parts' (every one decided by now), by the core's rule
    (``core::exact::stack::combined``), with the leases its in-flight parts hold (none unless
    it was allowed: a refusal gave them back)."""
    parts = tuple(decision for decision in decisions if decision is not None)
    assert len(parts) == len(decisions)  # every group answers for each of its parts
    leases = () if seats is None else seats.in_order()
    return Stacked(_combined(list(parts)), parts, leases)


# ---------------------------------------------------------------------------------------------
# Where each part is decided
# ---------------------------------------------------------------------------------------------


class _Group:
    """Parts decided in one step, by their indices in the request."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def take(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        raise NotImplementedError

    def peek(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        for i in self.indices:
            decisions[i] = _call("peek", asked[i], now_ns)

    def give_back(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        """Refund what this group took, after a later group refused. Its parts keep the
        answers they had when taken."""
        for i in self.indices:
            _call("refund", asked[i], now_ns)

    async def take_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        return self.take(asked, decisions, now_ns)

    async def peek_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        for i in self.indices:
            decisions[i] = await _awaited("peek", asked[i], now_ns)

    async def give_back_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        for i in self.indices:
            await _awaited("refund", asked[i], now_ns)


class _Native(_Group):
    """Limiters of this host (in-process and shared): one native call, under every lock the
    parts need."""

    def _ask(
        self,
        asked: list[_Asked],
        decisions: list[Decision | None],
        now_ns: int | None,
        peek: bool,
    ) -> bool:
        stacked = _native_together([asked[i] for i in self.indices], now_ns, peek)
        assert stacked is not None  # every part of this group is in-process
        for i, answer in zip(self.indices, stacked.parts, strict=True):
            decisions[i] = answer
        return stacked.allowed

    def take(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        return self._ask(asked, decisions, now_ns, peek=False)

    def peek(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        self._ask(asked, decisions, now_ns, peek=True)

    def count_refusal(self, asked: list[_Asked], now_ns: int | None) -> None:
        """Count the request, refused, in this host's keyed tables (their ``stats``), which
        were only asked (``peek`` counts nothing): the native call with ``refused=True``
        takes nothing and counts each key as a stacked refusal is counted, its key's own
        refusal, or DENIED where the key would have allowed. Its answers are not used: the
        request was answered from what the parts said when asked."""
        _native_together([asked[i] for i in self.indices], now_ns, refused=True)


class _Store(_Group):
    """The parts of one store that decides them together: the store's
    :class:`~protocol_in_code.qos.capabilities.Stacking`, which their limiters declare."""

    def __init__(self, indices: list[int], stacking: Stacking) -> None:
        super().__init__(indices)
        self.stacking = stacking

    def take(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        parts = [asked[i] for i in self.indices]
        answers = self.stacking.check_together(parts, now_ns=now_ns)
        for i, decision in zip(self.indices, answers, strict=True):
            decisions[i] = decision
        return all(d.outcome is LimitOutcome.ALLOWED for d in answers)

    async def take_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        parts = [asked[i] for i in self.indices]
        answers = await self.stacking.check_together_async(parts, now_ns=now_ns)
        for i, decision in zip(self.indices, answers, strict=True):
            decisions[i] = decision
        return all(d.outcome is LimitOutcome.ALLOWED for d in answers)


class _OneByOne(_Group):
    """Any other limiter: ``check`` in turn, and ``refund`` what was taken on a refusal, or
    when a part raises (a cancelled task included) after others were taken."""

    def take(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        taken: list[int] = []
        try:
            for place, i in enumerate(self.indices):
                decision = _call("check", asked[i], now_ns)
                decisions[i] = decision
                if decision.outcome is not LimitOutcome.ALLOWED:
                    while taken:
                        _call("refund", asked[taken.pop()], now_ns)
                    # Every other part says what it holds now, those given back included.
                    for j in self.indices[:place] + self.indices[place + 1 :]:
                        decisions[j] = _call("peek", asked[j], now_ns)
                    return False
                taken.append(i)
        except BaseException:
            while taken:
                _call("refund", asked[taken.pop()], now_ns)
            raise
        return True

    async def take_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> bool:
        taken: list[int] = []
        try:
            for i in self.indices:
                decision = await _awaited("check", asked[i], now_ns)
                decisions[i] = decision
                if decision.outcome is not LimitOutcome.ALLOWED:
                    break
                taken.append(i)
            else:
                return True
        except BaseException:
            await run_to_the_end(self._refunded_async(asked, taken, now_ns))
            raise
        # Given back whatever befalls the caller from here: the refunds run to their end.
        await run_to_the_end(self._refunded_async(asked, taken, now_ns))
        for j in self.indices:
            if j != i:  # every other part says what it holds now, those given back included
                decisions[j] = await _awaited("peek", asked[j], now_ns)
        return False

    @staticmethod
    async def _refunded_async(asked: list[_Asked], taken: list[int], now_ns: int | None) -> None:
        """Refund the parts in ``taken``, the last first; ``taken`` is emptied."""
        while taken:
            await _awaited("refund", asked[taken.pop()], now_ns)

    def give_back(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        """Refund every part, then say what each holds now (a limiter of one's own is asked
        again; a Redis part is not, which would cost a round trip per key)."""
        super().give_back(asked, decisions, now_ns)
        self.peek(asked, decisions, now_ns)

    async def give_back_async(
        self, asked: list[_Asked], decisions: list[Decision | None], now_ns: int | None
    ) -> None:
        await super().give_back_async(asked, decisions, now_ns)
        await self.peek_async(asked, decisions, now_ns)


def _groups(
    asked: list[_Asked], *, awaited: bool
) -> tuple[_Native | None, SeatParts | None, list[_Group | SeatParts]]:
    """The parts by where they are decided: this host's rate parts; the in-flight parts
    (:mod:`~protocol_in_code.qos._seat_parts`); and, in the order they are taken, the in-flight
    parts first (their seats come back exactly), then each store that decides its parts
    together (its limiters declare its ``stacking``), in the order the request first names them,
    then the rest, one by one."""
    native: list[int] = []
    seated: list[int] = []
    others: list[int] = []
    stores: dict[int, tuple[Stacking, list[int]]] = {}
    for i, (limiter, _, n, plan) in enumerate(asked):
        if _of_this_host(limiter):
            native.append(i)
            continue
        if holds_seats(limiter):
            _check_seat_part(i, limiter, n, plan, awaited)
            seated.append(i)
            continue
        stacking = getattr(limiter, "stacking", None)
        if stacking is not None and (awaited or not _asyncio_class(type(limiter))):
            stores.setdefault(id(stacking), (stacking, []))[1].append(i)
            continue
        check = getattr(limiter, "check", None)
        if not callable(check):
            raise TypeError(
                f"parts[{i}]: {reprlib.repr(limiter)} is not a limiter (it has no check)"
            )
        if not awaited and inspect.iscoroutinefunction(check):
            raise TypeError(
                f"parts[{i}]: an asyncio limiter's decision must be awaited: use "
                "check_together_async"
            )
        others.append(i)
    seats = SeatParts(seated) if seated else None
    remote: list[_Group | SeatParts] = [] if seats is None else [seats]
    remote += [_Store(indices, stacking) for stacking, indices in stores.values()]
    if others:
        remote.append(_OneByOne(others))
    return (_Native(native) if native else None), seats, remote


def _check_seat_part(i: int, limiter: object, n: object, plan: object, awaited: bool) -> None:
    """An in-flight part's seats are a count of at least 1, read before any part is taken; it
    takes no plan, and an asyncio one is awaited."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"parts[{i}]: n must be an int, not {n!r}")
    if n < 1:
        raise ValueError(f"parts[{i}]: n must be at least 1, not {n}")
    if plan is not None:
        raise TypeError(f"parts[{i}]: an in-flight limiter has no plans, so its part takes none")
    if not awaited and awaits_seats(limiter):
        raise TypeError(
            f"parts[{i}]: an asyncio limiter's seats must be awaited: use check_together_async"
        )


#: Whether each class of the limiters that declare a stacking is an asyncio one.
_ASYNCIO_CLASSES: dict[type, bool] = {}


def _asyncio_class(cls: type) -> bool:
    """Whether a class's ``check`` is a coroutine function: asked once per class of the limiters
    that declare a stacking (a synchronous stack refuses an asyncio one, as any other)."""
    known = _ASYNCIO_CLASSES.get(cls)
    if known is None:
        known = _ASYNCIO_CLASSES[cls] = inspect.iscoroutinefunction(getattr(cls, "check", None))
    return known


def _call(method: str, part: _Asked, now_ns: int | None) -> Any:
    """``limiter.<method>`` for one part, with its key and plan where it has them."""
    limiter, key, n, plan = part
    args: tuple[Any, ...] = (n,) if key is None else (key, n)
    kwargs: dict[str, Any] = {} if now_ns is None else {"now_ns": now_ns}
    if plan is not None:
        kwargs["plan"] = plan
    return getattr(limiter, method)(*args, **kwargs)


async def _awaited(method: str, part: _Asked, now_ns: int | None) -> Any:
    """:func:`_call`, awaited where the limiter's method is a coroutine function."""
    answer = _call(method, part, now_ns)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer
