"""What was configured: the keywords every form takes, declared once, and the record of them.

The ASGI and WSGI middleware and the three framework forms take the same keywords. Each is
declared once, in :class:`ViewKeywords` (what every form takes) and
:class:`MiddlewareKeywords` (with what only the middleware take), and each form's signature
says ``**options: Unpack[...]`` of one of them, so that a type checker knows every keyword and
its type, and refuses a misspelled one. :func:`spelled_out` shows the same keywords to
``inspect`` (``help()``, an IDE that reads signatures at run time). What a form is given
becomes one :class:`Options`, checked where it is made; the rules are built from that record.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypedDict, TypeVar

from protocol_in_code.qos._http.keys import CostFunction, KeyFunction, RequestInfo
from protocol_in_code.qos._http.stores import Store, has_rate, is_rate
from protocol_in_code.qos._http.told import DecisionHook
from protocol_in_code.qos._keywords import spell_out
from protocol_in_code.qos.interfaces import (
    AsyncInFlightLimiter,
    AsyncKeyedInFlightLimiter,
    InFlightLimiter,
    KeyedInFlightLimiter,
)

#: An in-flight limiter of any of the four kinds (see :mod:`.seats`).
InFlight: TypeAlias = (
    InFlightLimiter
    | KeyedInFlightLimiter[Any]
    | AsyncInFlightLimiter
    | AsyncKeyedInFlightLimiter[Any]
)


@dataclass(frozen=True)
class Route:
    """A limit for part of an application: requests whose path starts with ``prefix``.

    ``prefix`` matches whole path segments (``"/api"`` matches ``/api`` and ``/api/users``,
    not ``/apiary``). ``methods`` (say ``{"POST"}``) restricts the route to those methods;
    ``None`` is every method. GET brings HEAD with it: frameworks answer HEAD with the GET
    handler, so ``{"GET"}`` limits (or exempts) both. ``cost`` overrides the middleware's cost
    function for this route; ``name`` is the policy name the RateLimit fields give (the
    prefix, by default, percent-encoded where it is not ASCII); ``unit`` is its quota unit,
    ``qu`` (the middleware's ``quota_unit`` by default). ``limiter`` ``None`` exempts the
    route. ``prefix`` is written as the wrapped application writes its own routes: relative
    to where it is mounted (``Mount("/v1", ...)``, ``uvicorn --root-path``, ``SCRIPT_NAME``),
    so ``Route("/upload")`` limits ``/v1/upload`` in an application mounted at ``/v1``. Paths
    are matched as the client sent them, decoded from UTF-8, under WSGI as under ASGI, after
    the normalisation routers apply (repeated slashes merged, dot segments resolved), and
    methods in any case (see :func:`routed`).
    """

    prefix: str
    limiter: Any
    methods: Iterable[str] | None = None
    cost: CostFunction | None = None
    name: str | None = None
    unit: str | None = None


class CommonKeywords(TypedDict, total=False):
    """The keywords of every form, but for the functions of the request (whose types the FastAPI
    dependency widens): what each means is said by
    :class:`protocol_in_code.qos.asgi.RateLimitMiddleware`."""

    burst: int | None
    store: Any
    trusted_proxies: Iterable[str]
    forwarded_header: str
    name: str
    headers_on_allowed: bool
    legacy_headers: bool
    partition_secret: bytes | None
    quota_unit: str | None
    problem_json: bool
    enforce: bool
    on_decision: DecisionHook | None
    on_decision_key: bool
    max_in_flight: int | InFlight | None


class ViewKeywords(CommonKeywords, total=False):
    """The keywords of a limit declared on a view (Flask's and Django's ``limit``)."""

    key: KeyFunction | None
    cost: CostFunction | None
    plan: Callable[[RequestInfo], str] | None


class MiddlewareKeywords(ViewKeywords, total=False):
    """The keywords of the middleware (ASGI, WSGI, Django's): a view's, and ``routes``,
    ``exempt`` and ``stack``."""

    routes: Iterable[Route]
    exempt: Callable[[RequestInfo], bool] | Iterable[str] | None
    stack: bool


@dataclass(frozen=True)
class Options:
    """Everything a form was given: its ``limiter`` and its keywords, each checked here alone
    (what depends on the limiters is checked by :class:`~.rules.Rules`). A keyword not given
    has its default here, the one every form has. ``routes`` is kept as a tuple, and
    :attr:`where` is the store, checked."""

    limiter: Any = None
    burst: int | None = None
    store: Any = None
    routes: Iterable[Route] = ()
    key: KeyFunction | None = None
    cost: CostFunction | None = None
    exempt: Callable[[RequestInfo], bool] | Iterable[str] | None = None
    trusted_proxies: Iterable[str] = ()
    forwarded_header: str = "X-Forwarded-For"
    name: str = "default"
    headers_on_allowed: bool = True
    legacy_headers: bool = False
    partition_secret: bytes | None = None
    quota_unit: str | None = None
    problem_json: bool = False
    enforce: bool = True
    on_decision: DecisionHook | None = None
    on_decision_key: bool = False
    plan: Callable[[RequestInfo], str] | None = None
    stack: bool = False
    max_in_flight: int | InFlight | None = None
    #: Where a rate's limits are kept: the store given, checked.
    where: Store = field(init=False, repr=False)

    @property
    def keeps_seats(self) -> bool:
        """Whether ``max_in_flight`` is a number of seats, kept in ``store=`` as a rate's
        limits are (rather than an in-flight limiter, which keeps its own)."""
        seats = self.max_in_flight
        return isinstance(seats, int) and not isinstance(seats, bool)

    def __post_init__(self) -> None:
        routes = self.routes
        if isinstance(routes, Route):
            raise TypeError("routes must be a list of Route, not a single Route")
        routes = tuple(routes)
        object.__setattr__(self, "routes", routes)
        seats = self.max_in_flight
        if isinstance(seats, (bool, float, str)):
            raise TypeError(
                f"max_in_flight must be an int (seats per client) or an in-flight limiter, "
                f"not {seats!r}"
            )
        if isinstance(seats, int) and seats < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {seats}")
        if self.store is not None and not has_rate(self.limiter) and not self.keeps_seats:
            if not any(is_rate(route.limiter) for route in routes if isinstance(route, Route)):
                raise TypeError(
                    "store= says where a rate's limits ('100/minute') and the seats of an int "
                    "max_in_flight are kept: with limiters given, leave it out (each limiter "
                    "keeps its own state)"
                )
        object.__setattr__(self, "where", Store.of(self.store))
        for parameter in ("key", "cost", "plan"):
            function = getattr(self, parameter)
            if function is not None and not callable(function):
                raise TypeError(f"{parameter} must be a function of the request, not {function!r}")
        if self.on_decision is not None and not callable(self.on_decision):
            raise TypeError(
                f"on_decision must be a function of a DecisionEvent, not {self.on_decision!r}"
            )
        secret = self.partition_secret
        if secret is not None and (not isinstance(secret, bytes) or len(secret) < 16):
            raise ValueError("partition_secret must be at least 16 bytes")

    @classmethod
    def given(cls, caller: str, keywords: Any, limiter: Any, options: Mapping[str, Any]) -> Options:
        """The options ``caller`` was given: ``limiter``, and ``options``, each a key of
        ``keywords`` (the ``TypedDict`` its signature unpacks). A name that is not one raises
        ``TypeError`` naming it, and the option it may be a misspelling of."""
        known = sorted(keywords.__annotations__)
        for name in options:
            if name not in keywords.__annotations__:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else "they are " + ", ".join(known)
                raise TypeError(f"{caller}: {name!r} is not an option; {hint}")
        return cls(limiter, **options)


Function = TypeVar("Function", bound=Callable[..., Any])


def spelled_out(keywords: Any) -> Callable[[Function], Function]:
    """Show ``inspect`` a function's ``**options: Unpack[keywords]`` as the keywords they are.

    The function's ``__signature__`` (what ``inspect.signature`` and ``help()`` read) lists,
    in place of ``**options``, one keyword-only parameter for each key of ``keywords``, with
    the key's annotation and the default :class:`Options` gives it. The function itself is
    given back as it is, not wrapped: a form that reads its caller's frame (FastAPI's
    ``RateLimit`` names its table after it) still finds it one frame up.
    """
    defaults = {one.name: one.default for one in dataclasses.fields(Options) if one.init}

    def spell(function: Function) -> Function:
        return spell_out(
            function,
            (
                (name, getattr(hint, "__forward_arg__", hint), defaults[name])
                for name, hint in keywords.__annotations__.items()
            ),
        )

    return spell
