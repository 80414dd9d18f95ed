"""Key functions, in the real servers: what a key is, what ``None`` means, the framework's own
request, a FastAPI dependency as the key, and Flask's ``@limit`` above ``@app.route``.

* A key is a value (``str``, ``bytes``, ``int``, ``float``, tuples of them). A key function
  returning anything else (an ORM's user, equal only to itself, which made every request a new
  client and so switched the limit off) is a ``TypeError`` naming the function and the type,
  raised before the limiter is asked: the request fails, and nothing is spent.
* ``None`` means that the limit does not apply to the request (a limit per signed-in user, for
  a request nobody signed in to): never one bucket for every such client.
* ``key=``, ``plan=`` and ``cost=`` see the framework's request in ``info.request`` (Django's
  ``request.user``, the ``flask.Request``, Starlette's ``Request``); FastAPI's ``RateLimit``
  takes ``key=Depends(...)``, resolved by FastAPI with the route's own dependencies.
* Flask's ``@limit`` limits the view in either order with ``@app.route``.

FastAPI and the ASGI middleware run under uvicorn; Flask under waitress and Werkzeug's server;
Django and the WSGI middleware under waitress. The limiters read clocks that stand still: every
status is exact, and nothing here is about time.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.for_fastapi, .for_flask, .for_django")

pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("django")
pytest.importorskip("waitress")
import httpx
import web_django_app
from fastapi import Depends, FastAPI, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.testclient import TestClient
from flask import Blueprint, Flask, g
from flask import Request as FlaskRequest
from flask import request as flask_request
from protocol_in_code.qos import Band, KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.asgi import RequestInfo, Route
from protocol_in_code.qos.for_fastapi import RateLimit
from protocol_in_code.qos.for_flask import limit as flask_limit
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route as StarletteRoute
from web_servers import Uvicorn, Waitress, Werkzeug
from web_users import User, bearer, signed_in

T0 = 1_000 * 1_000_000_000
ALICE, BOB = bearer("alice-token"), bearer("bob-token")  # users 7 (free) and 8 (pro)
#: Every form a key function is given to: the four framework forms and both middleware.
FORMS = [
    "fastapi+uvicorn",
    "flask+waitress",
    "django-decorator+waitress",
    "django-mw+waitress",
    "asgi-mw+uvicorn",
    "wsgi-mw+waitress",
]
#: The forms that take a mapping of stacked limits (the middleware stack routes instead).
STACKING = ["fastapi+uvicorn", "flask+waitress", "django-decorator+waitress"]


def frozen() -> int:
    """A clock standing still: no token ever comes back."""
    return T0


def user_pk(info: RequestInfo) -> int | None:
    """The signed-in user's id, from the request's bearer token; ``None`` for nobody."""
    user = signed_in(info.headers.get("authorization"))
    return None if user is None else user.pk


def the_user(info: RequestInfo) -> User | None:
    """The user object itself: a mistake, since a new object is made for every request."""
    return signed_in(info.headers.get("authorization"))


# ---------------------------------------------------------------------------------------------
# The sites: "/" limited by the form, "/health" never
# ---------------------------------------------------------------------------------------------


def fastapi_site(limiter: Any, **options: Any) -> FastAPI:
    app = FastAPI()

    @app.get("/", dependencies=[Depends(RateLimit(limiter, **options))])
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    return app


def flask_site(limiter: Any, **options: Any) -> Flask:
    app = Flask(__name__)

    @app.get("/")
    @flask_limit(limiter, **options)
    def hello() -> dict[str, str]:
        return {"hello": "world"}

    return app


def starlette_site() -> Starlette:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[StarletteRoute("/", hello)])


def plain_flask_site() -> Flask:
    app = Flask(__name__)
    app.get("/")(lambda: "hello")
    return app


def server_of(form: str, limiter: Any, **options: Any) -> Any:
    """``form`` around ``limiter``, on its server (not started)."""
    if form == "fastapi+uvicorn":
        return Uvicorn(fastapi_site(limiter, **options))
    if form == "flask+waitress":
        return Waitress(flask_site(limiter, **options))
    if form.startswith("django"):
        kind = "decorator" if form.startswith("django-decorator") else "middleware"
        return Waitress(web_django_app.create_app(limiter, kind, **options))
    if form == "asgi-mw+uvicorn":
        return Uvicorn(ASGIMiddleware(starlette_site(), limiter, **options))
    flask_app = plain_flask_site()
    flask_app.wsgi_app = WSGIMiddleware(flask_app.wsgi_app, limiter, **options)  # type: ignore[method-assign]
    return Waitress(flask_app)


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve(form, limiter, **options)``: the form's site around ``limiter``; its URL."""
    started: list[Any] = []

    def start(form: str, limiter: Any, **options: Any) -> str:
        server = server_of(form, limiter, **options)
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as one:
        yield one


