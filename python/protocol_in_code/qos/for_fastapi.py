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

from collections.abc import Callable, Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from protocol_in_code.qos._http import (
    CostFunction,
    DecisionEvent,
    DecisionHook,
    KeyFunction,
    RequestInfo,
    client_address,
    decide_async,
    view_rules,
)
from protocol_in_code.qos.asgi import _path

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


class RateLimit:
    """A FastAPI dependency limiting the requests of the routes it is given to.

    ``limiter`` is any limiter of :mod:`protocol_in_code.qos.interfaces` (an asyncio one is
    awaited; an in-process one never sleeps, so it is called directly), or a rate
    (``"5/minute"``) with an optional ``burst``, which makes a ``KeyedRateLimiter``: one limit
    per client; or a mapping of policy names to limiters or rates, stacked on the route and
    decided together (taken from all or none). The other parameters are the ASGI
    middleware's (``key``, ``cost``, ``trusted_proxies``, ``forwarded_header``, ``name``,
    ``headers_on_allowed``,
    ``legacy_headers``, ``partition_secret``, ``quota_unit``, ``problem_json``, ``enforce``,
    ``on_decision``, ``on_decision_key``). The request's path, ``info.path``, is the
    middleware's: relative to where the application is mounted.

    One instance is one limit: given to several routes, they share it. The fields of an allowed
    request are added to the ``Response`` FastAPI hands the dependency, which it merges into
    the route's response unless the route returns a ``Response`` of its own.
    """

    def __init__(
        self,
        limiter: Any,
        *,
        burst: int | None = None,
        key: KeyFunction | None = None,
        cost: CostFunction | None = None,
        trusted_proxies: Iterable[str] = (),
        forwarded_header: str = "X-Forwarded-For",
        name: str = "default",
        headers_on_allowed: bool = True,
        legacy_headers: bool = False,
        partition_secret: bytes | None = None,
        quota_unit: str | None = None,
        problem_json: bool = False,
        enforce: bool = True,
        on_decision: DecisionHook | None = None,
        on_decision_key: bool = False,
        plan: Callable[[RequestInfo], str] | None = None,
    ) -> None:
        self.rules, self.rule = view_rules(
            limiter,
            allow_async=True,
            burst=burst,
            key=key,
            cost=cost,
            trusted_proxies=trusted_proxies,
            forwarded_header=forwarded_header,
            name=name,
            headers_on_allowed=headers_on_allowed,
            legacy_headers=legacy_headers,
            partition_secret=partition_secret,
            quota_unit=quota_unit,
            problem_json=problem_json,
            enforce=enforce,
            on_decision=on_decision,
            on_decision_key=on_decision_key,
            plan=plan,
        )
        self.limiter = self.rule.limiter

    async def __call__(self, request: Request, response: Response) -> None:
        rules = self.rules
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            if name in headers:
                headers[name] += ", " + value
            else:
                headers[name] = value
        client = request.client
        peer = (client.host or None) if client else None
        info = RequestInfo(
            request.method,
            _path(request.scope),
            client_address(peer, headers, rules.proxies, rules.forwarded_header),
            headers,
        )
        verdict = await decide_async(rules, self.rule, info)
        if verdict.status:
            raise RateLimitExceeded(
                verdict.status, dict(verdict.fields), verdict.content_type, verdict.body
            )
        for name, value in verdict.fields:
            response.headers.append(name, value)
