"""The application ``test_web_workers.py`` serves in several uvicorn worker processes.

Every worker builds its own asyncio Redis client and limiter, on the server whose port is in
``QOS_WEB_REDIS_PORT``: they share one budget only because its state lives on that server.
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio
from protocol_in_code.qos.asgi import RateLimitMiddleware
from protocol_in_code.qos.distributed import RedisRateLimiter

BURST = 50


async def _pid(scope: Any, receive: Any, send: Any) -> None:
    body = str(os.getpid()).encode("ascii")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def create_app() -> RateLimitMiddleware:
    """One limit for all workers: a burst of 50, then one more an hour."""
    client = redis.asyncio.Redis(port=int(os.environ["QOS_WEB_REDIS_PORT"]))
    limiter = RedisRateLimiter(client, "1/hour", name="web-workers", burst=BURST)
    return RateLimitMiddleware(_pid, limiter)
