"""The RateLimit fields against draft-ietf-httpapi-ratelimit-headers-11, in real servers.

Each test checks a requirement of the draft (the conformance table of ``docs/web.md`` names
them), against the FastAPI example under uvicorn and the Flask one under waitress, over TCP,
with every field read by a Structured Field parser (``http_sf``). The limiters read a clock
the test holds, so every number is exact and nothing sleeps: no assertion is about time.
Also here: problem documents (``problem_json``), shadow mode (``enforce=False``) and the
``on_decision`` hook.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import sys
from collections.abc import Callable, Iterator
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
from protocol_in_code.qos import LimitOutcome  # noqa: E402
from protocol_in_code.qos.asgi import DecisionEvent, Route  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware  # noqa: E402
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.limiter import Band, RateLimiter  # noqa: E402
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware  # noqa: E402

SECOND = 1_000_000_000
T0 = 1_000 * SECOND
SECRET = b"0123456789abcdef"
PROBLEM = "https://iana.org/assignments/http-problem-types#"


class Clock:
    """A clock the test moves by hand, in integer nanoseconds."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


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


def parsed(response: httpx.Response, field: str) -> list[tuple[Any, dict[str, Any]]]:
    """A field as the Structured Field List it must be (http_sf raises if it is not)."""
    return list(http_sf.parse(response.headers[field].encode("ascii"), tltype="list"))


def items(response: httpx.Response, field: str) -> dict[str, dict[str, Any]]:
    """{policy name: parameters}, without ``pk``."""
    return {
        name: {k: v for k, v in params.items() if k != "pk"}
        for name, params in parsed(response, field)
    }


def cost_header(info: Any) -> int:
    return int(info.headers.get("x-cost", "1"))


# ---------------------------------------------------------------------------------------------
# Section 3: RateLimit-Policy
# ---------------------------------------------------------------------------------------------


def test_policy_items_are_strings_with_integer_q_and_w_and_byte_sequence_pk(serve, client):
    clock = Clock()
    # A band so fast that burst / rate is a millisecond: w is still a non-zero integer.
    url = serve(KeyedRateLimiter(bands=[Band(1000, burst=1), Band("50/hour")], clock=clock))
    for response in (client.get(url + "/"), client.get(url + "/")):  # an allowed, a refused
        for field in ("RateLimit-Policy", "RateLimit"):
            for name, params in parsed(response, field):
                assert isinstance(name, str)
                assert isinstance(params["pk"], bytes)
        for _, params in parsed(response, "RateLimit-Policy"):
            assert isinstance(params["q"], int) and params["q"] >= 0
            assert isinstance(params["w"], int) and params["w"] >= 1
        assert items(response, "RateLimit-Policy") == {
            "default-1": {"q": 1, "w": 1},
            "default-2": {"q": 50, "w": 3600},
        }


def test_the_policy_field_is_the_same_on_every_response(serve, client):
    clock = Clock()
    url = serve(
        KeyedRateLimiter(2, burst=3, max_keys=1, clock=clock), trusted_proxies=["127.0.0.1"]
    )
    responses = [client.get(url + "/") for _ in range(4)]  # 200, 200, 200, 429
    responses.append(client.get(url + "/", headers={"X-Forwarded-For": "192.0.2.7"}))  # 503
    assert [r.status_code for r in responses] == [200] * 3 + [429, 503]
    policies = {r.headers["RateLimit-Policy"] for r in responses[:4]}
    assert len(policies) == 1
    # Another client: the same policy, with its own pk.
    assert items(responses[4], "RateLimit-Policy") == items(responses[0], "RateLimit-Policy")


def test_only_the_draft_s_parameters_are_sent(serve, client):
    # Anything else would have to be prefixed with a vendor's name: none is sent.
    clock = Clock()
    url = serve(
        KeyedRateLimiter(bands=[Band(2, burst=5), Band("20/minute")], clock=clock),
        cost=cost_header,
    )
    for headers in ({}, {"X-Cost": "5"}, {"X-Cost": "9"}):  # allowed, denied, never
        response = client.get(url + "/", headers=headers)
        for _, params in parsed(response, "RateLimit-Policy"):
            assert set(params) <= {"q", "qu", "w", "pk"}
        for _, params in parsed(response, "RateLimit"):
            assert set(params) <= {"r", "t", "pk"}


