"""What a form reads of a limiter, once, when it is made: its interface and what it declares.

A form never asks a limiter's class. It asks the limiter which of the four interfaces it is
(keyed? awaited? :func:`~protocol_in_code.qos.interfaces.kind_of` for a rate limiter,
:func:`in_flight_kind_of` for an in-flight one) and what it declares
(:mod:`protocol_in_code.qos.capabilities`): the keys it takes, and whether its calls block.
A limiter whose form does not fit is refused here, in its own words: an asyncio limiter by the
synchronous forms, which cannot await it, and one whose calls block by the forms on the event
loop, which it would stall.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from protocol_in_code.qos.capabilities import Awaiting, Blocking, KeyChecked, Misfit
from protocol_in_code.qos.interfaces import in_flight_kind_of, kind_of


class Kind(NamedTuple):
    """What the web layer needs to know of a limiter: its interface (keyed? awaited?), the keys
    it takes, and whether its calls block."""

    keyed: bool
    awaited: bool
    #: The limiter's declared key check (see :class:`~protocol_in_code.qos.capabilities.
    #: KeyChecked`), ``None`` for one that takes every value.
    key_refusal: Callable[[object], str | None] | None = None
    #: For a synchronous limiter whose calls wait on the network, how the event loop's forms
    #: refuse it (see :class:`~protocol_in_code.qos.capabilities.Blocking`).
    blocks: Misfit | None = None


#: How the synchronous forms name an asyncio limiter that says nothing of itself.
AWAITED = Misfit("an asyncio limiter", "give a synchronous one")


def limiter_kind(limiter: Any, parameter: str, *, allow_async: bool, on_event_loop: bool) -> Kind:
    """The :class:`Kind` of a limiter of one of the four interfaces
    (:mod:`protocol_in_code.qos.interfaces`), for a form that can await an asyncio limiter
    (``allow_async``) and runs on the event loop (``on_event_loop``) or not.

    ``TypeError`` naming ``parameter`` for an object of no interface, and for a limiter the form
    cannot take.
    """
    try:
        keyed, awaited = kind_of(limiter)
    except TypeError as error:
        raise TypeError(
            f"{parameter} must be a limiter (RateLimiter, KeyedRateLimiter, one of the Redis "
            f"limiters, or any object of protocol_in_code.qos.interfaces), not "
            f"{type(limiter).__name__}: {error}"
        ) from None
    return _fitting(limiter, parameter, keyed, awaited, allow_async, on_event_loop)


def in_flight_kind(limiter: Any, parameter: str, *, allow_async: bool, on_event_loop: bool) -> Kind:
    """The :class:`Kind` of an in-flight limiter (``InFlightLimiter`` and the three other
    kinds of :mod:`protocol_in_code.qos.interfaces`), refused as :func:`limiter_kind` refuses
    a rate limiter that does not fit the form."""
    try:
        keyed, awaited = in_flight_kind_of(limiter)
    except TypeError as error:
        raise TypeError(
            f"{parameter} must be an int (seats per client) or an in-flight limiter "
            f"(ConcurrencyLimiter, KeyedConcurrencyLimiter, or any object of the in-flight "
            f"interfaces of protocol_in_code.qos.interfaces), not {limiter!r}: {error}"
        ) from None
    return _fitting(limiter, parameter, keyed, awaited, allow_async, on_event_loop)


def _fitting(
    limiter: Any,
    parameter: str,
    keyed: bool,
    awaited: bool,
    allow_async: bool,
    on_event_loop: bool,
) -> Kind:
    """The :class:`Kind` of a limiter that is ``keyed`` and ``awaited`` or not; ``TypeError``
    naming ``parameter`` where the form cannot take it (see :func:`limiter_kind`)."""
    if awaited and not allow_async:
        awaits = limiter.awaits if isinstance(limiter, Awaiting) else AWAITED
        raise TypeError(
            f"{parameter}: {awaits.what} cannot serve WSGI or a synchronous view; {awaits.instead}"
        )
    blocks = limiter.blocks if not awaited and isinstance(limiter, Blocking) else None
    if blocks is not None and on_event_loop:
        raise TypeError(
            f"{parameter}: {blocks.what} would block the event loop at every request (a slow "
            "or stopped server would stall every request of this worker, exempt ones too); "
            f"{blocks.instead}"
        )
    checked = keyed and isinstance(limiter, KeyChecked)
    return Kind(keyed, awaited, limiter.key_refusal if checked else None, blocks)
