"""Who is told: ``on_decision``, called once per decision with a :class:`DecisionEvent`.

Without a hook the middleware calls the limiter's own ``check``: no hook costs no instruction
at all. With one, a rule's ``check`` (and ``check_levels``) is put in place, at construction,
by one that calls the limiter's and then tells the hook (:func:`hooked`); a stacked decision
tells each limit's hook of its own part (:func:`teller`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, TypeAlias

from protocol_in_code._native import Decision, LimitOutcome

NS_PER_SECOND = 1_000_000_000


class DecisionEvent(NamedTuple):
    """One decision, as ``on_decision`` is told of it.

    * ``policy``: the limit's name (``name=``, or the route's), as the RateLimit fields give it
      (a limiter of several bands is one policy here, ``name``, whose bands are ``name-1``...);
      for a seat of ``max_in_flight=``, ``in-flight`` (see :mod:`.seats`).
    * ``plan``: the client's plan, for limiters with plans; ``None`` otherwise.
    * ``route``: the matched :class:`Route`'s prefix, ``None`` for the middleware's own
      ``limiter``.
    * ``outcome``: the limiter's :class:`LimitOutcome`, whether or not it was enforced.
    * ``wait_ns``: the decision's wait (0 when allowed; ``None`` for NEVER).
    * ``enforced``: ``False`` under ``enforce=False``, where no request is refused.
    * ``key``: the client's key, only with ``on_decision_key=True`` (else ``None``), so that
      what is labelled by these values has as many label sets as there are policies and
      routes, not clients.
    * ``limiter``: the limiter that decided (to read a keyed table's ``len()``, or an in-flight
      limiter's seats held).

    A named tuple, as a frozen dataclass is four times slower to make: this is made for
    every request.
    """

    policy: str
    plan: str | None
    route: str | None
    outcome: LimitOutcome
    wait_ns: int | None
    enforced: bool
    key: Hashable | None
    limiter: Any

    @property
    def wait(self) -> float | None:
        """``wait_ns`` in seconds."""
        return None if self.wait_ns is None else self.wait_ns / NS_PER_SECOND


DecisionHook: TypeAlias = Callable[[DecisionEvent], object]
_log = logging.getLogger("protocol_in_code.qos")

#: What tells a hook of one decision, with the key asked about (``None`` for a limiter without
#: keys).
Tell: TypeAlias = Callable[[Decision, Hashable | None], None]


def teller(
    on_decision: DecisionHook,
    *,
    policy: str,
    plan: str | None,
    route: str | None,
    limiter: Any,
    enforced: bool,
    with_key: bool,
) -> Tell:
    """What tells ``on_decision`` of one decision of a limit: its ``policy``, ``plan`` and
    ``route``, the ``limiter`` that decided, whether refusals are ``enforced``, and the key only
    ``with_key``.

    An exception in the hook is logged (``protocol_in_code.qos``) and the request answered
    all the same, since the limiter has decided (and may have spent).
    """
    allowed = LimitOutcome.ALLOWED
    # Most decisions are this one, and an event is immutable: it is made once, since
    # making one costs more than the rest of the hook's path (200 ns).
    every_allowed = DecisionEvent(policy, plan, route, allowed, 0, enforced, None, limiter)

    def tell(decision: Decision, key: Hashable | None) -> None:
        outcome = decision.outcome
        wait_ns = decision.wait_ns
        if outcome is allowed and wait_ns == 0 and not with_key:
            event = every_allowed
        else:
            if not with_key:
                key = None
            event = DecisionEvent(policy, plan, route, outcome, wait_ns, enforced, key, limiter)
        try:
            on_decision(event)
        except Exception:
            _log.exception("on_decision raised; the request is answered all the same")

    return tell


def hooked(check: Callable[..., Any], tell: Tell, *, keyed: bool, awaited: bool) -> Any:
    """``check``, a limiter's, wrapped to ``tell`` of every decision: a function of
    ``(key, n)`` for a ``keyed`` limiter, of ``(n)`` otherwise, a coroutine function for an
    ``awaited`` one."""
    if awaited:

        async def checked_async(*args: Any) -> Decision:
            decision: Decision = await check(*args)
            tell(decision, args[0] if keyed else None)
            return decision

        return checked_async

    if keyed:

        def checked_keyed(key: Hashable, n: int) -> Decision:
            decision: Decision = check(key, n)
            tell(decision, key)
            return decision

        return checked_keyed

    def checked(n: int) -> Decision:
        decision: Decision = check(n)
        tell(decision, None)
        return decision

    return checked


def hooked_levels(
    check_levels: Callable[..., Any], tell: Tell, *, keyed: bool, awaited: bool
) -> Any:
    """``check_levels``, a limiter's (the decision and each band's level, in one call), wrapped
    to ``tell`` of every decision, as :func:`hooked` wraps ``check``."""
    if awaited:

        async def checked_levels_async(*args: Any) -> Any:
            decided = await check_levels(*args)
            tell(decided[0], args[0] if keyed else None)
            return decided

        return checked_levels_async

    def checked_levels(*args: Any) -> Any:
        decided = check_levels(*args)
        tell(decided[0], args[0] if keyed else None)
        return decided

    return checked_levels


class Hooked:
    """What a rule asks in place of its limiter when there is a hook: ``check`` (and
    ``check_levels``, for a rule that asks it) wrapped by :func:`hooked`."""

    __slots__ = ("check", "check_levels")

    def __init__(
        self, check: Callable[..., Any], check_levels: Callable[..., Any] | None = None
    ) -> None:
        self.check = check
        self.check_levels = check_levels
