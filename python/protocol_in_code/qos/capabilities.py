"""What a limiter can do beyond answering its interface, declared by the limiter itself.

The four interfaces (:mod:`protocol_in_code.qos.interfaces`) say which questions a limiter
answers: one limit or one per key (*keyed*), answered at once or *awaited* (asyncio). The layers
that take any limiter, the web middleware and forms and :func:`~protocol_in_code.qos.stack.
check_together`, need a little more, and they ask the limiter for it rather than knowing its
class. So a limiter kept in a store of one's own fits them unchanged, by declaring what it can do:

======================  ==============================================  ========================
capability              what the limiter declares                       who asks
======================  ==============================================  ========================
:class:`Planned`        ``plans``, and ``plan=`` on its calls           the web rules, one a plan
:class:`Levelled`       ``check_levels``: the decision and every        the RateLimit fields
                        band's level, in one call
:class:`Batched`        ``try_acquire_many``: many keys in one call     a service's own code
:class:`Stackable`      ``stacking``: how its store decides its parts   ``check_together``
                        of a stacked request together, all or none
:class:`KeyChecked`     ``key_refusal``: which keys it cannot take      the web layer, before
                                                                        the limiter is asked
:class:`Blocking`       ``blocks``: its calls wait on the network       the ASGI forms refuse it
:class:`Awaiting`       ``awaits``: how to name it where it cannot be   the WSGI forms refuse it
                        awaited
======================  ==============================================  ========================

A layer reads what a limiter declares where it takes the limiter: the web forms once, when they
are made (so a request costs nothing more); a stack as it groups its parts, one attribute a
part. A limiter that declares nothing is asked with ``check``, ``peek`` and ``refund`` alone,
as the interfaces allow.

A store where a rate given in place of a limiter (the web forms' ``store=``) is kept is a
:class:`RateStore`: an object of one's own may be given as it is. One that also keeps the
seats of an in-flight limit given as a number (``max_in_flight=4``) is an
:class:`InFlightStore` as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from protocol_in_code._native import Band, Decision

__all__ = [
    "Awaiting",
    "Batched",
    "Blocking",
    "InFlightStore",
    "KeyChecked",
    "Levelled",
    "Misfit",
    "Planned",
    "RateStore",
    "Stackable",
    "StackedPart",
    "Stacking",
]

#: One part of a stacked request as a store's :class:`Stacking` is given it:
#: ``(limiter, key, n, plan)``, the key ``None`` for a limiter of one limit, the plan ``None``
#: for a limiter without plans.
StackedPart = tuple[Any, Any, int, "str | None"]


@runtime_checkable
class Planned(Protocol):
    """A limiter of named plans: each key is limited by the plan its call names (``plan=``).

    ``plans`` maps each plan's name to its bands; a limiter without plans has ``plans`` of
    ``None`` (or none at all).
    """

    @property
    def plans(self) -> Mapping[str, tuple[Band, ...]] | None: ...


@runtime_checkable
class Levelled(Protocol):
    """A limiter that says every band's level with its decision, in the same call (where asking
    ``band_levels`` afterwards would cost a second round trip): ``check_levels`` takes the
    arguments of ``check`` and answers ``(decision, levels)``, ``levels`` being each band's
    ``(remaining, reset_ns)``, or ``None`` where it could not say them."""

    def check_levels(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Batched(Protocol):
    """A keyed limiter that decides many keys in one call (one round trip, for a store behind
    a server)."""

    def try_acquire_many(self, keys: Sequence[Any], *args: Any, **kwargs: Any) -> Any: ...


class Stacking(Protocol):
    """How one store decides its parts of a stacked request: together, taken from every one
    of them or from none.

    Given the parts whose limiters declare this same object (in the request's order), each
    method answers one :class:`~protocol_in_code.qos.limiter.Decision` per part, in order. If
    every part is allowed, every part's tokens are taken and each decision is what ``check``
    would answer; otherwise nothing stays taken, and each decision is what ``peek`` would
    answer now. ``now_ns`` replaces the store's clock, as in the limiters' own calls.
    ``check_together_async`` is the same, awaited; it may be given the store's synchronous
    limiters too.
    """

    def check_together(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]: ...

    async def check_together_async(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]: ...


@runtime_checkable
class Stackable(Protocol):
    """A limiter whose store decides its parts of a stacked request together: ``stacking`` is
    that store's :class:`Stacking`, one object for all the store's limiters, so that
    :func:`~protocol_in_code.qos.stack.check_together` hands it every part of that store at
    once. A limiter without it is asked part by part (``check``, then ``refund`` on a
    refusal)."""

    @property
    def stacking(self) -> Stacking: ...


@runtime_checkable
class KeyChecked(Protocol):
    """A keyed limiter that takes only some keys, and says which: ``key_refusal(key)`` is
    ``None`` for a key it takes, else the words of the refusal (``"a Redis limiter cannot take:
    its keys are str or bytes"``). The web layer asks it before the limiter is asked, so a
    request never fails after a token is spent. A keyed limiter without it takes every value
    (:func:`~protocol_in_code.qos._http.keys.not_a_key` says what a value is)."""

    def key_refusal(self, key: object) -> str | None: ...


class Misfit(NamedTuple):
    """How a limiter is named where a layer refuses its form, and what to give instead:
    ``what`` (``"a Redis limiter on a synchronous client"``) and ``instead`` (``"give it an
    asyncio client (redis.asyncio.Redis)"``)."""

    what: str
    instead: str


@runtime_checkable
class Blocking(Protocol):
    """A synchronous limiter whose calls wait on the network (a store behind a server). On an
    event loop each call would stall every request of the worker, so the ASGI forms refuse it
    when they are made, in the words of ``blocks``."""

    @property
    def blocks(self) -> Misfit: ...


@runtime_checkable
class Awaiting(Protocol):
    """An asyncio limiter that says, in ``awaits``, how the synchronous forms (WSGI, a
    synchronous view) name it where they refuse it, and what to give them instead. Every
    asyncio limiter is refused there (nothing could await it); one without ``awaits`` is
    named "an asyncio limiter"."""

    @property
    def awaits(self) -> Misfit: ...


@runtime_checkable
class RateStore(Protocol):
    """Where the limits of a rate given in place of a limiter are kept (the web forms'
    ``store=``): ``keyed_limiter`` makes one limit per key of the rate (``"100/minute"``,
    ``10``, a ``Fraction``) with its ``burst`` (``None``: the rate's default), kept under
    ``name`` (the same in every worker of an application). ``named`` is how an error about a
    limit made here names the store (``"the Redis client"``), or ``None`` where it names the
    parameter the rate was given as."""

    @property
    def named(self) -> str | None: ...

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any: ...


@runtime_checkable
class InFlightStore(Protocol):
    """A :class:`RateStore` that also keeps in-flight limits: ``keyed_in_flight`` makes one
    limit of ``limit`` seats per key (a
    :class:`~protocol_in_code.qos.interfaces.KeyedInFlightLimiter`, or its asyncio form), kept
    under ``name`` (the same in every worker of an application), whose limit is ``limit`` from
    then on, whatever an earlier limiter of that name kept. The web forms ask it for an int
    given as ``max_in_flight``; a store that is not one refuses such an int."""

    def keyed_in_flight(self, limit: int, name: str) -> Any: ...