def test_qu_is_sent_when_a_cost_makes_the_units_other_than_requests(serve, client):
    clock = Clock()
    url = serve(
        KeyedRateLimiter(10, burst=100, clock=clock),
        routes=[
            Route("/upload", KeyedRateLimiter(10, burst=100, clock=clock), cost=cost_header),
            Route("/bytes", KeyedRateLimiter(10, burst=100, clock=clock), unit="content-bytes"),
        ],
    )
    # No cost function: requests, the default, so no qu.
    assert "qu" not in items(client.get(url + "/"), "RateLimit-Policy")["default"]
    # A cost function whose unit nobody named: "units", not the default "requests".
    response = client.get(url + "/upload", headers={"X-Cost": "7"})
    policy = items(response, "RateLimit-Policy")["/upload"]
    assert policy["qu"] == "units" and isinstance(policy["qu"], str)
    assert items(response, "RateLimit")["/upload"]["r"] == 93
    # A unit named.
    response = client.get(url + "/bytes")
    assert items(response, "RateLimit-Policy")["/bytes"]["qu"] == "content-bytes"


# ---------------------------------------------------------------------------------------------
# Section 4: RateLimit, r and t
# ---------------------------------------------------------------------------------------------


def test_each_band_says_its_own_r(serve, client):
    clock = Clock()
    limiter = KeyedRateLimiter(bands=[Band(1, burst=3), Band("10/minute")], clock=clock)
    url = serve(limiter)
    client.get(url + "/")
    response = client.get(url + "/")
    # Two taken from each: 1 of 3 left in the first band, 8 of 10 in the second; the least
    # of them (1) is no longer said for both.
    state = items(response, "RateLimit")
    assert {name: p["r"] for name, p in state.items()} == {"default-1": 1, "default-2": 8}


def test_within_t_seconds_no_more_than_r_can_be_used_and_r_can_be_used_now(serve, client):
    # The effective window, checked the way a client would rely on it: r requests right now
    # all pass, and in the last nanosecond of the t seconds one more is still refused.
    clock = Clock()
    # One token every 3 s, bursts of 5; each round is a client of its own (X-Who).
    url = serve(KeyedRateLimiter(1, per=3, burst=5, clock=clock), key=lambda i: i.headers["x-who"])
    for spent in range(1, 6):
        who = {"X-Who": str(spent)}
        for _ in range(spent - 1):
            client.get(url + "/", headers=who)
        clock.now += 3 * SECOND // 2  # half a token accrues, unless the bucket is full
        state = items(client.get(url + "/", headers=who), "RateLimit")["default"]
        r, t = state["r"], state["t"]
        # The next token is 1.5 s away (half of one to go), rounded down: 1, since within
        # 2 s one more could be used; or 3 s from a bucket that was full.
        assert (r, t) == (5 - spent, 3 if spent == 1 else 1)
        clock.now += t * SECOND - 1
        codes = [client.get(url + "/", headers=who).status_code for _ in range(r + 1)]
        assert codes == [200] * r + [429]


