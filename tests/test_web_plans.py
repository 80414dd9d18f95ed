"""The middleware's ``plan=``: each request decided under its client's plan, in real servers.

A limiter with plans (``KeyedRateLimiter(plans={...})``, and the shared and Redis ones) is asked
with the plan that ``plan(request)`` names; the RateLimit fields name the plan's policies
(``default-free``), and ``on_decision`` is told the plan. The FastAPI example runs under
uvicorn and the Flask one under waitress; the limiters read a clock the test holds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")

pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("waitress")
http_sf = pytest.importorskip("http_sf")
import httpx  # noqa: E402
from qos_support import REPO_ROOT  # noqa: E402
from web_servers import Uvicorn, Waitress  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "web"))

import fastapi_app  # noqa: E402
import flask_app  # noqa: E402
from protocol_in_code.qos import Band, KeyedRateLimiter, SharedKeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.asgi import DecisionEvent, RequestInfo  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware  # noqa: E402
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware  # noqa: E402

SECOND = 1_000_000_000
PLANS = {"free": Band(1, burst=2, per=60), "pro": [Band(10, burst=5), Band("1000/day")]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * SECOND

    def __call__(self) -> int:
        return self.now


def plan_of(info: RequestInfo) -> str:
    """The client's plan, from a header the application sets (here: the client's own)."""
    return info.headers.get("x-plan", "free")


@pytest.fixture(params=["fastapi+uvicorn", "flask+waitress"])
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """``serve(limiter, **options)``: the example app around ``limiter``; its URL."""
    started: list[Any] = []

    def start(limiter: Any, **options: Any) -> str:
        if request.param.startswith("fastapi"):
            server: Any = Uvicorn(fastapi_app.create_app(limiter, **options))
        else:
            server = Waitress(flask_app.create_app(limiter, **options))
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def items(response: httpx.Response, field: str) -> dict[str, dict[str, Any]]:
    """{policy name: parameters}, without ``pk``, read by a Structured Field parser."""
    parsed = http_sf.parse(response.headers[field].encode("ascii"), tltype="list")
    return {name: {k: v for k, v in p.items() if k != "pk"} for name, p in parsed}


def test_each_plan_admits_its_own_burst_and_the_fields_name_the_plan(serve, client):
    events: list[DecisionEvent] = []
    limiter = KeyedRateLimiter(plans=PLANS, clock=Clock())
    url = serve(limiter, plan=plan_of, on_decision=events.append)
    free = [client.get(url + "/") for _ in range(3)]
    assert [r.status_code for r in free] == [200, 200, 429]
    pro = [client.get(url + "/", headers={"X-Plan": "pro"}) for _ in range(6)]
    assert [r.status_code for r in pro] == [200] * 5 + [429]
    assert items(free[0], "RateLimit-Policy") == {"default-free": {"q": 2, "w": 120}}
    assert items(pro[0], "RateLimit-Policy") == {
        "default-pro-1": {"q": 5, "w": 1},
        "default-pro-2": {"q": 1000, "w": 86400},
    }
    assert items(free[1], "RateLimit") == {"default-free": {"r": 0, "t": 60}}
    assert free[2].headers["Retry-After"] == "60"
    # The hook is told each request's plan, and the limiter itself (not a view of it).
    assert [e.plan for e in events] == ["free"] * 3 + ["pro"] * 6
    assert {e.policy for e in events} == {"default"}
    assert all(e.limiter is limiter for e in events)


def test_a_key_changing_plan_gets_one_burst_of_the_new_plan_at_most(serve, client):
    url = serve(KeyedRateLimiter(plans=PLANS, clock=Clock()), plan=plan_of)
    statuses = []
    for _ in range(4):  # back and forth: each plan's own state, no new burst at each change
        statuses += [client.get(url + "/").status_code for _ in range(3)]
        statuses += [client.get(url + "/", headers={"X-Plan": "pro"}).status_code for _ in range(6)]
    assert statuses.count(200) == 2 + 5


def test_a_shared_limiter_with_plans_serves_the_same(serve, client, tmp_path: Path):
    # The shared table's clock is the host's: rates slow enough that nothing refills meanwhile.
    plans = {"free": Band(1, burst=2, per=60), "pro": Band(5, burst=5, per=60)}
    limiter = SharedKeyedRateLimiter("web-plans", plans=plans, path=tmp_path)
    url = serve(limiter, plan=plan_of)
    assert [client.get(url + "/").status_code for _ in range(3)] == [200, 200, 429]
    pro = [client.get(url + "/", headers={"X-Plan": "pro"}).status_code for _ in range(6)]
    assert pro == [200] * 5 + [429]


def test_a_plan_the_limiter_does_not_have_fails_the_request_naming_it(serve, client):
    url = serve(KeyedRateLimiter(plans=PLANS, clock=Clock()), plan=plan_of)
    assert client.get(url + "/", headers={"X-Plan": "gold"}).status_code == 500


async def app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b""]


@pytest.mark.parametrize(
    ("middleware", "inner"), [(ASGIMiddleware, app), (WSGIMiddleware, wsgi_app)]
)
def test_plans_and_plan_must_come_together(middleware: Any, inner: Any) -> None:
    planned = KeyedRateLimiter(plans=PLANS)
    with pytest.raises(TypeError, match=r"plan: the limiter has plans \('free', 'pro'\)"):
        middleware(inner, limiter=planned)
    with pytest.raises(TypeError, match="no limiter here has plans"):
        middleware(inner, limiter=KeyedRateLimiter(1), plan=plan_of)
    with pytest.raises(TypeError, match="plan must be a function of the request"):
        middleware(inner, limiter=planned, plan="pro")
    assert middleware(inner, limiter=planned, plan=plan_of) is not None


def test_a_framework_form_takes_plan_as_the_middleware_does() -> None:
    flask = pytest.importorskip("flask")
    from protocol_in_code.qos.for_flask import limit

    application = flask.Flask(__name__)

    @application.get("/")
    @limit(KeyedRateLimiter(plans=PLANS, clock=Clock()), plan=plan_of)
    def hello() -> str:
        return "hello"

    client = application.test_client()
    assert [client.get("/").status_code for _ in range(3)] == [200, 200, 429]
    pro = [client.get("/", headers={"X-Plan": "pro"}) for _ in range(6)]
    assert [r.status_code for r in pro] == [200] * 5 + [429]
    assert pro[0].headers["RateLimit-Policy"].startswith('"default-pro-1";q=5;w=1')


def test_a_shared_limiter_gives_each_band_its_own_r(tmp_path: Path) -> None:
    bands = [Band(1, burst=2, per=60), Band(5, burst=5, per=3600)]
    limiter = SharedKeyedRateLimiter("bands", bands=bands, path=tmp_path)
    answered: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> None:
        answered.update(status=status, headers=dict(headers))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
    WSGIMiddleware(wsgi_app, limiter=limiter)(environ, start_response)
    fields = http_sf.parse(answered["headers"]["RateLimit"].encode("ascii"), tltype="list")
    # Each band's own whole tokens after the request (band_levels), not the smallest for all.
    assert {name: params["r"] for name, params in fields} == {"default-1": 1, "default-2": 4}


def test_metrics_count_each_plan_apart() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from protocol_in_code.qos.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(prometheus_client.CollectorRegistry())
    limiter = KeyedRateLimiter(plans=PLANS, clock=Clock())
    middleware = WSGIMiddleware(wsgi_app, limiter=limiter, plan=plan_of, on_decision=metrics)
    for plan, requests in (("free", 3), ("pro", 6)):
        for _ in range(requests):
            environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
            environ["HTTP_X_PLAN"] = plan
            middleware(environ, lambda status, headers, *exc: None)
    assert metrics.decisions() == {
        ("allowed", "default", "free", "", "true"): 2,
        ("denied", "default", "free", "", "true"): 1,
        ("allowed", "default", "pro", "", "true"): 5,
        ("denied", "default", "pro", "", "true"): 1,
    }
