"""A Flask application limited per client, served by waitress, with the RateLimit fields.

Run it (from the repository root, with the ``web`` extra installed)::

    python3 examples/web/flask_app.py

then ask it a few times faster than it allows, and read the headers::

    for i in 1 2 3 4 5 6; do
        curl -si http://127.0.0.1:8001/ | grep -i -e ^HTTP -e ratelimit -e retry
    done

The limit is the FastAPI example's: 5 requests at once per client, then one every 200 ms, and
``/health`` never limited. ``create_app`` builds it around any limiter.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware


def create_app(limiter: Any = None, **options: Any) -> Flask:
    """The example application, limited by ``limiter`` (5 per second per client by default).

    ``options`` go to :class:`RateLimitMiddleware` (``trusted_proxies``, ``legacy_headers``...).
    """
    app = Flask(__name__)

    @app.get("/")
    def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    if limiter is None:
        limiter = KeyedRateLimiter("5/second", burst=5)
    options.setdefault("exempt", ["/health"])
    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, limiter=limiter, **options
    )
    return app


app = create_app()

if __name__ == "__main__":
    import waitress

    # waitress would strip X-Forwarded-For and Forwarded from every request: the middleware's
    # trusted_proxies decides whom to believe instead.
    waitress.serve(app, host="127.0.0.1", port=8001, clear_untrusted_proxy_headers=False)
