"""How many at once: a form's in-flight limit (``max_in_flight=``), its seats taken and refused.

A rate limit says how often a client may start a request; an in-flight limit says how many of
its requests may be running at once. ``max_in_flight`` is an int (that many seats per client,
keyed as the rate limits key clients, kept where ``store=`` keeps the rates: a keyed in-flight
limiter the store makes, :meth:`~.stores.Store.in_flight`) or any in-flight limiter of
:mod:`protocol_in_code.qos.interfaces`: a keyed one is per client, a one-key one is one limit
for every client together. It applies to the whole
form (every request the middleware does not exempt, every request of a decorated view), not
route by route: a route that needs seats of its own is a view with its own ``limit``.

The order, for one request (:func:`~.decide.admit`):

1. the exemption function, then the seat's key (the key function, which may raise), read
   before anything is spent;
2. the rate limits decide. A request they refuse takes no seat;
3. a seat is taken, never waited for (``try_acquire``). A request that finds none is refused
   (:meth:`Seats.refusal`), and the tokens the rate limits took for it are **not** given back:
   the client sent the request, and a client that opens more requests than its seats should
   still find its rate limit paced by them (retrying at once, for free, would be the flood the
   limits are there to stop); giving back would also be one more call to the store, not
   atomic with the first.

The refusal: ``429 Too Many Requests`` for a seat per client (this client has too many
requests running), ``503 Service Unavailable`` for one limit for everyone (the server, not
this client, is full). Neither carries ``Retry-After``: a seat comes back when some request
ends, and nothing here knows when that is. The RateLimit fields are those of the rate limits
that allowed the request (their quota is what it is); no policy of them describes seats.

The shells hold the lease until the response has been sent or the client has gone, and give it
back then (see :mod:`protocol_in_code.qos.asgi` and :mod:`protocol_in_code.qos.wsgi`), with
:func:`give_back` or :func:`give_back_async`: a lease that cannot be given back (a Redis lease
that had lapsed, a store that cannot be reached) is logged, never raised into the application
or the server, since its response has been sent or its own error is the one to see.

Told: with ``on_decision``, each seat asked for is a decision of its own, told as a rate
limit's are (:mod:`.told`), under the policy :func:`seat_policy` names, with no plan and no
route (the limit is the whole form's), the in-flight limiter as ``limiter``, and the seat's key
where ``on_decision_key=True`` asks for it. A seat taken is ALLOWED with no wait; a seat not
found is REFUSED with a wait of 0, as in a stack (:mod:`protocol_in_code.qos._seat_parts`):
nothing can promise when a seat comes free. Under ``enforce=False`` the refusal is told too
(``enforced`` false) and the request goes on. A request refused by the rate limits, exempt, or
under a key function that says no limit applies asks for no seat, and nothing is told of seats.
Every seat taken is told, with one event made once (as every allowed rate decision is), so a
metrics hook counts it at the cost of a call, and meets the limiter on the first request.
"""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from protocol_in_code._native import Decision, LimitOutcome
from protocol_in_code.qos._http.fields import (
    DENIED_STATUS,
    PROBLEM_JSON,
    REASONS,
    REFUSED_STATUS,
    TEXT_PLAIN,
    Verdict,
    refusal_body,
)
from protocol_in_code.qos._http.keys import UNKNOWN_CLIENT, Key, RequestInfo, key_of
from protocol_in_code.qos._http.kinds import in_flight_kind
from protocol_in_code.qos._http.options import Options
from protocol_in_code.qos._http.told import DecisionHook, Tell, teller
from protocol_in_code.qos.capabilities import Misfit

_log = logging.getLogger("protocol_in_code.qos")

#: The key of a request to which the key function says no limit applies: it takes no seat.
UNSEATED = object()

#: What the hook is told of a seat taken, and of a seat not found (see the module's doc).
SEATED = Decision(LimitOutcome.ALLOWED, 0, 0)
NO_SEAT = Decision(LimitOutcome.REFUSED, 0, 0)


def seat_policy(name: str) -> str:
    """The policy a form's in-flight limit is told to ``on_decision`` under: ``"in-flight"``,
    or ``"<name>-in-flight"`` for a form given a ``name`` of its own (``"search-in-flight"``),
    so that each named view's seats are counted and gauged apart from another's (metrics label
    by policy and route, and a form's seats have no route)."""
    return "in-flight" if name == "default" else f"{name}-in-flight"


