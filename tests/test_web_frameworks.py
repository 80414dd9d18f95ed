"""The framework forms in their real frameworks and servers: the FastAPI dependency under
uvicorn, the Flask decorator under waitress, and Django's decorator and middleware under
waitress (in this process, so the limiters read a clock the test holds) and under Django's own
``runserver`` (in a process of its own, from a project in a temporary folder).

Every field is read with a Structured Field parser (``http_sf``), and compared with what the
middleware sends for the same limiter in the same state. The clocks are the test's: every
number is exact and nothing sleeps; no assertion is about time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.for_fastapi, .for_flask, .for_django")

pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("django")
pytest.importorskip("waitress")
http_sf = pytest.importorskip("http_sf")
import httpx  # noqa: E402
from qos_support import REPO_ROOT  # noqa: E402
from web_servers import Uvicorn, Waitress  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "web"))

import fastapi_app  # noqa: E402
import flask_app  # noqa: E402
import web_django_app  # noqa: E402
from fastapi import Depends, FastAPI  # noqa: E402
from flask import Flask  # noqa: E402
from protocol_in_code.qos import LimitOutcome  # noqa: E402
from protocol_in_code.qos.asgi import Route  # noqa: E402
from protocol_in_code.qos.for_django import limit as django_limit  # noqa: E402
from protocol_in_code.qos.for_fastapi import (  # noqa: E402
    RateLimit,
    RateLimitExceeded,
    rate_limit_exceeded_handler,
)
from protocol_in_code.qos.for_flask import limit as flask_limit  # noqa: E402
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.limiter import Band, RateLimiter  # noqa: E402

SECOND = 1_000_000_000
T0 = 1_000 * SECOND
SECRET = b"0123456789abcdef"
FORMS = ["fastapi+uvicorn", "flask+waitress", "django-decorator+waitress", "django-mw+waitress"]


class Clock:
    """A clock the test moves by hand, in integer nanoseconds."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def fastapi_form(limiter: Any, handler: bool = True, **options: Any) -> FastAPI:
    """``/`` limited by a :class:`RateLimit` dependency; ``/health`` is not."""
    app = FastAPI()
    if handler:
        app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)

    @app.get("/", dependencies=[Depends(RateLimit(limiter, **options))])
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def flask_form(limiter: Any, **options: Any) -> Flask:
    """``/`` limited by ``@limit``; ``/health`` is not."""
    app = Flask(__name__)

    @app.get("/")
    @flask_limit(limiter, **options)
    def hello() -> dict[str, str]:
        return {"hello": "world"}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def server_of(form: str, limiter: Any, **options: Any) -> Any:
    if form.startswith("fastapi"):
        return Uvicorn(fastapi_form(limiter, **options))
    if form.startswith("flask"):
        return Waitress(flask_form(limiter, **options))
    kind = "decorator" if form.startswith("django-decorator") else "middleware"
    return Waitress(web_django_app.create_app(limiter, kind, **options))