class Logged(logging.Handler):
    """The exceptions logged while it listens: what a server or framework answering 500 says
    of it."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.errors: list[BaseException] = []
        # uvicorn's logger passes nothing on to the root's, and uvicorn sets its handlers
        # anew when a server is made: listen() once the servers are.
        self.loggers = [logging.getLogger(), logging.getLogger("uvicorn.error")]

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.errors.append(record.exc_info[1])

    def listen(self) -> None:
        for logger in self.loggers:
            logger.addHandler(self)


@pytest.fixture
def logged() -> Iterator[Logged]:
    handler = Logged()
    yield handler
    for logger in handler.loggers:
        logger.removeHandler(handler)


# ---------------------------------------------------------------------------------------------
# A key is a value
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_a_key_function_returning_an_object_fails_the_request_naming_it_with_nothing_spent(
    form, serve, logged
):
    # The user object, made anew for every request and equal only to itself: six requests
    # against a burst of 2 were six new clients, all admitted.
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    url = serve(form, limiter, key=the_user)
    logged.listen()
    # A connection each: a server may close one on which the application raised.
    statuses = [httpx.get(url + "/", headers=ALICE, timeout=10).status_code for _ in range(6)]
    assert statuses == [500] * 6, f"{statuses.count(200)} of 6 admitted"
    assert len(limiter) == 0  # nothing was asked of the limiter
    told = [str(error) for error in logged.errors if isinstance(error, TypeError)]
    assert told, logged.errors
    assert "which is a User, not a key" in told[0]
    assert "test_web_keys.the_user must return a value" in told[0]


BAD_KEYS = {
    "object": (User(7, "free"), "is a User, not a key"),
    "object in a tuple": (("user", User(7, "free")), "holds a User, which is not a key"),
    "True": (True, "is a bool, not a key: True is the key 1"),
    "False": (False, "is a bool"),
    "bool in a tuple": (("admin", True), "is a bool"),
    "nan": (math.nan, "is NaN, not a key"),
    "nan in a tuple": (("score", (1, math.nan)), "is NaN"),
    "list": ([1], "is a list, not a key"),
    "dict": ({"user": 7}, "is a dict, not a key"),
    "list in a tuple": (("user", [1]), "holds a list"),
    "frozenset": (frozenset({1}), "is a frozenset, not a key"),
}


def _pass(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def _wsgi_get(app: Any, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    """One GET of ``/`` through a WSGI application, in process: status and fields."""
    import io

    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "REMOTE_ADDR": "192.0.2.1",
        "wsgi.input": io.BytesIO(),
    }
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    got: dict[str, Any] = {}

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got["status"], got["fields"] = int(status.split()[0]), dict(fields)

    b"".join(app(environ, start_response))
    return got["status"], got["fields"]


@pytest.mark.parametrize("key", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_anything_but_a_value_is_refused_before_the_limiter_is_asked(key):
    returned, said = key

    def key_function(info: RequestInfo) -> Any:
        return returned

    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    app = WSGIMiddleware(_pass, limiter, key=key_function)
    with pytest.raises(TypeError) as raised:
        _wsgi_get(app)
    message = str(raised.value)
    assert said in message
    assert message.startswith("key= returned ")
    assert "test_anything_but_a_value_is_refused_before_the_limiter_is_asked.<locals>" in message
    assert "key_function must return a value" in message
    assert len(limiter) == 0


GOOD_KEYS = {
    "int of 20,000 bits": 2**20_000,
    "negative int of 20,000 bits": -(2**20_000),
    "int of 20,000 bits in a tuple": ("user", 2**20_000),
    "int": 7,
    "float": -1.5,
    "infinity": math.inf,
    "bytes": b"\xff\x00",
    "empty str": "",
    "nested tuples": (("tenant", 3), (2.5, b"x", ("deep", ()))),
    "str subclass": type("Name", (str,), {})("alice"),
}


@pytest.mark.parametrize("form", ["asgi-mw+uvicorn", "wsgi-mw+waitress"])
def test_every_value_is_a_key_and_is_limited(form, serve, client):
    # Each value its own client, limited to its burst. An int of more digits than Python
    # writes in decimal is a key too: its pk is made from its hex, where repr() raised
    # ValueError, and every request of that client failed.
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    url = serve(form, limiter, key=lambda info: GOOD_KEYS[info.headers["x-key"]])
    for name in GOOD_KEYS:
        answers = [client.get(url + "/", headers={"X-Key": name}) for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 429], name
        pk = r'"default";r=0;t=1;pk=:[A-Za-z0-9+/=]+:'
        assert re.fullmatch(pk, answers[2].headers["RateLimit"]), name
    assert len(limiter) == len(GOOD_KEYS)


def test_a_redis_limiter_takes_none_as_this_limit_not_applying():
    import redis
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter
    from redis_servers import free_port

    # Nobody listens on this port: a request that reached the server would fail.
    limiter = RedisKeyedRateLimiter(redis.Redis(port=free_port()), "3/hour", name="clients")
    app = WSGIMiddleware(_pass, limiter, key=lambda info: None)
    assert _wsgi_get(app) == (200, {"Content-Type": "text/plain"})


# ---------------------------------------------------------------------------------------------
# None: this limit does not apply to this request
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_none_means_the_limit_does_not_apply_and_never_merges_clients(form, serve, client):
    # A limit per signed-in user: anonymous requests are not under it. They were all one client,
    # the key None, refused after its burst: one anonymous flood refused every anonymous client.
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    url = serve(form, limiter, key=user_pk)
    anonymous = [client.get(url + "/") for _ in range(4)]
    assert [r.status_code for r in anonymous] == [200] * 4
    assert all("RateLimit" not in r.headers for r in anonymous)
    alice = [client.get(url + "/", headers=ALICE).status_code for _ in range(3)]
    assert alice == [200, 200, 429]
    assert client.get(url + "/", headers=BOB).status_code == 200
    assert sorted(limiter) == [7, 8]


@pytest.mark.parametrize("form", [*STACKING, "asgi-mw+uvicorn", "wsgi-mw+waitress"])
def test_a_stacked_limit_whose_key_is_none_is_left_out_and_the_others_decide(form, serve, client):
    # A limit for everyone (3 in all) and one per signed-in user (1 each): an anonymous request
    # is under the first only, and its fields name that one.
    everyone = RateLimiter(1, burst=3, per=3600, clock=frozen)
    per_user = KeyedRateLimiter(1, burst=1, per=3600, clock=frozen)
    if form.endswith("-mw+uvicorn") or form.endswith("-mw+waitress"):
        options: dict[str, Any] = {
            "routes": [Route("/", everyone, name="global")],
            "name": "user",
            "stack": True,
        }
        url = serve(form, per_user, key=user_pk, **options)
    else:
        url = serve(form, {"global": everyone, "user": per_user}, key=user_pk)
    anonymous = [client.get(url + "/") for _ in range(2)]
    assert [r.status_code for r in anonymous] == [200, 200]
    assert anonymous[1].headers["RateLimit-Policy"] == '"global";q=3;w=10800'
    alice = [client.get(url + "/", headers=ALICE) for _ in range(2)]
    assert [r.status_code for r in alice] == [200, 429]  # her own limit refuses the second
    assert [client.get(url + "/").status_code for _ in range(2)] == [429, 429]  # all 3 spent
    assert list(per_user) == [7]


# ---------------------------------------------------------------------------------------------
# The framework's own request
# ---------------------------------------------------------------------------------------------

#: A free plan of 2 and a pro plan of 3, per user; no token ever comes back (the clock stands).
PLANS = {"free": Band(1, burst=2, per=3600), "pro": Band(1, burst=3, per=3600)}


@pytest.mark.parametrize("kind", ["decorator", "middleware"])
def test_django_keys_and_plans_read_request_user(kind, client):
    # A middleware signs the request in (request.user, as Django's authentication does), and
    # the limit reads it: per user, under the user's plan. An anonymous user's pk is None: the
    # limit does not apply, and the plan function, which an anonymous user would fail, is not
    # called.
    limiter = KeyedRateLimiter(plans=PLANS, clock=frozen)
    app = web_django_app.create_app(
        limiter,
        kind,
        users=True,
        key=lambda info: info.request.user.pk,
        plan=lambda info: info.request.user.plan,
    )
    server = Waitress(app).start()
    try:
        alice = [client.get(server.url + "/", headers=ALICE).status_code for _ in range(3)]
        bob = [client.get(server.url + "/", headers=BOB).status_code for _ in range(4)]
        anonymous = [client.get(server.url + "/").status_code for _ in range(4)]
    finally:
        server.stop()
    assert alice == [200, 200, 429]
    assert bob == [200, 200, 200, 429]
    assert anonymous == [200] * 4
    assert sorted(limiter) == [7, 8]


def test_flask_keys_and_plans_read_g_and_the_flask_request(client):
    # Flask-Login's current_user and g.user are set before the view, in the request's context,
    # where the key and plan functions run; info.request is the flask.Request itself.
    limiter = KeyedRateLimiter(plans=PLANS, clock=frozen)
    seen: list[Any] = []

    def key(info: RequestInfo) -> int | None:
        seen.append(info.request)
        return None if g.user is None else g.user.pk

    app = Flask(__name__)

    @app.before_request
    def sign_in() -> None:
        g.user = signed_in(flask_request.headers.get("Authorization"))

    @app.get("/")
    @flask_limit(limiter, key=key, plan=lambda info: g.user.plan)
    def hello() -> str:
        return "hello"

    server = Waitress(app).start()
    try:
        alice = [client.get(server.url + "/", headers=ALICE).status_code for _ in range(3)]
        bob = [client.get(server.url + "/", headers=BOB).status_code for _ in range(4)]
        anonymous = [client.get(server.url + "/").status_code for _ in range(3)]
    finally:
        server.stop()
    assert alice == [200, 200, 429]
    assert bob == [200, 200, 200, 429]
    assert anonymous == [200] * 3
    assert len(seen) == 10
    assert all(isinstance(one, FlaskRequest) and one.path == "/" for one in seen)


#: FastAPI's bearer scheme, as an application reads a token: ``None`` without one.
optional_bearer = HTTPBearer(auto_error=False)
#: Users looked up, request by request: a dependency the route and the key share runs once.
looked_up: list[int | None] = []


def current_user(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(optional_bearer)],
) -> User | None:
    """The signed-in user, or ``None``: an authentication dependency."""
    user = None if credentials is None else signed_in(f"Bearer {credentials.credentials}")
    looked_up.append(None if user is None else user.pk)
    return user


def current_user_id(user: Annotated[User | None, Depends(current_user)]) -> int | None:
    """The key: the user's id, ``None`` (not limited here) for nobody."""
    return None if user is None else user.pk


