"""A FastAPI application limited per client, with the RateLimit fields on every response.

Run it (from the repository root, with the ``web`` extra installed)::

    python3 examples/web/fastapi_app.py

then ask it a few times faster than it allows, and read the headers::

    for i in 1 2 3 4 5 6; do
        curl -si http://127.0.0.1:8000/ | grep -i -e ^HTTP -e ratelimit -e retry
    done

Each client (by address) may send 5 requests at once, then one every 200 ms; ``/health`` is
never limited. ``create_app`` builds the same application around any limiter, which is how the
tests serve it with a clock they control.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from protocol_in_code.qos.asgi import RateLimitMiddleware
from protocol_in_code.qos.keyed import KeyedRateLimiter


def create_app(limiter: Any = None, **options: Any) -> FastAPI:
    """The example application, limited by ``limiter`` (5 per second per client by default).

    ``options`` go to :class:`RateLimitMiddleware` (``trusted_proxies``, ``legacy_headers``...).
    """
    app = FastAPI()

    @app.get("/")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    if limiter is None:
        limiter = KeyedRateLimiter("5/second", burst=5)
    options.setdefault("exempt", ["/health"])
    app.add_middleware(RateLimitMiddleware, limiter=limiter, **options)
    return app


app = create_app()

if __name__ == "__main__":
    import uvicorn

    # uvicorn's own proxy_headers would take X-Forwarded-For from any 127.0.0.1 peer as the
    # client: the middleware's trusted_proxies decides that instead.
    uvicorn.run(app, host="127.0.0.1", port=8000, proxy_headers=False)
