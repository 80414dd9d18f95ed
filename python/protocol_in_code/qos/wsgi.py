"""Rate limits in front of any WSGI application, with the exact wait said in HTTP.

:class:`RateLimitMiddleware` wraps a plain WSGI callable (Flask's ``app.wsgi_app``, Django's
``get_wsgi_application()``, or any other) and does what its ASGI twin in
:mod:`protocol_in_code.qos.asgi` does, from the same shared rules: one ``check`` per request,
allowed responses carry the RateLimit fields, refusals are answered here::

    from flask import Flask
    from protocol_in_code.qos.keyed import KeyedRateLimiter
    from protocol_in_code.qos.wsgi import RateLimitMiddleware

    app = Flask(__name__)
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=KeyedRateLimiter("10/second"))

A WSGI server gives each request a thread of its own, and every limiter here is safe to share
between threads; a synchronous Redis limiter makes one round trip per request. An asyncio Redis
limiter cannot be used here (``TypeError`` at construction).

With ``max_in_flight=``, a request's seat is held until the server closes its response
(:class:`Seated`): streamed or not, the whole body has been sent, or the client has gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from protocol_in_code.qos._http.addresses import client_address
from protocol_in_code.qos._http.decide import admit, decide
from protocol_in_code.qos._http.fields import REASONS
from protocol_in_code.qos._http.keys import RequestInfo
from protocol_in_code.qos._http.options import MiddlewareKeywords, Options, Route, spelled_out
from protocol_in_code.qos._http.rules import Rules
from protocol_in_code.qos._http.seats import give_back
from protocol_in_code.qos._http.told import DecisionEvent

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DecisionEvent", "RateLimitMiddleware", "RequestInfo", "Route"]

Environ: TypeAlias = dict[str, Any]
StartResponse: TypeAlias = Callable[..., Any]
WSGIApp: TypeAlias = Callable[[Environ, StartResponse], Iterable[bytes]]


def _headers(environ: Environ) -> dict[str, str]:
    headers = {}
    for name, value in environ.items():
        if name.startswith("HTTP_"):
            headers[name[5:].replace("_", "-").lower()] = value
    if "CONTENT_TYPE" in environ:
        headers["content-type"] = environ["CONTENT_TYPE"]
    if "CONTENT_LENGTH" in environ:
        headers["content-length"] = environ["CONTENT_LENGTH"]
    return headers


#: What waitress writes in ``REMOTE_ADDR`` for a peer on a Unix socket (its documentation
#: names that peer ``trusted_proxy="localhost"``); a TCP peer's is always an address.
WAITRESS_UNIX_PEER = "localhost"


def _peer(environ: Environ) -> str | None:
    """The peer's address, ``REMOTE_ADDR``; ``None`` for a peer on a Unix socket.

    Such a peer has no address, and servers say so with a missing or empty ``REMOTE_ADDR``
    (the name the socket gives the peer is empty) or, waitress, with ``"localhost"``.
    """
    peer: str | None = environ.get("REMOTE_ADDR")
    if not peer or peer == WAITRESS_UNIX_PEER:
        return None
    return peer


def _path(environ: Environ) -> str:
    """The request's path as the ASGI middleware reads it: relative to where the application
    is mounted, in the characters the client's UTF-8 bytes spell.

    ``PATH_INFO`` is already relative: the mount's prefix is in ``SCRIPT_NAME``, which is
    left out, as the ASGI middleware leaves out ``root_path``.

    PEP 3333 has the server decode the path's bytes as latin-1, one character per byte, so
    ``/café`` arrives as ``/cafÃ©``; turned back into those bytes, it is read as UTF-8 here,
    so that routes and exempt prefixes match the real path. A byte sequence that is not UTF-8
    is read with U+FFFD in place of each bad sequence, as uvicorn and Werkzeug (Flask) read
    it: such a path matches no prefix spelled with the characters meant, and the application
    does not route it there either. A ``PATH_INFO`` that latin-1 cannot encode was not
    decoded as PEP 3333 says, and is taken as it is.
    """
    path: str = environ.get("PATH_INFO", "") or "/"
    if path.isascii():
        return path
    try:
        raw = path.encode("latin-1")
    except UnicodeEncodeError:
        return path
    return raw.decode("utf-8", "replace")


class RateLimitMiddleware:
    """Limit the requests that reach ``app``: the parameters are the ASGI middleware's.

    Every keyword (:class:`~protocol_in_code.qos._http.options.MiddlewareKeywords`) means what
    it means for :class:`protocol_in_code.qos.asgi.RateLimitMiddleware`. The peer is
    ``REMOTE_ADDR``, or a Unix socket (see :func:`_peer`), which ``trusted_proxies=["unix"]``
    trusts. The path that routes and exempt prefixes match, and that ``info.path`` gives, is
    ASGI's: ``PATH_INFO`` read as UTF-8 (see :func:`_path`). It is relative to where the
    application is mounted, as under ASGI: the server (gunicorn's ``SCRIPT_NAME``) or the
    dispatcher in front (Werkzeug's ``DispatcherMiddleware``) moves the mount's prefix into
    ``SCRIPT_NAME``, so ``Route("/upload")`` limits ``/v1/upload`` in an application mounted at
    ``/v1``.
    """

    @spelled_out(MiddlewareKeywords)
    def __init__(
        self, app: WSGIApp, limiter: Any = None, **options: Unpack[MiddlewareKeywords]
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be a WSGI application, not {app!r}")
        self.app = app
        given = Options.given("RateLimitMiddleware", MiddlewareKeywords, limiter, options)
        self.rules = Rules(given, allow_async=False)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        rules = self.rules
        method = environ.get("REQUEST_METHOD", "GET")
        path = _path(environ)
        matched = rules.matching(method, path)
        if rules.seats is not None and matched is not None:
            info = _info(rules, environ, method, path)
            verdict, lease = admit(rules, matched, info)
        elif not matched:
            return self.app(environ, start_response)
        else:
            verdict = decide(rules, matched, _info(rules, environ, method, path))
            lease = None
        status, fields, content_type, body = verdict
        if status:
            return _refuse(start_response, status, fields, content_type, body)
        if lease is None:
            return self._with_fields(environ, start_response, fields)
        try:
            response = self._with_fields(environ, start_response, fields)
        except BaseException:
            give_back(lease)
            raise
        return Seated(response, lease)

    def _with_fields(
        self, environ: Environ, start_response: StartResponse, fields: Sequence[tuple[str, str]]
    ) -> Iterable[bytes]:
        """Pass the request on, adding ``fields`` to its response."""
        if not fields:
            return self.app(environ, start_response)

        def start_with_fields(
            status_line: str, response_headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            return start_response(status_line, [*response_headers, *fields], exc_info)

        return self.app(environ, start_with_fields)


class Seated:
    """A response that holds its request's lease of an in-flight limit until the server closes
    it: PEP 3333 has a server call ``close()`` once the response is sent, or has failed, or
    the client has gone, and it is then that the lease is given back (after the response's own
    ``close()``, which may still be running the application's code, such as a generator's
    ``finally``). Iterating gives the response's parts unchanged. A response a server drops
    without closing gives the lease back when the lease itself is dropped, as every lease of
    :mod:`protocol_in_code.qos.concurrency` does."""

    __slots__ = ("lease", "response")

    def __init__(self, response: Iterable[bytes], lease: Any) -> None:
        self.response, self.lease = response, lease

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.response)

    def close(self) -> None:
        try:
            close = getattr(self.response, "close", None)
            if close is not None:
                close()
        finally:
            give_back(self.lease)


def _refuse(
    start_response: StartResponse,
    status: int,
    fields: Sequence[tuple[str, str]],
    content_type: str,
    body: bytes,
) -> list[bytes]:
    """Answer a refused request here, with ``status``, ``fields`` and ``body``."""
    headers = [*fields, ("Content-Type", content_type), ("Content-Length", str(len(body)))]
    start_response(f"{status} {REASONS[status]}", headers)
    return [body]


def _info(
    rules: Rules, environ: Environ, method: str, path: str, request: Any = None
) -> RequestInfo:
    """The request as the key, cost, plan and exemption functions see it; its ``request`` is
    ``request`` (a framework's), or else the ``environ``."""
    headers = _headers(environ)
    client = client_address(_peer(environ), headers, rules.proxies, rules.header)
    return RequestInfo(method, path, client, headers, environ if request is None else request)