def middleware_server_of(form: str, limiter: Any, **options: Any) -> Any:
    """The middleware the form stands for: ASGI for FastAPI, WSGI for Flask and Django."""
    if form.startswith("fastapi"):
        return Uvicorn(fastapi_app.create_app(limiter, **options))
    return Waitress(flask_app.create_app(limiter, **options))


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def serve(form: str) -> Iterator[Callable[..., str]]:
    """``serve(limiter, **options)``: the form's site around ``limiter``; its URL.
    ``serve(limiter, middleware=True, ...)`` serves the middleware's instead."""
    started: list[Any] = []

    def start(limiter: Any, middleware: bool = False, **options: Any) -> str:
        make = middleware_server_of if middleware else server_of
        server = make(form, limiter, **options)
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def clients() -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two clients on two loopback addresses."""
    one = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=10)
    two = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10)
    yield one, two
    one.close()
    two.close()


def parsed(response: httpx.Response, field: str) -> dict[str, dict[str, Any]]:
    """A RateLimit field as the Structured Field List it must be: {policy name: parameters}."""
    items = http_sf.parse(response.headers[field].encode("ascii"), tltype="list")
    assert all(isinstance(name, str) for name, _ in items), items
    return {name: dict(params) for name, params in items}


def without_pk(fields: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {k: v for k, v in p.items() if k != "pk"} for name, p in fields.items()}


def test_burst_plus_one_gives_exactly_one_429_with_exact_fields(serve, clients):
    url = serve(KeyedRateLimiter(2, burst=5, clock=Clock()))  # 2 per second, bursts of 5
    responses = [clients[0].get(url + "/") for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    for i, response in enumerate(responses[:5]):
        assert without_pk(parsed(response, "RateLimit-Policy")) == {"default": {"q": 5, "w": 3}}
        assert without_pk(parsed(response, "RateLimit")) == {"default": {"r": 4 - i}}
        assert "Retry-After" not in response.headers
        assert response.json() == {"hello": "world"}
    refused = responses[5]
    # The next token comes in exactly 500 ms: rounded up, 1.
    assert http_sf.parse(refused.headers["Retry-After"].encode(), tltype="item")[0] == 1
    assert without_pk(parsed(refused, "RateLimit")) == {"default": {"r": 0}}
    assert refused.text == "Too Many Requests\n"
    # The health check is not limited, and says nothing of limits.
    health = clients[0].get(url + "/health")
    assert health.status_code == 200 and "RateLimit" not in health.headers


def _exchange(client: httpx.Client, url: str, clock: Clock) -> list[tuple[Any, ...]]:
    """The same requests, at the same times, to either site: what each answered."""
    answers = []
    for step in [0] * 6 + [SECOND * 7 // 10, 0, 0, SECOND * 3, 0]:
        clock.now += step
        response = client.get(url + "/")
        answers.append(
            (
                response.status_code,
                response.headers.get("Retry-After"),
                parsed(response, "RateLimit-Policy"),
                parsed(response, "RateLimit"),
                response.headers.get("Content-Type") if response.status_code != 200 else None,
                response.content if response.status_code != 200 else None,
            )
        )
    return answers


@pytest.mark.parametrize("problem_json", [False, True], ids=["text", "problem_json"])
def test_the_status_fields_and_body_are_the_middleware_s(serve, clients, problem_json):
    # Two bands, one slow enough to give t: every field, pk included (one secret), and every
    # refusal's body are the middleware's, request by request.
    def limiter(clock: Clock) -> KeyedRateLimiter:
        return KeyedRateLimiter(bands=[Band(2, burst=5), Band("20/minute")], clock=clock)

    options = {"partition_secret": SECRET, "problem_json": problem_json, "name": "api"}
    form_clock, middleware_clock = Clock(), Clock()
    form_url = serve(limiter(form_clock), **options)
    middleware_url = serve(limiter(middleware_clock), middleware=True, **options)
    got = _exchange(clients[0], form_url, form_clock)
    want = _exchange(clients[0], middleware_url, middleware_clock)
    assert [status for status, *_ in got] == [200] * 5 + [429, 200, 429, 429, 200, 200]
    assert got == want
    # The fields say something: each band's own r, and t where it is known.
    assert without_pk(got[5][3]) == {"api-1": {"r": 0}, "api-2": {"r": 15, "t": 1}}
    if problem_json:
        assert json.loads(got[5][5])["violated-policies"] == ["api-1"]


def test_two_clients_are_independent(serve, clients):
    url = serve(KeyedRateLimiter(1, burst=2, clock=Clock()), partition_secret=SECRET)
    one, two = clients
    assert [one.get(url + "/").status_code for _ in range(3)] == [200, 200, 429]
    answers = [two.get(url + "/") for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert [parsed(r, "RateLimit")["default"]["r"] for r in answers] == [1, 0, 0]
    # Each client its own partition key.
    pk_one = parsed(one.get(url + "/"), "RateLimit")["default"]["pk"]
    assert isinstance(pk_one, bytes) and pk_one != parsed(answers[0], "RateLimit")["default"]["pk"]


def test_a_key_function_chooses_the_client(serve, clients):
    url = serve(KeyedRateLimiter(1, burst=1, clock=Clock()), key=lambda i: i.headers["x-who"])
    client = clients[0]
    statuses = [client.get(url + "/", headers={"X-Who": who}).status_code for who in "aab"]
    assert statuses == [200, 429, 200]


def test_trusted_proxies_name_the_client(serve, clients):
    url = serve(KeyedRateLimiter(1, burst=1, clock=Clock()), trusted_proxies=["127.0.0.1"])
    client = clients[0]
    forwarded = [{"X-Forwarded-For": f"192.0.2.{i}"} for i in (1, 1, 2)]
    assert [client.get(url + "/", headers=h).status_code for h in forwarded] == [200, 429, 200]
    # An untrusted peer's header is ignored: 127.0.0.2 is its own client, whatever it says.
    other = clients[1]
    assert [other.get(url + "/", headers=h).status_code for h in forwarded] == [200, 429, 429]


def test_enforce_false_decides_counts_and_says_but_never_refuses(serve, clients):
    events: list[Any] = []
    url = serve(
        KeyedRateLimiter(2, burst=5, clock=Clock()), enforce=False, on_decision=events.append
    )
    responses = [clients[0].get(url + "/") for _ in range(7)]
    assert [r.status_code for r in responses] == [200] * 7
    assert [parsed(r, "RateLimit")["default"]["r"] for r in responses] == [4, 3, 2, 1, 0, 0, 0]
    assert all("Retry-After" not in r.headers for r in responses)
    assert [e.outcome for e in events] == [LimitOutcome.ALLOWED] * 5 + [LimitOutcome.DENIED] * 2
    assert all(not e.enforced and e.key is None for e in events)
    assert events[5].wait_ns == SECOND // 2
    assert responses[6].json() == {"hello": "world"}


@pytest.mark.parametrize("form", FORMS[:3], indirect=True)  # the middleware takes limiters
def test_a_rate_makes_one_limit_per_client(form, serve, clients, tmp_path):
    # limit("3/hour"): one limit per client, on the real clock, kept in a shared table (here in
    # tmp_path, not this user's default folder, so each run starts afresh). A token comes every
    # 20 minutes, so the statuses do not depend on how fast this runs.
    url = serve("3/hour", store=tmp_path)
    one, two = clients
    assert [one.get(url + "/").status_code for _ in range(4)] == [200] * 3 + [429]
    refused = one.get(url + "/")
    assert without_pk(parsed(refused, "RateLimit-Policy")) == {"default": {"q": 3, "w": 3600}}
    assert 0 < int(refused.headers["Retry-After"]) <= 1200
    assert two.get(url + "/").status_code == 200


@pytest.mark.parametrize("form", FORMS[:3], indirect=True)  # the forms take a mapping
def test_a_mapping_stacks_limits_on_the_view_taken_from_all_or_none(form, serve, clients):
    # A global limit of 3 and a per-client limit of 2: client one's third request is refused
    # by its own limit and spends nothing of the global one, so client two still gets 1 more
    # than it would if that refusal had spent a global token.
    clock = Clock()
    everyone = RateLimiter(1, burst=3, per=3600, clock=clock)
    url = serve(
        {"global": everyone, "client": KeyedRateLimiter(1, burst=2, per=3600, clock=clock)},
        problem_json=True,
    )
    one, two = clients
    assert [one.get(url + "/").status_code for _ in range(3)] == [200, 200, 429]
    assert [two.get(url + "/").status_code for _ in range(2)] == [200, 429]
    refused = two.get(url + "/")
    assert refused.json()["violated-policies"] == ["global"]
    assert set(parsed(refused, "RateLimit-Policy")) == {"client", "global"}
    assert everyone.available() == 0


# ---------------------------------------------------------------------------------------------
# FastAPI: asyncio limiters, and HTTPException without the handler
# ---------------------------------------------------------------------------------------------


class AsyncKeyed:
    """A limiter of the AsyncKeyedLimiter interface: an in-process one, every call awaited."""

    def __init__(self, inner: KeyedRateLimiter) -> None:
        self.inner = inner
        self.checks = 0

    @property
    def bands(self) -> Any:
        return self.inner.bands

    async def check(self, key: Any, n: int = 1, now_ns: int | None = None) -> Any:
        self.checks += 1
        return self.inner.check(key, n)

    async def try_acquire(self, key: Any, n: int = 1, now_ns: int | None = None) -> bool:
        return bool(self.inner.try_acquire(key, n))

    async def peek(self, key: Any, n: int = 1, now_ns: int | None = None) -> Any:
        return self.inner.peek(key, n)

    async def refund(self, key: Any, n: int = 1, now_ns: int | None = None) -> None:
        self.inner.refund(key, n)

    async def available(self, key: Any, now_ns: int | None = None) -> int:
        return int(self.inner.available(key))

    async def acquire(self, key: Any, n: int = 1, timeout: float | None = None) -> bool:
        return bool(self.inner.try_acquire(key, n))

    async def try_acquire_many(self, keys: Any, *args: Any, **kwargs: Any) -> Any:
        return self.inner.try_acquire_many(keys, *args, **kwargs)


def test_fastapi_awaits_an_asyncio_limiter(clients):
    limiter = AsyncKeyed(KeyedRateLimiter(2, burst=3, clock=Clock()))
    server = Uvicorn(fastapi_form(limiter)).start()
    try:
        responses = [clients[0].get(server.url + "/") for _ in range(4)]
    finally:
        server.stop()
    assert [r.status_code for r in responses] == [200] * 3 + [429]
    assert limiter.checks == 4
    assert responses[3].headers["Retry-After"] == "1"
    assert without_pk(parsed(responses[3], "RateLimit")) == {"default": {"r": 0}}


def test_fastapi_without_the_handler_answers_its_own_http_exception(clients):
    server = Uvicorn(fastapi_form(KeyedRateLimiter(1, burst=1, clock=Clock()), handler=False))
    server.start()
    try:
        responses = [clients[0].get(server.url + "/") for _ in range(2)]
    finally:
        server.stop()
    refused = responses[1]
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Too Many Requests"}
    assert refused.headers["Retry-After"] == "1"
    assert without_pk(parsed(refused, "RateLimit")) == {"default": {"r": 0, "t": 1}}


def test_a_django_async_view_awaits_an_asyncio_limiter_under_uvicorn(clients):
    limiter = AsyncKeyed(KeyedRateLimiter(2, burst=3, clock=Clock()))
    server = Uvicorn(web_django_app.create_asgi_app(limiter, name="async")).start()
    try:
        responses = [clients[0].get(server.url + "/") for _ in range(4)]
        other = clients[1].get(server.url + "/")
    finally:
        server.stop()
    assert [r.status_code for r in responses] == [200] * 3 + [429]
    assert limiter.checks == 5
    assert responses[0].json() == {"hello": "async"}
    assert without_pk(parsed(responses[0], "RateLimit")) == {"async": {"r": 2}}
    assert responses[3].headers["Retry-After"] == "1"
    assert without_pk(parsed(responses[3], "RateLimit")) == {"async": {"r": 0}}
    assert other.status_code == 200


def test_the_django_middleware_serves_asgi_and_awaits_an_asyncio_limiter(clients):
    limiter = AsyncKeyed(KeyedRateLimiter(2, burst=3, clock=Clock()))
    server = Uvicorn(web_django_app.create_asgi_app(limiter, "middleware", name="site"))
    server.start()
    try:
        responses = [clients[0].get(server.url + "/") for _ in range(4)]
        health = clients[0].get(server.url + "/health")
    finally:
        server.stop()
    assert [r.status_code for r in responses] == [200] * 3 + [429]
    assert responses[0].json() == {"hello": "async"}
    assert limiter.checks == 4
    assert responses[3].headers["Retry-After"] == "1"
    assert without_pk(parsed(responses[3], "RateLimit")) == {"site": {"r": 0}}
    assert health.status_code == 200 and "RateLimit" not in health.headers


@pytest.mark.parametrize("asgi", [False, True], ids=["wsgi", "asgi"])
def test_the_django_middleware_stacks_the_routes_that_match(asgi, clients):
    clock = Clock()
    everyone = RateLimiter(1, burst=3, per=3600, clock=clock)
    elsewhere = RateLimiter(1, burst=1, per=3600, clock=clock)  # a route this site never asks
    options: dict[str, Any] = {
        "name": "global",
        "routes": [Route("/nowhere", elsewhere, name="nowhere")],
        "stack": True,
    }
    if asgi:
        server = Uvicorn(web_django_app.create_asgi_app(everyone, "middleware", **options))
    else:
        server = Waitress(web_django_app.create_app(everyone, "middleware", **options))
    server.start()
    try:
        statuses = [clients[0].get(server.url + "/").status_code for _ in range(4)]
    finally:
        server.stop()
    assert statuses == [200] * 3 + [429]
    assert elsewhere.available() == 1


def test_synchronous_forms_refuse_an_asyncio_limiter_at_once():
    limiter = AsyncKeyed(KeyedRateLimiter(1))
    with pytest.raises(TypeError, match="asyncio"):
        flask_limit(limiter)

    def view(request: Any) -> Any:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="asyncio"):
        django_limit(limiter)(view)


def test_bad_arguments_raise_at_construction():
    with pytest.raises(TypeError, match="burst"):
        RateLimit(KeyedRateLimiter(1), burst=3)
    with pytest.raises(TypeError, match="limiter"):
        flask_limit(None)
    with pytest.raises(TypeError, match="on_decision"):
        django_limit("1/second", on_decision="prometheus")(web_django_app.hello)
    with pytest.raises(ValueError, match="store"):
        flask_limit("1/second", store="redis")
    with pytest.raises(TypeError, match="store"):
        RateLimit("1/second", store=42)
    with pytest.raises(ValueError, match="forwarded_header"):
        RateLimit("1/second", forwarded_header="X-Real-IP")


# ---------------------------------------------------------------------------------------------
# Django under its own server: runserver, in a project of its own
# ---------------------------------------------------------------------------------------------

SETTINGS = """
from protocol_in_code.qos.keyed import KeyedRateLimiter
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "site_urls"
INSTALLED_APPS = []
SECRET_KEY = "not a secret: a test site on loopback, not a secret at all"
MIDDLEWARE = ["protocol_in_code.qos.for_django.RateLimitMiddleware"]
# The clock stands still (the process is not the test's): every wait is exact.
QOS_RATE_LIMIT = {
    "limiter": KeyedRateLimiter(2, burst=3, clock=lambda: 10**12),
    "exempt": ["/health", "/view"],
    "partition_secret": b"0123456789abcdef",
}
"""

URLS = """
from django.http import JsonResponse
from django.urls import path
from protocol_in_code.qos.for_django import limit
from protocol_in_code.qos.keyed import KeyedRateLimiter

