"""Rate limits in front of any ASGI application, with the exact wait said in HTTP.

:class:`RateLimitMiddleware` is plain ASGI 3, importing no framework, so it serves Starlette,
FastAPI, Litestar, Quart or a bare ASGI callable alike. For each HTTP request it asks the
limiter once; an allowed request goes on to the application with the RateLimit fields added to
its response, a refused one is answered here (``429`` with ``Retry-After``; see
:mod:`protocol_in_code.qos._http.fields` for every status and field)::

    from fastapi import FastAPI
    from protocol_in_code.qos.asgi import RateLimitMiddleware
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    app = FastAPI()
    app.add_middleware(RateLimitMiddleware, limiter=KeyedRateLimiter("10/second", burst=20))

Never blocking the event loop: an in-process limiter's ``check`` is one native call that
never sleeps, so it is called directly; an asyncio Redis limiter's is awaited. A refusal is
answered at once, however long the wait: nothing here sleeps.

Routes and exempt prefixes are written as the application writes its own routes: relative to
where it is mounted. In an application mounted at ``/v1`` (by Starlette's ``Mount``, or under
``uvicorn --root-path /v1``), ``Route("/upload")`` limits ``/v1/upload``, and the functions of
the request are given ``/upload`` as ``info.path`` (see :func:`_path`).

WebSocket and lifespan scopes pass through untouched, unless ``websocket=True``, which limits
each WebSocket handshake like a request. A refused handshake is told why, as well as the server
lets it be:

* where the server offers ASGI's denial response (the ``websocket.http.response`` extension:
  uvicorn, with any of its WebSocket implementations, and hypercorn), it gets the answer a
  refused request gets: ``429`` (or ``503``), ``Retry-After``, the RateLimit fields, the body;
* elsewhere, where the server sends a close frame's reason (ASGI spec 2.3 on), it is accepted,
  its ``101`` carrying ``Retry-After`` and the fields, and at once closed with code 1008
  (policy violation) and a reason such as ``Too Many Requests; retry after 3 s``. Closed before
  it is accepted, it would become a bare HTTP 403 written by the server, which a browser
  reports as a failed connection (close code 1006), without the status, the code or the wait;
* on an older server (daphne says no version, and cannot send 1008 on an accepted socket), it
  is closed before it is accepted: the server's 403.

An allowed handshake's ``101`` carries the RateLimit fields (unless ``headers_on_allowed=False``)
where the server sends the headers of ``websocket.accept`` (ASGI spec 2.1 on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from protocol_in_code.qos._http.addresses import client_address
from protocol_in_code.qos._http.decide import admit_async, decide, decide_async
from protocol_in_code.qos._http.fields import REASONS
from protocol_in_code.qos._http.keys import RequestInfo
from protocol_in_code.qos._http.options import MiddlewareKeywords, Options, Route, spelled_out
from protocol_in_code.qos._http.rules import Rule, Rules
from protocol_in_code.qos._http.seats import give_back_async
from protocol_in_code.qos._http.told import DecisionEvent

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DecisionEvent", "RateLimitMiddleware", "RequestInfo", "Route"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]


def _path(scope: Scope) -> str:
    """The request's path relative to where the application is mounted: what its own routes
    are written against, and so what routes and exempt prefixes match and ``info.path`` is.

    ``root_path`` says where the application is mounted: by its server (``uvicorn
    --root-path /api``) or by a router in front of it (Starlette's ``Mount("/v1", ...)``,
    which adds ``/v1`` to it). Current servers and Starlette keep it in ``path`` too
    (``/api/upload``); older servers left it out (``/upload``). It is taken off where it
    stands at the start of the path, ending on a segment boundary, as Starlette's router
    takes it off: so both read ``/upload``, and under ``/api`` a path of ``/apiary`` is left
    as it is. The mount's own path, ``/api`` itself, is ``/``. WSGI servers take
    ``SCRIPT_NAME`` off ``PATH_INFO`` themselves (see :func:`protocol_in_code.qos.wsgi._path`),
    so both middleware match alike.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        rest = path[len(root) :]
        if not rest:
            return "/"
        if rest[0] == "/":
            return rest
    return path


def _peer(scope: Scope) -> str | None:
    """The peer's address; ``None`` for a peer on a Unix socket, to which servers give no
    ``client`` (uvicorn ``--uds``) or, some, an empty host."""
    client = scope.get("client")
    return (client[0] or None) if client else None


