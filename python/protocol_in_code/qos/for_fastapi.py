"""A limit declared where the view is, for FastAPI: a dependency.

:class:`RateLimit` is a FastAPI dependency (and a Starlette one: all it reads is a Starlette
``Request``). It decides each request of the route it is given to exactly as the ASGI
middleware (:mod:`protocol_in_code.qos.asgi`) would, from the same code: a refusal raises
:class:`RateLimitExceeded`, an ``HTTPException`` of status 429 (or 503) with ``Retry-After``
and the RateLimit fields, and an allowed request's response carries the fields::

    from fastapi import Depends, FastAPI
    from protocol_in_code.qos.for_fastapi import RateLimit

    app = FastAPI()

    @app.get("/search", dependencies=[Depends(RateLimit("5/minute"))])
    async def search() -> dict[str, str]:
        return {"results": "..."}

The module is named ``for_fastapi``, not ``fastapi``, so that ``from protocol_in_code.qos
import for_fastapi`` never hides the framework's own package in the application's namespace.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

import fastapi
from fastapi.params import Depends
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from protocol_in_code.qos._http.addresses import client_address
from protocol_in_code.qos._http.decide import admit_async, decide_async
from protocol_in_code.qos._http.keys import CostFunction, KeyFunction, RequestInfo, function_name
from protocol_in_code.qos._http.options import CommonKeywords, Options, spelled_out
from protocol_in_code.qos._http.rules import view_rules
from protocol_in_code.qos._http.seats import give_back_async
from protocol_in_code.qos._http.stores import table_name
from protocol_in_code.qos._http.told import DecisionEvent
from protocol_in_code.qos.asgi import _path

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DecisionEvent",
    "RateLimit",
    "RateLimitExceeded",
    "RequestInfo",
    "rate_limit_exceeded_handler",
]


class RateLimitExceeded(HTTPException):
    """A refusal: ``status_code`` 429 (503 when a keyed table is full), ``headers`` with
    ``Retry-After`` and the RateLimit fields.

    FastAPI answers it as any ``HTTPException``: its ``detail`` (the reason, ``"Too Many
    Requests"``) as JSON. :func:`rate_limit_exceeded_handler` answers it with the very body
    the middleware sends instead (a line of text, or with ``problem_json=True`` the problem
    document), in ``body`` and ``content_type``.
    """

    def __init__(
        self, status_code: int, headers: dict[str, str], content_type: str, body: bytes
    ) -> None:
        super().__init__(status_code, body.decode("utf-8").strip(), headers)
        self.content_type = content_type
        self.body = body


async def rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """An exception handler that answers :class:`RateLimitExceeded` as the middleware would::

    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    """
    if not isinstance(exc, RateLimitExceeded):
        raise exc
    return Response(exc.body, exc.status_code, exc.headers, media_type=exc.content_type)


def _table(name: str, caller: FrameType) -> str:
    """The name a dependency's rates are kept under, from where it is written: its module and
    ``name`` when it has a name of its own (``view.shop.api.search``), else its module and
    line (``view.shop.api.line42``). A dependency knows no view of its own (one may serve
    several routes); its module and name are the same in every worker and after a restart."""
    module = caller.f_globals.get("__name__") or "-"
    if name != "default":
        return table_name("view", module)
    return table_name("view", module, f"line{caller.f_lineno}")


class DependencyKeywords(CommonKeywords, total=False):
    """The keywords of :class:`RateLimit`: a view's, with ``key``, ``cost`` and ``plan`` each a
    function of the request or a FastAPI dependency (``Depends(current_user_id)``)."""

    key: KeyFunction | Depends | None
    cost: CostFunction | Depends | None
    plan: Callable[[RequestInfo], str] | Depends | None


#: The keywords a dependency may give: ``key``, ``cost`` and ``plan``.
_DEPENDABLE = frozenset(DependencyKeywords.__annotations__) - set(CommonKeywords.__annotations__)


class RateLimit:
    """A FastAPI dependency limiting the requests of the routes it is given to.

    ``limiter`` is any limiter of :mod:`protocol_in_code.qos.interfaces` (an asyncio one is
    awaited; an in-process one never sleeps, so it is called directly; a Redis limiter on a
    synchronous client would block the event loop, and is refused), or a rate
    (``"5/minute"``) with an optional ``burst``: one limit per client, kept in ``store``. By
    default (``"shared"``) that is one limit for every worker process of the host, in a
    ``SharedKeyedRateLimiter`` named after where the dependency is written: its module and
    ``name`` (give each a name of its own, ``RateLimit("5/minute", name="search")``, so its
    table keeps its count across edits), or without one its module and line.
    ``store="process"`` keeps a limit in each process, and a Redis client (asyncio) one for
    every host. Or a mapping of policy names to limiters or rates, stacked on the route and
    decided together (taken from all or none). The other keywords
    (:class:`DependencyKeywords`) are the ASGI middleware's, but for ``routes``, ``exempt`` and
    ``stack``. The request's path, ``info.path``, is the middleware's: relative to where the
    application is mounted.

    ``key``, ``plan`` and ``cost`` are each a function of the request (a :class:`RequestInfo`,
    whose ``request`` is the Starlette ``Request``), or a FastAPI dependency,
    ``Depends(current_user_id)``, whose result is the key (the plan, the cost): FastAPI
    resolves it with the route's own dependencies (a dependency the route uses too is called
    once per request), and one that fails (no credentials) answers before anything is
    spent. A key of ``None`` means that the limit does not apply to the request.

    ``max_in_flight`` is how many requests may be running at once (an int, per client, or an
    in-flight limiter), as for the middleware; the dependency is then one with yield, and
    FastAPI gives the seat back once the response has been sent (streamed or not), after the
    route's background tasks.

    One instance is one limit: given to several routes, they share it. The fields of an allowed
    request are added to the ``Response`` FastAPI hands the dependency, which it merges into
    the route's response unless the route returns a ``Response`` of its own.
    """

    #: What FastAPI reads to know what to give :meth:`__call__`: the request and response,
    #: and the dependencies given as ``key``, ``plan`` or ``cost``.
    __signature__: inspect.Signature

    def __new__(cls, limiter: Any, **options: Unpack[DependencyKeywords]) -> RateLimit:
        """A :class:`RateLimit`, or with ``max_in_flight`` a ``_SeatedRateLimit``: FastAPI reads
        a dependency's class to know one with yield, which holds the seat until the response
        has been sent."""
        if options.get("max_in_flight") is None or cls is not RateLimit:
            return super().__new__(cls)
        if _FASTAPI_VERSION < _YIELD_ENDS_AFTER_THE_RESPONSE:
            raise RuntimeError(
                f"max_in_flight: FastAPI {fastapi.__version__} ends a dependency with yield "
                "before a streamed body is sent, so the seat would come back too early; use "
                "FastAPI 0.118 or later, or the ASGI middleware "
                "(protocol_in_code.qos.asgi.RateLimitMiddleware) with max_in_flight"
            )
        return super().__new__(_SeatedRateLimit)

    @spelled_out(DependencyKeywords)
    def __init__(self, limiter: Any, **options: Unpack[DependencyKeywords]) -> None:
        depended = {
            name: given
            for name, given in options.items()
            if name in _DEPENDABLE and isinstance(given, Depends)
        }
        resolved = {name: _resolved(name, marker) for name, marker in depended.items()}
        self.__signature__ = inspect.Signature(
            [
                inspect.Parameter("request", _POSITIONAL, annotation=Request),
                inspect.Parameter("response", _POSITIONAL, annotation=Response),
                *(
                    inspect.Parameter(name, _KEYWORD, default=marker, annotation=Any)
                    for name, marker in depended.items()
                ),
            ]
        )
        given = Options.given("RateLimit", DependencyKeywords, limiter, {**options, **resolved})
        self.rules, self.rule = view_rules(
            given,
            allow_async=True,
            table=_table(given.name, sys._getframe(1)),
            on_event_loop=True,
        )
        self.limiter = self.rule.limiter

    async def __call__(self, request: Request, response: Response, **depended: Any) -> None:
        """Decide ``request``; ``depended`` are the results of the dependencies given as
        ``key``, ``plan`` or ``cost``, by their names."""
        await self._admit(request, response, depended)

    async def _admit(self, request: Request, response: Response, depended: Any) -> Any:
        """Decide ``request`` (and seat it, under an in-flight limit): raise the refusal, or
        add the fields to ``response`` and answer with the lease to give back (``None`` for
        none)."""
        rules = self.rules
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            if name in headers:
                headers[name] += ", " + value
            else:
                headers[name] = value
        peer = (request.client.host or None) if request.client else None
        address = client_address(peer, headers, rules.proxies, rules.header)
        method, path = request.method, _path(request.scope)
        if depended:
            info: RequestInfo = _Depended(method, path, address, headers, request, depended)
        else:
            info = RequestInfo(method, path, address, headers, request)
        lease = None
        if rules.seats is None:
            verdict = await decide_async(rules, rules.rules, info)
        else:
            verdict, lease = await admit_async(rules, rules.rules, info)
        status, fields, content_type, body = verdict
        if status:
            raise RateLimitExceeded(status, dict(fields), content_type, body)
        for name, value in fields:
            response.headers.append(name, value)
        return lease


# inspect reads a class's signature from its __new__ before its __init__: spelled out there too.
spelled_out(DependencyKeywords)(RateLimit.__new__)


class _SeatedRateLimit(RateLimit):
    """A :class:`RateLimit` with ``max_in_flight``: a dependency with yield, so that FastAPI
    gives the seat back after the response has been sent (a streamed one at its end, and after
    Starlette's background tasks, which run before it), or when the endpoint raises."""

    async def __call__(  # type: ignore[override]
        self, request: Request, response: Response, **depended: Any
    ) -> AsyncIterator[None]:
        lease = await self._admit(request, response, depended)
        try:
            yield
        finally:
            if lease is not None:
                await give_back_async(lease)


#: The first FastAPI that ends a dependency with yield after the response has been sent,
#: streamed bodies included (before it, 0.106 to 0.117 ended it before the body was sent).
_YIELD_ENDS_AFTER_THE_RESPONSE = (0, 118)
_FASTAPI_VERSION = tuple(int(part) for part in fastapi.__version__.split(".")[:2])

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


@dataclass(frozen=True)
class _Depended(RequestInfo):
    """A request, and the results of the dependencies given as ``key``, ``plan`` or ``cost``."""

    depended: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _resolved(name: str, marker: Depends) -> Callable[[RequestInfo], Any]:
    """The function of the request that gives what FastAPI resolved ``marker`` to for it:
    named after the dependency, so that an error about its result names the dependency."""
    dependency = marker.dependency
    if dependency is None:
        raise TypeError(
            f"{name}=Depends() needs its dependency: Depends(current_user_id), a function "
            f"that returns the {name}"
        )

    def resolved(info: RequestInfo) -> Any:
        assert isinstance(info, _Depended)  # given to the rules of a RateLimit with it only
        return info.depended[name]

    resolved.__qualname__ = f"Depends({function_name(dependency)})"
    resolved.__module__ = ""  # the dependency's is in the name
    return resolved
