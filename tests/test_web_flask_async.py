"""Flask's ``@limit`` on an ``async def`` view (Flask runs them since 2.0, with ``flask[async]``).

The limited view must run as Flask runs the view it wraps: awaited. Written under the route or
above it, the first request is admitted and answered by the view, not by a 500 about a
coroutine that was never awaited.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.for_flask")

pytest.importorskip("flask")
pytest.importorskip("asgiref")  # what Flask runs async views with
import httpx
from web_servers import Werkzeug


@pytest.fixture
def served() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for server in started:
        server.stop()


def test_an_async_view_limited_in_either_order_is_run(tmp_path: Path, served: list[Any]) -> None:
    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)

    @app.get("/under")
    @limit("5/minute", store=tmp_path)
    async def under() -> str:
        return "under"

    @limit("5/minute", store=tmp_path)
    @app.get("/above")
    async def above() -> str:
        return "above"

    server = Werkzeug(app).start()
    served.append(server)
    with httpx.Client(base_url=server.url, timeout=10) as client:
        answers = {path: client.get(path) for path in ("/under", "/above")}
    assert {path: (r.status_code, r.text) for path, r in answers.items()} == {
        "/under": (200, "under"),
        "/above": (200, "above"),
    }
    assert all("RateLimit" in r.headers for r in answers.values())