class RateLimitMiddleware:
    """Limit the requests that reach ``app``; see the module's help for the whole picture.

    ``limiter`` is a rate (``"100/minute"``, with an optional ``burst``): one limit per
    client, for the whole host by default (``store``, below); or any of our limiters: a
    ``RateLimiter`` (one limit for everyone, in this process), a ``KeyedRateLimiter`` (one per
    client, in this process), a shared one (``SharedKeyedRateLimiter``: one for every process
    of the host), or a Redis limiter on an asyncio client (one for every host; a synchronous
    client would block the event loop, and is refused). Several workers that each have an
    in-process limiter admit the limit once each: the first of them to start that finds
    another says so once (a ``RuntimeWarning``).
    ``store`` says where a rate's limits are kept: ``"shared"`` (the default), a table every
    worker process of the host shares (a ``SharedKeyedRateLimiter`` named ``web.<name>``, or
    ``web.<route name>`` for a route's, found again after a restart); ``"process"``, a
    ``KeyedRateLimiter`` in each process; or a Redis client, a Redis limiter of that name.
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
    * ``exempt``: path prefixes, or a function of the request, never limited. Prefixes, as
      routes, are relative to where the application is mounted (``root_path`` taken off).
    * ``name``: the policy name in the RateLimit fields (bands are ``name-1``, ``name-2``...
      when there are several).
    * ``headers_on_allowed``: add the RateLimit fields to allowed responses too (default);
      ``legacy_headers`` adds ``X-RateLimit-Limit``, ``-Remaining`` and ``-Reset``.
    * ``partition_secret``: the key of the hash that makes ``pk``. By default a secret every
      process of this user on this host shares (made once, in the shared tables' folder), so
      a client's ``pk`` is the same whichever worker answers, and after a restart; give the
      same one to every host for a ``pk`` that is the same across hosts.
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
    * ``max_in_flight``: how many requests may be running at once: an int, that many per
      client (keyed as the rate limits key clients), or an in-flight limiter (a keyed one is
      per client, a one-key one global; an asyncio one is awaited). Every HTTP request the
      middleware does not exempt takes a seat once its rate limits allow it, and holds it until
      its response's last body part is sent or the client has gone; one that finds none is
      refused (``429`` per client, ``503`` global, without ``Retry-After``). ``limiter`` may
      then be ``None``. ``on_decision`` is told of each seat asked for, under the policy
      ``in-flight``. See :mod:`protocol_in_code.qos._http.seats`.
    """

    @spelled_out(MiddlewareKeywords)
    def __init__(
        self,
        app: ASGIApp,
        limiter: Any = None,
        *,
        websocket: bool = False,
        **options: Unpack[MiddlewareKeywords],
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application, not {app!r}")
        self.app = app
        given = Options.given("RateLimitMiddleware", MiddlewareKeywords, limiter, options)
        self.rules = Rules(given, allow_async=True, on_event_loop=True)
        self.websocket = bool(websocket)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http" and not (kind == "websocket" and self.websocket):
            await self.app(scope, receive, send)
            return
        rules = self.rules
        method = scope.get("method", "GET")
        path = _path(scope)
        matched = rules.matching(method, path)
        if rules.seats is not None and kind == "http" and matched is not None:
            await self._seated(scope, receive, send, matched, _info(rules, scope, method, path))
            return
        if not matched:
            await self.app(scope, receive, send)
            return
        info = _info(rules, scope, method, path)
        if rules.awaited:
            verdict = await decide_async(rules, matched, info)
        else:  # in-process limiters never sleep: decided without a coroutine of their own
            verdict = decide(rules, matched, info)
        status, fields, content_type, body = verdict
        if status:
            await _refuse(scope, receive, send, status, fields, content_type, body)
            return
        await self._with_fields(scope, receive, send, fields)

    async def _seated(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        matched: tuple[Rule, ...],
        info: RequestInfo,
    ) -> None:
        """An HTTP request under an in-flight limit: decided, seated (see
        :func:`~protocol_in_code.qos._http.decide.admit`), and passed on holding its lease until
        the response has been sent or the client has gone (see :class:`_Seat`)."""
        verdict, lease = await admit_async(self.rules, matched, info)
        status, fields, content_type, body = verdict
        if status:
            await _refuse(scope, receive, send, status, fields, content_type, body)
            return
        if lease is None:
            await self._with_fields(scope, receive, send, fields)
            return
        seat = _Seat(lease)
        try:
            await self._with_fields(
                scope, seat.watching(receive), seat.watching_sends(send), fields
            )
        finally:
            await seat.release()

    async def _with_fields(
        self, scope: Scope, receive: Receive, send: Send, fields: Sequence[tuple[str, str]]
    ) -> None:
        """Pass the request on, adding ``fields`` to its response: an HTTP response's start, or
        a WebSocket's ``101`` (where the server takes headers in ``websocket.accept``) or the
        application's own denial response."""
        if not fields:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http":
            starts = {"http.response.start"}
        elif _spec_version(scope) >= ACCEPT_HEADERS:
            starts = {"websocket.accept", "websocket.http.response.start"}
        else:
            starts = {"websocket.http.response.start"}
        extra = _raw(fields)

        async def send_with_fields(message: Message) -> None:
            if message["type"] in starts:
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_fields)


