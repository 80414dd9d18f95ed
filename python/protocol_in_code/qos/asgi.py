"""Rate limits in front of any ASGI application, with the exact wait said in HTTP.

:class:`RateLimitMiddleware` is plain ASGI 3, importing no framework, so it serves Starlette,
FastAPI, Litestar, Quart or a bare ASGI callable alike. For each HTTP request it asks the
limiter once; an allowed request goes on to the application with the RateLimit fields added to
its response, a refused one is answered here (``429`` with ``Retry-After``; see
:mod:`protocol_in_code.qos._http` for every status and field)::

    from fastapi import FastAPI
    from protocol_in_code.qos.asgi import RateLimitMiddleware
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=KeyedRateLimiter("10/second", burst=20))

Never blocking the event loop: an in-process limiter's ``check`` is one native call that
never sleeps, so it is called directly; an asyncio Redis limiter's is awaited. A refusal is
answered at once, however long the wait: nothing here sleeps.

WebSocket and lifespan scopes pass through untouched, unless ``websocket=True``, which limits
each WebSocket handshake like a request (a refused one is closed before it is accepted, with
code 1008, policy violation).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, TypeAlias

from protocol_in_code.qos._http import (
    CostFunction,
    DecisionEvent,
    DecisionHook,
    KeyFunction,
    RequestInfo,
    Route,
    Rules,
    Verdict,
    answer,
    ask,
    client_address,
    decide_asked_async,
    decide_stacked_async,
    prepared,
    refusal,
)

__all__ = ["DecisionEvent", "RateLimitMiddleware", "RequestInfo", "Route"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def _peer(scope: Scope) -> str | None:
    """The peer's address; ``None`` for a peer on a Unix socket, to which servers give no
    ``client`` (uvicorn ``--uds``) or, some, an empty host."""
    client = scope.get("client")
    return (client[0] or None) if client else None


class RateLimitMiddleware:
    """Limit the requests that reach ``app``; see the module's help for the whole picture.

    ``limiter`` is any of our limiters: a ``RateLimiter`` (one limit for everyone), a
    ``KeyedRateLimiter`` (one per client), or a Redis limiter, synchronous or asyncio.
    ``routes`` gives other limits to parts of the application (the first matching
    :class:`Route` wins; ``limiter`` covers the rest, and may be ``None``). With
    ``stack=True`` every matching route's limit *and* ``limiter`` apply to a request, decided
    together: taken from all of them or from none (see :mod:`protocol_in_code.qos.stack`).

    * ``key(info)``: a keyed limiter's key, by default the client's address: the peer, or,
      when the peer is one of ``trusted_proxies`` (addresses, networks, and ``"unix"`` for a
      peer on a Unix socket), the address it forwarded in ``forwarded_header``
      (``"X-Forwarded-For"`` or ``"Forwarded"``), normalised (``::ffff:192.0.2.1`` is
      ``192.0.2.1``, ``2001:DB8::1`` is ``2001:db8::1``, a port is dropped). A key is a value
      (an API key, ``("user", 42)``, an int: ``str``, ``bytes``, ``int``, ``float`` and
      tuples of them); a Redis limiter takes ``str`` or ``bytes``. Anything else (a user
      object, a bool, NaN) raises ``TypeError`` naming the key function, before anything is
      spent. ``None`` means that the limit does not apply to the request. ``info.request``
      is the ASGI ``scope``.
    * ``cost(info)``: tokens the request takes (1 by default).
    * ``exempt``: path prefixes, or a function of the request, never limited.
    * ``name``: the policy name in the RateLimit fields (bands are ``name-1``, ``name-2``...
      when there are several).
    * ``headers_on_allowed``: add the RateLimit fields to allowed responses too (default);
      ``legacy_headers`` adds ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``.
    * ``partition_secret``: the key of the hash that makes ``pk``; give the same one to every
      worker so that a client's ``pk`` is the same whichever answers. Random by default.
    * ``quota_unit``: the unit of the quota, ``qu`` (``"content-bytes"``...): by default
      requests, or ``"units"`` where a ``cost`` function counts something else
      (``Route(unit=...)`` for a route's).
    * ``problem_json``: refusals carry ``application/problem+json`` bodies of the draft's
      problem types, naming the violated policies (off by default: a line of text).
    * ``enforce``: ``False`` decides, counts and sends the fields, but refuses nothing (shadow
      mode: a would-be refusal goes on to the application, without ``Retry-After``).
    * ``on_decision(event)``: called once per decision with a :class:`DecisionEvent` (policy,
      route, outcome, wait); ``on_decision_key=True`` adds the client's key to it.
      :mod:`protocol_in_code.qos.metrics` has such hooks for Prometheus and OpenTelemetry.
    * ``stack``: every matching limit applies (a global ``limiter``, a route's, a client's),
      decided together; the fields list every policy, and a refusal names every violated
      one. Policy names must then differ (``Route(name=...)``). A matching route whose
      limiter is ``None`` exempts the request from all of them.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: Any = None,
        *,
        routes: Iterable[Route] = (),
        key: KeyFunction | None = None,
        cost: CostFunction | None = None,
        exempt: Callable[[RequestInfo], bool] | Iterable[str] | None = None,
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
        stack: bool = False,
        websocket: bool = False,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, not {app!r}")
        self.app = app
        self.rules = Rules(
            limiter,
            routes=routes,
            key=key,
            cost=cost,
            exempt=exempt,
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
            stack=stack,
            allow_async=True,
        )
        self.websocket = bool(websocket)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and not (kind == "websocket" and self.websocket):
            await self.app(scope, receive, send)
            return
        rules = self.rules
        method = scope.get("method", "GET")
        # Under stack=True every rule that matches applies; otherwise the first.
        matched = rules.rules_for(method, scope["path"]) if rules.stack else None
        rule = None if matched is not None else rules.rule_for(method, scope["path"])
        if not matched and rule is None:
            await self.app(scope, receive, send)
            return
        info = _info(rules, scope, method)
        if rules.exempt is not None and rules.exempt(info):
            await self.app(scope, receive, send)
            return
        if matched:
            await self._answered(
                scope, receive, send, await decide_stacked_async(rules, matched, info)
            )
            return
        assert rule is not None  # a request no rule matched went on above
        # Whatever can fail is done before the limiter is asked, so a request that spent a
        # token is always answered.
        asked = prepared(rules, rule, info)
        if asked is None:  # the key function says this limit does not apply to the request
            await self.app(scope, receive, send)
            return
        rule, n, key, pk = asked
        if rule.leveled:  # a Redis limiter of several bands: its levels with its decision
            await self._answered(scope, receive, send, await decide_asked_async(rules, asked))
            return
        decision = ask(asked)
        if rule.awaited:
            decision = await decision
        status, fields = answer(rules, rule, decision, pk, key)
        if status:
            content_type, body = refusal(rules, rule, decision, status, n, key)
            await _refuse(scope, send, status, fields, content_type, body)
            return
        await self._with_fields(scope, receive, send, fields)

    async def _answered(self, scope: Scope, receive: Receive, send: Send, verdict: Verdict) -> None:
        """Send ``verdict``'s refusal, or pass the request on with its fields."""
        if verdict.status:
            await _refuse(
                scope, send, verdict.status, verdict.fields, verdict.content_type, verdict.body
            )
            return
        await self._with_fields(scope, receive, send, verdict.fields)

    async def _with_fields(
        self, scope: Scope, receive: Receive, send: Send, fields: list[tuple[str, str]]
    ) -> None:
        """Pass the request on, adding ``fields`` to its response."""
        if not fields or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields]

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_fields)


def _info(rules: Rules, scope: Scope, method: str) -> RequestInfo:
    """The request as the key, cost, plan and exemption functions see it."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        text = name.decode("latin-1").lower()
        if text in headers:
            headers[text] += ", " + value.decode("latin-1")
        else:
            headers[text] = value.decode("latin-1")
    return RequestInfo(
        method,
        scope["path"],
        client_address(_peer(scope), headers, rules.proxies, rules.forwarded_header),
        headers,
        scope,
    )


async def _refuse(
    scope: Scope,
    send: Send,
    status: int,
    fields: list[tuple[str, str]],
    content_type: str,
    body: bytes,
) -> None:
    """Answer a refused request here: a WebSocket handshake is closed (1008, policy
    violation) before it is accepted; an HTTP request gets ``status``, ``fields`` and ``body``."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields]
    raw.append((b"content-type", content_type.encode("latin-1")))
    raw.append((b"content-length", str(len(body)).encode("ascii")))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
