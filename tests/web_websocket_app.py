"""The application ``test_web_websocket.py`` serves in uvicorn processes, one per WebSocket
implementation (``--ws websockets``, ``websockets-sansio``, ``wsproto``).

Every WebSocket handshake and HTTP request to it shares one limit of a burst of 1, then one an
hour: the first is allowed, the next refused. ``QOS_WS_HIDE_EXTENSION=1`` takes the
``websocket.http.response`` extension out of each scope before the middleware sees it, as a
server without it would give.
"""

from __future__ import annotations

import os
from typing import Any

from protocol_in_code.qos.asgi import RateLimitMiddleware
from protocol_in_code.qos.limiter import RateLimiter


async def _greet(scope: Any, receive: Any, send: Any) -> None:
    """A WebSocket is accepted, sent ``hello`` and closed; an HTTP request is answered ``ok``."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "hello"})
        await send({"type": "websocket.close", "code": 1000})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _without_extension(app: Any) -> Any:
    """``app`` under a server that offers no ``websocket.http.response``."""

    async def hidden(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            scope = dict(scope)
            extensions = dict(scope.get("extensions") or {})
            extensions.pop("websocket.http.response", None)
            scope["extensions"] = extensions
        await app(scope, receive, send)

    return hidden


def create_app() -> Any:
    """The limited application, with the extension hidden if the environment says so."""
    limiter = RateLimiter("1/hour", burst=1)
    app = RateLimitMiddleware(_greet, limiter, name="ws", websocket=True)
    if os.environ.get("QOS_WS_HIDE_EXTENSION") == "1":
        return _without_extension(app)
    return app
