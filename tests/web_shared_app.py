"""The applications ``test_shared_web.py`` serves in several worker processes.

Every worker opens the same table by name, in the folder ``QOS_WEB_SHARED_DIR`` (the test's
``tmp_path``, or, empty, the default folder), or inherits the one its server's master process
opened before forking it: the workers share one budget because its state lives in that one
file.
"""

from __future__ import annotations

import os
from typing import Any

from protocol_in_code.qos.shared import SharedKeyedRateLimiter

BURST = 50


def limiter() -> SharedKeyedRateLimiter:
    """One limit for all workers, per client: a burst of 50, then one more an hour. An empty
    ``QOS_WEB_SHARED_DIR`` means no ``path=``: the default folder."""
    folder = os.environ["QOS_WEB_SHARED_DIR"] or None
    return SharedKeyedRateLimiter("web-workers", "1/hour", burst=BURST, path=folder)


async def _pid(scope: Any, receive: Any, send: Any) -> None:
    body = str(os.getpid()).encode("ascii")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def create_app() -> Any:
    """The ASGI application, for ``uvicorn --factory``."""
    from protocol_in_code.qos.asgi import RateLimitMiddleware

    return RateLimitMiddleware(_pid, limiter())


def create_flask_app() -> Any:
    """The Flask application, for ``gunicorn 'web_shared_app:create_flask_app()'``."""
    from flask import Flask
    from protocol_in_code.qos.wsgi import RateLimitMiddleware

    app = Flask(__name__)

    @app.get("/")
    def pid() -> str:
        return str(os.getpid())

    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, limiter=limiter())  # type: ignore[method-assign]
    return app
