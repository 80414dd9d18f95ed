"""A limit declared where the view is, for Flask: a view decorator.

:func:`limit` decides each request of the view it decorates exactly as the WSGI middleware
(:mod:`protocol_in_code.qos.wsgi`) would, from the same code: a refused request is answered
with 429 (or 503), ``Retry-After`` and the RateLimit fields, without running the view; an
allowed one runs it, and its response carries the fields::

    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)

    @app.post("/login")
    @limit("5/minute")
    def login() -> dict[str, bool]:
        return {"ok": True}

The decorator goes *under* the route's, so that Flask registers the limited view. The module is
named ``for_flask``, not ``flask``, so that ``from protocol_in_code.qos import for_flask``
never hides the framework's own package in the application's namespace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flask import Response, current_app, request

from protocol_in_code.qos._http import (
    CostFunction,
    DecisionEvent,
    DecisionHook,
    KeyFunction,
    RequestInfo,
    Rule,
    Rules,
    decide,
    view_rules,
)
from protocol_in_code.qos.wsgi import _info, _path

__all__ = ["DecisionEvent", "RequestInfo", "limit"]

View = TypeVar("View", bound=Callable[..., Any])


def limit(
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
) -> Callable[[View], View]:
    """A decorator limiting the view it decorates.

    ``limiter`` is any synchronous limiter of :mod:`protocol_in_code.qos.interfaces`, or a
    rate (``"5/minute"``) with an optional ``burst``, which makes a ``KeyedRateLimiter``: one
    limit per client. A mapping of policy names to limiters or rates stacks them on the
    view, decided together (taken from all or none). The other parameters are the WSGI
    middleware's (``key``, ``cost``, ``trusted_proxies``, ``forwarded_header``, ``name``,
    ``headers_on_allowed``,
    ``legacy_headers``, ``partition_secret``, ``quota_unit``, ``problem_json``, ``enforce``,
    ``on_decision``, ``on_decision_key``). The peer is ``REMOTE_ADDR``, as for the middleware.
    The functions given as ``key``, ``cost`` and ``plan`` are called in the request's context
    (``flask.g``, Flask-Login's ``current_user``), and ``info.request`` is the
    ``flask.Request``.

    One decorator is one limit: a decorator made once and put on several views limits them
    together; ``limit(...)`` written on each limits each on its own.
    """
    rules, rule = view_rules(
        limiter,
        allow_async=False,
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

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            return _limited(rules, rule, view, args, kwargs)

        limited.limiter = rule.limiter  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate


def _limited(
    rules: Rules, rule: Rule, view: Callable[..., Any], args: Any, kwargs: Any
) -> Response:
    environ = request.environ
    method, path = environ.get("REQUEST_METHOD", "GET"), _path(environ)
    info = _info(rules, environ, method, path, request._get_current_object())  # type: ignore[attr-defined]
    verdict = decide(rules, rule, info)
    if verdict.status:
        return Response(
            verdict.body, verdict.status, verdict.fields, content_type=verdict.content_type
        )
    response: Response = current_app.make_response(view(*args, **kwargs))
    for field, value in verdict.fields:
        response.headers.add(field, value)
    return response