@dataclass(frozen=True)
class Seats:
    """A form's in-flight limit, checked once: the limiter, what kind it is, and the status its
    refusal is sent with."""

    limiter: Any
    keyed: bool
    awaited: bool
    #: The limiter's own key check, where it takes only some keys (see :mod:`.kinds`).
    key_refusal: Any
    status: int
    #: With ``on_decision``, what tells it of each seat asked for (:meth:`told`); ``None``
    #: without a hook, which then costs nothing.
    tell: Tell | None = None
    #: For a synchronous limiter whose calls wait on the network, how a form on the event loop
    #: refuses it (see :mod:`.kinds`).
    blocks: Misfit | None = None
    #: How an error about these seats names them: ``max_in_flight``, or the store that made
    #: them (``store (the Redis client for max_in_flight)``).
    parameter: str = "max_in_flight"

    @classmethod
    def of(
        cls, options: Options, table: str, *, allow_async: bool, on_event_loop: bool
    ) -> Seats | None:
        """The seats of ``options.max_in_flight`` (``None`` where not given; an int checked by
        :class:`~.options.Options`), checked: ``TypeError`` naming the parameter and the value.
        An int is made in the form's store (:meth:`~.stores.Store.in_flight`), named after
        ``table`` and the form's name."""
        given = options.max_in_flight
        if given is None:
            return None
        if isinstance(given, int):
            parameter = options.where.parameter(given, "max_in_flight")
            try:
                given = options.where.in_flight(given, table, seat_policy(options.name))
            except (TypeError, ValueError) as error:
                raise type(error)(f"{parameter}: {error}") from error
        else:
            parameter = "max_in_flight"
        kind = in_flight_kind(
            given, parameter, allow_async=allow_async, on_event_loop=on_event_loop
        )
        status = DENIED_STATUS if kind.keyed else REFUSED_STATUS
        return cls(
            given,
            kind.keyed,
            kind.awaited,
            kind.key_refusal,
            status,
            blocks=kind.blocks,
            parameter=parameter,
        )

    def told(self, on_decision: DecisionHook, options: Options) -> Seats:
        """These seats, telling ``on_decision`` of each seat asked for (see the module's doc)."""
        tell = teller(
            on_decision,
            policy=seat_policy(options.name),
            plan=None,
            route=None,
            limiter=self.limiter,
            enforced=bool(options.enforce),
            with_key=bool(options.on_decision_key) and self.keyed,
        )
        return replace(self, tell=tell)

    def key(self, options: Options, info: RequestInfo) -> Key | object | None:
        """The request's seat key: the rate limits' key (the key function's, else the client's
        address), ``None`` for a limiter of one limit, :data:`UNSEATED` where the key function
        says no limit applies to the request."""
        if not self.keyed:
            return None
        function = options.key
        if function is None:
            return info.client if info.client is not None else UNKNOWN_CLIENT
        key = key_of(function, self.key_refusal, info)
        return UNSEATED if key is None else key

    def seated(
        self, options: Options, verdict: Verdict, key: Any, lease: Any
    ) -> tuple[Verdict, Any]:
        """The answer to a request the rate limits allowed (``verdict``), once a seat was asked
        for under ``key`` (:meth:`key`'s): the verdict and the ``lease``, or where ``lease`` is
        ``None`` the :meth:`refusal` and no lease; the hook told either way."""
        tell = self.tell
        if lease is None:
            if tell is not None:
                tell(NO_SEAT, key)
            return self.refusal(options, verdict), None
        if tell is not None:
            tell(SEATED, key)
        return verdict, lease

    def refusal(self, options: Options, verdict: Verdict) -> Verdict:
        """The answer to a request the rate limits allowed (with ``verdict``'s fields) that
        found no seat: :attr:`status`, no ``Retry-After``, and a line of text or, with
        ``problem_json``, a problem document of no more meaning than its status
        (``about:blank``, RFC 9457), since no policy of the RateLimit fields is at fault.
        Under ``enforce=False`` the request goes on, with no seat."""
        fields = verdict[1]
        if not options.enforce:
            return verdict
        if not options.problem_json:
            return self.status, fields, TEXT_PLAIN, refusal_body(self.status)
        problem = {
            "type": "about:blank",
            "title": REASONS[self.status],
            "status": self.status,
            "detail": (
                "too many requests of this client in flight at once"
                if self.keyed
                else "too many requests in flight at once"
            ),
        }
        return self.status, fields, PROBLEM_JSON, json.dumps(problem).encode("utf-8")


def give_back(lease: Any) -> None:
    """Release a request's ``lease`` (a synchronous one) once its response is done with; an
    error is logged (``protocol_in_code.qos``), not raised."""
    try:
        lease.release()
    except Exception:
        _log_failed_release()


async def give_back_async(lease: Any) -> None:
    """:func:`give_back` for the asyncio shells: a release that returns an awaitable (an
    :class:`~protocol_in_code.qos.interfaces.AsyncLease`'s) is awaited."""
    try:
        released = lease.release()
        if inspect.isawaitable(released):
            await released
    except Exception:
        _log_failed_release()


def _log_failed_release() -> None:
    _log.exception(
        "a request's in-flight seat could not be given back (a lease that had lapsed, or a "
        "store that could not be reached): the response was answered all the same"
    )