def current_plan(user: Annotated[User | None, Depends(current_user)]) -> str:
    return "free" if user is None else user.plan


def required_user_id(user: Annotated[User | None, Depends(current_user)]) -> int:
    """The key of a route for signed-in users only: anyone else is answered 401."""
    if user is None:
        raise HTTPException(401, "sign in")
    return user.pk


def test_fastapi_takes_the_key_and_plan_from_dependencies(client):
    limiter = KeyedRateLimiter(plans=PLANS, clock=frozen)
    strict = KeyedRateLimiter(1, burst=1, clock=frozen)
    limit = RateLimit(limiter, key=Depends(current_user_id), plan=Depends(current_plan))
    app = FastAPI()

    @app.get("/", dependencies=[Depends(limit)])
    async def hello(user: Annotated[User | None, Depends(current_user)]) -> dict[str, int | None]:
        return {"user": None if user is None else user.pk}

    @app.get("/mine", dependencies=[Depends(RateLimit(strict, key=Depends(required_user_id)))])
    async def mine() -> dict[str, str]:
        return {"mine": "yes"}

    looked_up.clear()
    server = Uvicorn(app).start()
    try:
        alice = [client.get(server.url + "/", headers=ALICE) for _ in range(3)]
        bob = [client.get(server.url + "/", headers=BOB).status_code for _ in range(4)]
        anonymous = [client.get(server.url + "/").status_code for _ in range(3)]
        nobody_mine = client.get(server.url + "/mine").status_code
        alice_mine = [client.get(server.url + "/mine", headers=ALICE).status_code for _ in "ab"]
    finally:
        server.stop()
    assert [r.status_code for r in alice] == [200, 200, 429]
    assert alice[0].json() == {"user": 7}
    assert alice[0].headers["RateLimit-Policy"].startswith('"default-free";q=2;')
    assert bob == [200, 200, 200, 429]
    assert anonymous == [200] * 3
    # One look-up per request, shared by the route, the key and the plan.
    assert looked_up[:10] == [7] * 3 + [8] * 4 + [None] * 3
    assert sorted(limiter) == [7, 8]
    # A key dependency that refuses answers before anything is spent.
    assert nobody_mine == 401
    assert alice_mine == [200, 429]
    assert list(strict) == [7]