def hello(request):
    return JsonResponse({"hello": "world"})

@limit(KeyedRateLimiter(1, per=60, burst=2, clock=lambda: 10**12), name="view")
def view(request):
    return JsonResponse({"view": True})

urlpatterns = [path("", hello), path("health", hello), path("view", view)]
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def runserver(tmp_path: Path) -> Iterator[str]:
    """``manage.py runserver --noreload`` of a project in ``tmp_path``, on a free port."""
    (tmp_path / "site_settings.py").write_text(textwrap.dedent(SETTINGS))
    (tmp_path / "site_urls.py").write_text(textwrap.dedent(URLS))
    port = _free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "site_settings", "PYTHONPATH": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    stderr = process.stderr.read() if process.stderr else b""
                    pytest.fail(f"runserver did not start: {stderr.decode()[-2000:]}")
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()


def test_django_runserver_with_the_middleware_and_the_decorator(runserver, clients):
    one, two = clients
    site = [one.get(runserver + "/") for _ in range(4)]
    assert [r.status_code for r in site] == [200] * 3 + [429]
    assert site[3].headers["Retry-After"] == "1"  # one token at 2 per second: 500 ms
    assert without_pk(parsed(site[3], "RateLimit-Policy")) == {"default": {"q": 3, "w": 2}}
    assert [parsed(r, "RateLimit")["default"]["r"] for r in site] == [2, 1, 0, 0]
    assert two.get(runserver + "/").status_code == 200  # another client
    # The decorated view: its own limit, one token a minute, so t is said.
    view = [one.get(runserver + "/view") for _ in range(3)]
    assert [r.status_code for r in view] == [200, 200, 429]
    assert view[2].headers["Retry-After"] == "60"
    assert without_pk(parsed(view[2], "RateLimit")) == {"view": {"r": 0, "t": 60}}
    assert without_pk(parsed(view[0], "RateLimit-Policy")) == {"view": {"q": 2, "w": 120}}
    assert "RateLimit" not in one.get(runserver + "/health").headers