class _Seat:
    """A request's lease, given back (once) when the response has been sent: its last
    ``http.response.body`` (``more_body`` false) handed to the server; or when the client has
    gone (``http.disconnect`` received); or when the application returns, raises or is
    cancelled, whichever comes first. Work the application does after the body is sent
    (Starlette's background tasks) holds no seat.

    A lease whose ``release`` is a coroutine (an :class:`~protocol_in_code.qos.interfaces.
    AsyncLease`) is awaited; a cancelled request still awaits it, in its ``finally``.
    """

    __slots__ = ("lease",)

    def __init__(self, lease: Any) -> None:
        self.lease: Any = lease

    async def release(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            await give_back_async(lease)

    def watching(self, receive: Receive) -> Receive:
        """``receive``, giving the lease back when the client is told to have gone."""

        async def receive_watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                await self.release()
            return message

        return receive_watched

    def watching_sends(self, send: Send) -> Send:
        """``send``, giving the lease back once the response's last body part is sent."""

        async def send_watched(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                await self.release()

        return send_watched


def _info(rules: Rules, scope: Scope, method: str, path: str) -> RequestInfo:
    """The request as the key, cost, plan and exemption functions see it."""
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        text = name.decode("latin-1").lower()
        if text in headers:
            headers[text] += ", " + value.decode("latin-1")
        else:
            headers[text] = value.decode("latin-1")
    client = client_address(_peer(scope), headers, rules.proxies, rules.header)
    return RequestInfo(method, path, client, headers, scope)


#: The ASGI extension through which an application answers a WebSocket handshake with an HTTP
#: response of its own (ASGI spec 2.4's "denial response").
DENIAL_RESPONSE = "websocket.http.response"

#: The close code of a refused WebSocket: 1008, policy violation (RFC 6455, section 7.4.1).
POLICY_VIOLATION = 1008


def _raw(fields: Sequence[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """``fields`` as ASGI headers: lower-case names, both as bytes."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in fields]


def _spec_version(scope: Scope) -> tuple[int, int]:
    """The ASGI spec version the server says it speaks: 2.0 where it does not say (daphne)."""
    version = str((scope.get("asgi") or {}).get("spec_version", "2.0"))
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return (2, 0)
    return major, minor


#: From these ASGI spec versions on, a server sends the headers of ``websocket.accept`` on its
#: ``101``, and the reason of ``websocket.close`` in the close frame.
ACCEPT_HEADERS = (2, 1)
CLOSE_REASON = (2, 3)


def _close_reason(status: int, fields: Sequence[tuple[str, str]]) -> str:
    """The reason a refused WebSocket is closed with: the status's phrase and, where the refusal
    has a ``Retry-After``, the wait, as in ``Too Many Requests; retry after 3 s``. ASCII, and
    far within the 123 bytes a close frame has for it (a wait has at most 11 digits)."""
    phrase = REASONS.get(status, "Refused")
    for name, value in fields:
        if name == "Retry-After":
            return f"{phrase}; retry after {value} s"
    return phrase


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    fields: Sequence[tuple[str, str]],
    content_type: str,
    body: bytes,
) -> None:
    """Answer a refused request here, with ``status``, ``fields`` and ``body``.

    A WebSocket handshake gets that same HTTP answer where the server offers the denial
    response. Elsewhere, where the server sends a close frame's reason (ASGI spec 2.3 on), it is
    accepted, its ``101`` carrying ``fields``, then closed with 1008 and :func:`_close_reason`.
    Where neither can be said, it is closed before it is accepted: the server's 403.
    """
    headers = _raw(fields)
    headers.append((b"content-type", content_type.encode("latin-1")))
    headers.append((b"content-length", str(len(body)).encode("ascii")))
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    # The server's websocket.connect first, as an application answers it; a client that left
    # before the handshake ended needs no answer.
    if (await receive())["type"] != "websocket.connect":
        return
    if DENIAL_RESPONSE in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    if _spec_version(scope) < CLOSE_REASON:
        # Accepted, the socket could only be closed without a word of why (and daphne, which
        # says no version, refuses to send 1008 at all, and fails the socket with 1011).
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})
        return
    await send({"type": "websocket.accept", "headers": _raw(fields)})
    reason = _close_reason(status, fields)
    await send({"type": "websocket.close", "code": POLICY_VIOLATION, "reason": reason})