def test_a_fastapi_key_dependency_returning_an_object_is_named_in_the_error():
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    app = fastapi_site(limiter, key=Depends(current_user))
    with TestClient(app) as test_client, pytest.raises(TypeError) as raised:
        test_client.get("/", headers=ALICE)
    assert "which is a User, not a key" in str(raised.value)
    assert "Depends(test_web_keys.current_user) must return a value" in str(raised.value)
    assert len(limiter) == 0


def test_a_fastapi_dependency_must_be_named():
    with pytest.raises(TypeError, match=re.escape("key=Depends() needs its dependency")):
        RateLimit(KeyedRateLimiter(1), key=Depends())


def test_the_middleware_give_the_scope_or_the_environ_as_the_request():
    import asyncio

    seen: list[Any] = []

    def key(info: RequestInfo) -> str:
        seen.append(info.request)
        return "one"

    async def ok(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(app: Any, scope: dict[str, Any]) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            pass

        await app(scope, receive, send)

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [], "user": "alice"}
    asyncio.run(call(ASGIMiddleware(ok, KeyedRateLimiter(1), key=key), scope))
    assert seen[-1] is scope  # what an authentication middleware in front wrote is there
    _wsgi_get(WSGIMiddleware(_pass, KeyedRateLimiter(1), key=key))
    assert seen[-1]["REMOTE_ADDR"] == "192.0.2.1" and seen[-1]["PATH_INFO"] == "/"