def test_t_is_omitted_where_the_next_token_is_less_than_a_second_away(serve, client):
    clock = Clock()
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock))
    responses = [client.get(url + "/") for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    for response in responses:
        assert "t" not in items(response, "RateLimit")["default"]


def test_retry_after_never_points_before_the_end_of_the_effective_window(serve, client):
    # A request refused by a fast band (its token 1 s away) while a slow band's next token is
    # 10 s away: the slow band's t is cut to the Retry-After, not 10.
    clock = Clock()
    limiter = KeyedRateLimiter(bands=[Band(1, burst=1), Band("6/minute", burst=10)], clock=clock)
    url = serve(limiter)
    assert client.get(url + "/").status_code == 200
    clock.now += SECOND // 2
    refused = client.get(url + "/")
    assert refused.status_code == 429
    retry = http_sf.parse(refused.headers["Retry-After"].encode(), tltype="item")[0]
    assert retry == 1
    state = items(refused, "RateLimit")
    assert state == {"default-1": {"r": 0}, "default-2": {"r": 9, "t": 1}}
    for params in state.values():
        assert params.get("t", 0) <= retry
    # On an allowed response, with no Retry-After, the slow band says its whole window.
    clock.now += SECOND // 2
    allowed = client.get(url + "/")
    assert allowed.status_code == 200
    assert items(allowed, "RateLimit")["default-2"] == {"r": 8, "t": 9}


def test_r_never_exceeds_q_nor_what_the_limiter_admits(serve, client):
    # No unwanted volume is conveyed: r is never above the burst, and r requests in a row
    # right after a response are exactly what is admitted.
    clock = Clock()
    url = serve(KeyedRateLimiter(bands=[Band(3, burst=4), Band("30/minute")], clock=clock))
    steps = [0, 0, 400, 0, 2000, 0, 0, 0, 0, 0, 10_000, 100]
    for ms in steps:
        clock.now += ms * 1_000_000
        response = client.get(url + "/")
        q = {name: p["q"] for name, p in items(response, "RateLimit-Policy").items()}
        r = {name: p["r"] for name, p in items(response, "RateLimit").items()}
        assert all(0 <= r[name] <= q[name] for name in q)
    least = min(r.values())
    codes = [client.get(url + "/").status_code for _ in range(least + 1)]
    assert codes == [200] * least + [429]


def test_pk_is_the_documented_keyed_hash_of_the_client_s_key(serve, client):
    # The partition key is made as docs/web.md says, so a client can predict it: HMAC-SHA256
    # of the key's UTF-8 under partition_secret, its first 12 bytes.
    url = serve(KeyedRateLimiter(2, burst=5), partition_secret=SECRET)
    response = client.get(url + "/")
    want = hmac.new(SECRET, b"127.0.0.1", hashlib.sha256).digest()[:12]
    for field in ("RateLimit-Policy", "RateLimit"):
        assert [params["pk"] for _, params in parsed(response, field)] == [want]
    # Only what is in the request made it: another server with the secret says the same.
    again = client.get(serve(KeyedRateLimiter(2, burst=5), partition_secret=SECRET) + "/")
    assert parsed(again, "RateLimit")[0][1]["pk"] == want
    assert base64.b64encode(want).decode() in response.headers["RateLimit"]


async def _messages(app: Any, scope_extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [],
        "client": ("192.0.2.1", 1234),
        **(scope_extra or {}),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def test_the_fields_are_in_the_header_section_never_in_trailers():
    async def with_trailers(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [], "trailers": True})
        await send({"type": "http.response.body", "body": b"ok"})
        await send({"type": "http.response.trailers", "headers": [(b"x-digest", b"1")]})

    app = ASGIMiddleware(with_trailers, KeyedRateLimiter(1, burst=1, clock=lambda: T0))
    for _ in range(2):  # an allowed response (the application's), then a refusal (ours)
        sent = asyncio.run(_messages(app))
        start = sent[0]
        assert start["type"] == "http.response.start"
        assert {b"ratelimit", b"ratelimit-policy"} <= {k for k, _ in start["headers"]}
        for message in sent[1:]:
            names = {k for k, _ in message.get("headers", ())}
            assert not names & {b"ratelimit", b"ratelimit-policy"}


# ---------------------------------------------------------------------------------------------
# Section 5: problem types
# ---------------------------------------------------------------------------------------------


def test_problem_json_on_429_names_the_violated_policies(serve, client):
    clock = Clock()
    limiter = KeyedRateLimiter(bands=[Band(1, burst=2), Band("6/minute", burst=5)], clock=clock)
    url = serve(limiter, problem_json=True, cost=cost_header)
    assert client.get(url + "/", headers={"X-Cost": "2"}).status_code == 200
    # The first band is empty, the second holds 3: only the first is violated.
    denied = client.get(url + "/")
    assert denied.status_code == 429
    assert denied.headers["Content-Type"] == "application/problem+json"
    problem = json.loads(denied.content)
    assert problem["type"] == PROBLEM + "quota-exceeded"
    assert problem["status"] == 429
    assert problem["violated-policies"] == ["default-1"]
    # Three tokens, more than the first band's burst (2): never, and only it is violated.
    never = client.get(url + "/", headers={"X-Cost": "3"})
    assert never.status_code == 429 and "Retry-After" not in never.headers
    assert json.loads(never.content)["violated-policies"] == ["default-1"]
    # Six: more than either burst (2 and 5), both violated.
    never = client.get(url + "/", headers={"X-Cost": "6"})
    assert json.loads(never.content)["violated-policies"] == ["default-1", "default-2"]


def test_problem_json_on_503_is_temporary_reduced_capacity(serve, client):
    clock = Clock()
    url = serve(
        KeyedRateLimiter(1, burst=1, max_keys=1, clock=clock),
        problem_json=True,
        trusted_proxies=["127.0.0.1"],
        name="per-client",
    )
    assert client.get(url + "/").status_code == 200
    full = client.get(url + "/", headers={"X-Forwarded-For": "192.0.2.7"})
    assert full.status_code == 503
    assert full.headers["Content-Type"] == "application/problem+json"
    problem = json.loads(full.content)
    assert problem["type"] == PROBLEM + "temporary-reduced-capacity"
    assert problem["status"] == 503
    assert problem["violated-policies"] == ["per-client"]


def test_problem_json_is_off_by_default(serve, client):
    url = serve(KeyedRateLimiter(1, burst=1, clock=Clock()))
    client.get(url + "/")
    refused = client.get(url + "/")
    assert refused.status_code == 429
    assert refused.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert refused.text == "Too Many Requests\n"


# ---------------------------------------------------------------------------------------------
# Shadow mode and on_decision
# ---------------------------------------------------------------------------------------------


def test_enforce_false_decides_counts_and_says_but_refuses_nothing(serve, client):
    clock = Clock()
    events: list[DecisionEvent] = []
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock), enforce=False, on_decision=events.append)
    responses = [client.get(url + "/") for _ in range(7)]
    assert [r.status_code for r in responses] == [200] * 7
    assert [e.outcome for e in events] == [LimitOutcome.ALLOWED] * 5 + [LimitOutcome.DENIED] * 2
    assert all(not e.enforced for e in events)
    assert events[5].wait_ns == SECOND // 2
    # The fields say what would have happened; no Retry-After on a response that went on.
    assert [items(r, "RateLimit")["default"]["r"] for r in responses] == [4, 3, 2, 1, 0, 0, 0]
    assert all("Retry-After" not in r.headers for r in responses)
    assert responses[6].json() == {"hello": "world"}