# ---------------------------------------------------------------------------------------------
# Flask: @limit above @app.route
# ---------------------------------------------------------------------------------------------


def test_flask_limit_above_app_route_limits_the_view_under_werkzeug_s_server(client):
    # Flask registered the view @app.route was given, before @limit saw it: it ran unlimited.
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    app = Flask(__name__)

    @flask_limit(limiter)
    @app.get("/")
    def hello() -> str:
        return "hello"

    server = Werkzeug(app).start()
    try:
        statuses = [client.get(server.url + "/").status_code for _ in range(5)]
    finally:
        server.stop()
    assert statuses == [200, 200, 429, 429, 429], f"{statuses.count(200)} of 5 admitted"


def create_blueprint_app(limiter: Any) -> Flask:
    """An application factory, registering a blueprint whose view has @limit above its route:
    no module-level name leads to either."""
    api = Blueprint("api", __name__)

    @flask_limit(limiter, name="api")
    @api.get("/items")
    def items() -> str:
        return "items"

    app = Flask(__name__)
    app.register_blueprint(api, url_prefix="/api")
    return app


def test_flask_limit_above_a_blueprint_route_is_limited_under_waitress_from_the_first_requests():
    # Eight first requests at once, on four threads: exactly the burst is admitted.
    limiter = KeyedRateLimiter(1, burst=2, clock=frozen)
    server = Waitress(create_blueprint_app(limiter)).start()
    statuses: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(timeout=10) as own:
            status = own.get(server.url + "/api/items").status_code
        with lock:
            statuses.append(status)

    try:
        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        server.stop()
    assert sorted(statuses) == [200] * 2 + [429] * 6


def test_flask_limit_in_either_order_twice_and_a_view_served_both_ways():
    # Above and under one route: both limits apply (a burst of 3, and one of 2 inside it).
    outer = KeyedRateLimiter(1, burst=3, clock=frozen)
    inner = KeyedRateLimiter(1, burst=2, clock=frozen)
    app = Flask(__name__)

    @flask_limit(outer, name="outer")
    @app.get("/")
    @flask_limit(inner, name="inner")
    def hello() -> str:
        return "hello"

    # One function served unlimited at /internal and limited at /public: as written.
    def report() -> str:
        return "report"

    public = KeyedRateLimiter(1, burst=1, clock=frozen)
    app.add_url_rule("/internal", "internal", report)
    app.add_url_rule("/public", "public", flask_limit(public)(report))
    # Under its route only: the view registered is the limited one, and stays.
    under = KeyedRateLimiter(1, burst=1, clock=frozen)

    @app.get("/under")
    @flask_limit(under)
    def limited_under() -> str:
        return "under"

    registered = app.view_functions["limited_under"]
    test_client = app.test_client()
    assert [test_client.get("/").status_code for _ in range(4)] == [200, 200, 429, 429]
    assert outer.available("127.0.0.1") == 0 and inner.available("127.0.0.1") == 0
    assert [test_client.get("/public").status_code for _ in range(2)] == [200, 429]
    assert [test_client.get("/internal").status_code for _ in range(3)] == [200] * 3
    assert [test_client.get("/under").status_code for _ in range(2)] == [200, 429]
    assert app.view_functions["limited_under"] is registered is limited_under