BOTH = pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])


def _call(app: Any, path: str = "/", client: str = "192.0.2.1") -> int:
    """One request through either middleware, in process: the status."""
    if isinstance(app, ASGIMiddleware):
        sent = asyncio.run(_messages(app, {"path": path, "client": (client, 1)}))
        status: int = sent[0]["status"]
        return status
    got: list[int] = []

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got.append(int(status.split()[0]))

    b"".join(
        app({"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": client}, start_response)
    )
    return got[0]


async def _ok_asgi(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _ok_wsgi(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b"ok"]


def _around(middleware: Any, limiter: Any, **options: Any) -> Any:
    return middleware(_ok_asgi if middleware is ASGIMiddleware else _ok_wsgi, limiter, **options)


@BOTH
def test_on_decision_is_told_once_per_decision_without_the_key(middleware):
    events: list[DecisionEvent] = []
    app = _around(
        middleware,
        KeyedRateLimiter(1, burst=2, clock=lambda: T0),
        routes=[Route("/api", RateLimiter(1, burst=1, clock=lambda: T0), name="api")],
        exempt=["/health"],
        on_decision=events.append,
    )
    codes = [_call(app) for _ in range(3)] + [_call(app, "/api"), _call(app, "/api")]
    codes += [_call(app, "/health")]  # exempt: no decision, no event
    assert codes == [200, 200, 429, 200, 429, 200]
    assert [(e.policy, e.route, e.outcome) for e in events] == [
        ("default", None, LimitOutcome.ALLOWED),
        ("default", None, LimitOutcome.ALLOWED),
        ("default", None, LimitOutcome.DENIED),
        ("api", "/api", LimitOutcome.ALLOWED),
        ("api", "/api", LimitOutcome.DENIED),
    ]
    assert [e.wait for e in events] == [0, 0, 1.0, 0, 1.0]
    assert all(e.key is None and e.plan is None and e.enforced for e in events)


@BOTH
def test_on_decision_key_gives_the_key_when_asked(middleware):
    events: list[DecisionEvent] = []
    app = _around(
        middleware,
        KeyedRateLimiter(1, burst=2, clock=lambda: T0),
        on_decision=events.append,
        on_decision_key=True,
    )
    _call(app, client="192.0.2.1")
    _call(app, client="192.0.2.2")
    assert [e.key for e in events] == ["192.0.2.1", "192.0.2.2"]


@BOTH
def test_a_hook_that_raises_is_logged_and_the_request_answered(middleware, caplog):
    def broken(event: DecisionEvent) -> None:
        raise RuntimeError("metrics backend down")

    limiter = KeyedRateLimiter(1, burst=1, clock=lambda: T0)
    app = _around(middleware, limiter, on_decision=broken)
    with caplog.at_level(logging.ERROR, logger="protocol_in_code.qos"):
        assert [_call(app), _call(app)] == [200, 429]
    assert len([r for r in caplog.records if "on_decision" in r.getMessage()]) == 2
    assert limiter.available("192.0.2.1") == 0  # the one token was spent, and answered


@BOTH
def test_bad_hook_and_unit_arguments_raise_at_construction(middleware):
    with pytest.raises(TypeError, match="on_decision"):
        _around(middleware, RateLimiter(1), on_decision="prometheus")
    with pytest.raises(ValueError, match="quota_unit"):
        _around(middleware, RateLimiter(1), quota_unit="bytes\n")
    with pytest.raises(ValueError, match=r"routes\[0\]\.unit"):
        _around(middleware, None, routes=[Route("/a", RateLimiter(1), unit="")])


def test_band_levels_say_each_band_s_tokens_and_next_token():
    # What r and t are read from: whole tokens, and ns until one more, band by band.
    clock = Clock()
    bands = [Band(10, burst=3), Band(1, burst=5)]
    keyed = KeyedRateLimiter(bands=bands, clock=clock)
    single = RateLimiter(bands=bands, clock=clock)
    assert keyed.check("a", 2) and single.check(2)
    clock.now += SECOND // 20
    want = [(1, 50_000_000), (3, 950_000_000)]
    assert keyed.band_levels("a") == want
    assert single.band_levels() == want
    # A key never seen is full, and asking stores nothing.
    assert keyed.band_levels("b") == [(3, 100_000_000), (5, SECOND)]
    assert "b" not in keyed


def _script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


def test_redis_limiters_say_each_band_s_r_and_t_in_one_script_call(redis_server):
    # A Redis limiter has no band_levels: the middleware ask its check_levels, which says the
    # decision and each band's level in one script call, so every band says its own r and t,
    # and a refusal names only the band that is short. The hook is told as before: awaited
    # under ASGI (an asyncio limiter), called under WSGI, without the key.
    import redis.asyncio
    from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter

    bands = [Band(1, burst=2), Band("6/minute", burst=5)]
    from protocol_in_code.qos.distributed._server import SOURCE

    sync = redis_server.client()
    sync.flushall()
    sync.script_load(SOURCE)  # no NOSCRIPT, and its EVAL, in the calls counted below
    events: list[DecisionEvent] = []
    wsgi = WSGIMiddleware(
        _ok_wsgi,
        RedisKeyedRateLimiter(sync, bands=bands, name="clients", prefix="w:"),
        problem_json=True,
        on_decision=events.append,
    )
    got: list[Any] = []

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got.append((status, dict(fields)))

    calls = []
    for _ in range(3):
        before = _script_calls(sync)
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
        body = b"".join(wsgi(environ, start_response))
        calls.append(_script_calls(sync) - before)
    assert calls == [1, 1, 1]
    status, fields = got[-1]
    assert status.startswith("429")
    assert fields["Retry-After"] == "1"
    # The first band is empty and its next token is under a second away (no t); the second
    # holds 3, its next token ~10 s away, said as t but never more than Retry-After.
    assert items_of(fields["RateLimit"]) == {"default-1": {"r": 0}, "default-2": {"r": 3, "t": 1}}
    assert json.loads(body)["violated-policies"] == ["default-1"]
    # Right after the first request: each band holds a whole number of tokens, the next one a
    # full token's refill away.
    assert items_of(got[0][1]["RateLimit"]) == {
        "default-1": {"r": 1, "t": 1},
        "default-2": {"r": 4, "t": 10},
    }
    assert [e.outcome for e in events] == [LimitOutcome.ALLOWED] * 2 + [LimitOutcome.DENIED]
    assert all(e.key is None for e in events)

    async def run() -> tuple[list[DecisionEvent], list[dict[str, str]], list[int]]:
        client = redis.asyncio.Redis(port=redis_server.port)
        told: list[DecisionEvent] = []
        answered: list[dict[str, str]] = []
        counted = []

        async def keep(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answered.append({k.decode(): v.decode() for k, v in message["headers"]})

        try:
            limiter = AsyncRedisKeyedRateLimiter(client, bands=bands, name="clients", prefix="a:")
            app = ASGIMiddleware(_ok_asgi, limiter, on_decision=told.append, on_decision_key=True)
            for _ in range(3):
                before = _script_calls(sync)
                await app(
                    {
                        "type": "http",
                        "method": "GET",
                        "path": "/",
                        "headers": [],
                        "client": ("192.0.2.1", 1),
                    },
                    _receive,
                    keep,
                )
                counted.append(_script_calls(sync) - before)
        finally:
            await client.aclose()
        return told, answered, counted

    told, answered, counted = asyncio.run(run())
    assert counted == [1, 1, 1]
    assert [e.outcome for e in told] == [LimitOutcome.ALLOWED] * 2 + [LimitOutcome.DENIED]
    assert [e.key for e in told] == ["192.0.2.1"] * 3
    assert items_of(answered[0]["ratelimit"]) == {
        "default-1": {"r": 1, "t": 1},
        "default-2": {"r": 4, "t": 10},
    }
    assert items_of(answered[-1]["ratelimit"]) == {
        "default-1": {"r": 0},
        "default-2": {"r": 3, "t": 1},
    }


def test_a_redis_limiter_with_plans_says_the_plan_s_bands_own_r(redis_server):
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter

    sync = redis_server.client()
    sync.flushall()
    plans = {"free": [Band(1, burst=2), Band("6/minute", burst=5)], "pro": 100}
    wsgi = WSGIMiddleware(
        _ok_wsgi,
        RedisKeyedRateLimiter(sync, plans=plans, name="clients", prefix="p:"),
        plan=lambda info: info.headers.get("x-plan", "free"),
    )
    got: list[Any] = []

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got.append((status, dict(fields)))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
    b"".join(wsgi(environ, start_response))
    assert items_of(got[-1][1]["RateLimit"]) == {
        "default-free-1": {"r": 1, "t": 1},
        "default-free-2": {"r": 4, "t": 10},
    }


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _discard(message: dict[str, Any]) -> None:
    return None


def items_of(value: str) -> dict[str, dict[str, Any]]:
    """A RateLimit field's text as {policy name: parameters}, without ``pk``."""
    parsed = http_sf.parse(value.encode("ascii"), tltype="list")
    return {name: {k: v for k, v in p.items() if k != "pk"} for name, p in parsed}
