"""What a rate-limit middleware adds to a trivial endpoint, against slowapi and flask-limiter.

Run from the repository root after installing the package with ``'.[test,bench]'``::

    python3 bench/bench_web.py [--rounds 15]

The same Starlette application (one route answering ``ok``) is timed bare, behind our ASGI
middleware and behind slowapi's ``SlowAPIMiddleware``; the same Flask application bare, behind
our WSGI middleware and behind flask-limiter. Each is called in process, as its server would
call it, with no socket in the way, so the difference from the bare application is the
middleware's own cost. Every limiter allows every request (a huge rate), keyed by the client's
address, with in-memory storage. Ours adds the RateLimit fields to every response (its
default); the peers add no headers (theirs). Interleaved rounds in one run; medians and
ratios, not absolute times.

With ``max_in_flight=4``: a seat taken and given back per request, kept in the process and in
the host's shared table (the default store), each against the same middleware without one.

With ``on_decision`` (the metrics hook): a no-op hook, and the Prometheus adapter of
:mod:`protocol_in_code.qos.metrics` (under both servers), each against the same middleware
without one. And the decision step alone, as the middleware makes it, with no hook: without a
hook the middleware calls the limiter's own ``check`` (the hook is a wrapper put in its place
at construction), so this is ``rule.decider.check(key, 1)`` against the
``rule.limiter.check(key, 1)`` it replaced, the difference being all that having no hook costs
a decision.

Then the event loop's longest stall while 1,000 concurrent requests go through the ASGI
middleware, most of them refused: with a wait of one second and of one day, to show that a
refusal costs the same, never a sleep; and through the bare application, for scale. A stall is
the time between two turns of a task that only yields, so it includes the turn in which the
1,000 request tasks run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from timing import median_ns

HUGE = 10**12
PER_RUN = 200  # requests per timed run
SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/",
    "raw_path": b"/",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"bench"), (b"user-agent", b"bench")],
    "client": ("192.0.2.1", 40000),
    "server": ("127.0.0.1", 8000),
}


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", ok)])


def asgi_case(app: Any) -> tuple[str, dict[str, object], int]:
    loop = asyncio.new_event_loop()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    async def requests() -> None:
        for _ in range(PER_RUN):
            await app(dict(SCOPE), receive, send)

    return "loop.run_until_complete(requests())", {"loop": loop, "requests": requests}, PER_RUN


def starlette_bare() -> tuple[str, dict[str, object], int]:
    return asgi_case(starlette_app())


def starlette_ours() -> tuple[str, dict[str, object], int]:
    return asgi_case(ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE)))


def starlette_ours_no_fields() -> tuple[str, dict[str, object], int]:
    app = ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE), headers_on_allowed=False)
    return asgi_case(app)


def starlette_ours_noop_hook() -> tuple[str, dict[str, object], int]:
    app = ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE), on_decision=lambda event: None)
    return asgi_case(app)


def starlette_ours_prometheus() -> tuple[str, dict[str, object], int]:
    from prometheus_client import CollectorRegistry
    from protocol_in_code.qos.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(CollectorRegistry())
    return asgi_case(ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE), on_decision=metrics))


def _seats_folder() -> Path:
    """A folder of this run's own for the shared in-flight tables (the default store's)."""
    return Path(tempfile.mkdtemp(prefix="bench-web-seats-"))


def starlette_seats_process() -> tuple[str, dict[str, object], int]:
    app = ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE), max_in_flight=4, store="process")
    return asgi_case(app)


def starlette_seats_shared() -> tuple[str, dict[str, object], int]:
    app = ASGIMiddleware(
        starlette_app(), KeyedRateLimiter(HUGE), max_in_flight=4, store=_seats_folder()
    )
    return asgi_case(app)


def starlette_slowapi() -> tuple[str, dict[str, object], int]:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIMiddleware
    from slowapi.util import get_remote_address

    app = starlette_app()
    app.state.limiter = Limiter(key_func=get_remote_address, default_limits=[f"{HUGE}/second"])
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIMiddleware)
    return asgi_case(app)


def flask_app() -> Any:
    from flask import Flask

    app = Flask(__name__)

    @app.get("/")
    def ok() -> str:
        return "ok"

    return app


def wsgi_case(app: Callable[..., Any]) -> tuple[str, dict[str, object], int]:
    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        return None

    base = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "192.0.2.1",
        "HTTP_HOST": "bench",
        "wsgi.url_scheme": "http",
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }

    def requests() -> None:
        for _ in range(PER_RUN):
            environ = dict(base)
            environ["wsgi.input"] = io.BytesIO()
            body = app(environ, start_response)
            for _chunk in body:
                pass
            close = getattr(body, "close", None)
            if close is not None:
                close()

    return "requests()", {"requests": requests}, PER_RUN


def flask_bare() -> tuple[str, dict[str, object], int]:
    return wsgi_case(flask_app().wsgi_app)


def flask_ours() -> tuple[str, dict[str, object], int]:
    app = flask_app()
    return wsgi_case(WSGIMiddleware(app.wsgi_app, KeyedRateLimiter(HUGE)))


def flask_seats_process() -> tuple[str, dict[str, object], int]:
    app = flask_app()
    seated = WSGIMiddleware(app.wsgi_app, KeyedRateLimiter(HUGE), max_in_flight=4, store="process")
    return wsgi_case(seated)


def flask_seats_shared() -> tuple[str, dict[str, object], int]:
    app = flask_app()
    seated = WSGIMiddleware(
        app.wsgi_app, KeyedRateLimiter(HUGE), max_in_flight=4, store=_seats_folder()
    )
    return wsgi_case(seated)


def flask_ours_prometheus() -> tuple[str, dict[str, object], int]:
    from prometheus_client import CollectorRegistry
    from protocol_in_code.qos.metrics import PrometheusMetrics

    app = flask_app()
    metrics = PrometheusMetrics(CollectorRegistry())
    return wsgi_case(WSGIMiddleware(app.wsgi_app, KeyedRateLimiter(HUGE), on_decision=metrics))


def decision_case(statement: str, hook: Any = None) -> tuple[str, dict[str, object], int]:
    """``statement`` run PER_RUN times on the middleware's rule, with ``hook`` or none."""
    rule = ASGIMiddleware(starlette_app(), KeyedRateLimiter(HUGE), on_decision=hook).rules.rules[0]
    loop = f"for _ in range({PER_RUN}):\n    {statement}"
    return loop, {"rule": rule, "key": "192.0.2.1"}, PER_RUN


def decision_limiter_check() -> tuple[str, dict[str, object], int]:
    return decision_case("rule.limiter.check(key, 1)")


def decision_no_hook() -> tuple[str, dict[str, object], int]:
    return decision_case("rule.decider.check(key, 1)")


def decision_noop_hook() -> tuple[str, dict[str, object], int]:
    return decision_case("rule.decider.check(key, 1)", lambda event: None)


def decision_prometheus() -> tuple[str, dict[str, object], int]:
    from prometheus_client import CollectorRegistry
    from protocol_in_code.qos.metrics import PrometheusMetrics

    return decision_case("rule.decider.check(key, 1)", PrometheusMetrics(CollectorRegistry()))


def flask_flask_limiter() -> tuple[str, dict[str, object], int]:
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    app = flask_app()
    Limiter(get_remote_address, app=app, default_limits=[f"{HUGE}/second"], storage_uri="memory://")
    return wsgi_case(app.wsgi_app)


def paired(cases: dict[str, Any], rounds: int, number: int) -> dict[str, float]:
    """Each case's time as a share of the first's: the median, over rounds, of the ratio of
    two runs made back to back (their order alternating). On a shared machine whose speed
    drifts from second to second, a few percent show this way, not as medians apart."""
    ready = {name: make() for name, make in cases.items()}
    names = list(ready)
    base = names[0]
    ratios: dict[str, list[float]] = {name: [] for name in names[1:]}
    for i in range(rounds * 3):
        for name in names[1:]:
            order = (base, name) if i % 2 else (name, base)
            got = {}
            for which in order:
                stmt, namespace, per_run = ready[which]
                runs = max(1, number // per_run)
                got[which] = timeit.timeit(stmt, globals=namespace, number=runs) / runs
            ratios[name].append(got[name] / got[base])
    return {name: statistics.median(values) for name, values in ratios.items()}


def minimum_ns(cases: dict[str, Any], repeats: int = 25, number: int = 20_000) -> dict[str, float]:
    """The fastest of ``repeats`` runs of ``number`` calls of each case, the cases alternating:
    the noise of a shared machine only ever adds time, so the minimum shows differences of a
    few nanoseconds that medians do not."""
    ready = {name: make() for name, make in cases.items()}
    best = dict.fromkeys(ready, float("inf"))
    for _ in range(repeats):
        for name, (stmt, namespace, per_run) in ready.items():
            runs = max(1, number // per_run)
            ns = timeit.timeit(stmt, globals=namespace, number=runs) / (runs * per_run) * 1e9
            best[name] = min(best[name], ns)
    return best


def table(title: str, bare: str, results: dict[str, float]) -> None:
    print(f"\n{title}")
    print(f"| {'application':<38} | {'per request':>12} | {'added':>10} |")
    print(f"|{'-' * 40}|{'-' * 13}:|{'-' * 11}:|")
    base = results[bare]
    for name, ns in results.items():
        added = "" if name == bare else f"{(ns - base) / 1000:.1f} µs"
        print(f"| {name:<38} | {ns / 1000:>9.1f} µs | {added:>10} |")


def stall(wait_rate: Any, requests: int = 1000) -> tuple[float, int]:
    """The longest the event loop went unanswered, in ms, while ``requests`` concurrent requests
    went through the middleware; and how many were allowed."""
    app = starlette_app()
    if wait_rate is not None:
        app = ASGIMiddleware(app, RateLimiter(wait_rate, burst=10))
    allowed = 0

    async def one() -> None:
        nonlocal allowed
        status = 0

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(dict(SCOPE), receive, send)
        allowed += status == 200

    async def main() -> float:
        worst = 0.0
        done = False

        async def ticker() -> None:
            nonlocal worst
            while not done:
                before = time.perf_counter()
                await asyncio.sleep(0)
                worst = max(worst, time.perf_counter() - before)

        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(one() for _ in range(requests)))
        done = True
        await tick
        return worst * 1000

    return asyncio.run(main()), allowed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    number = PER_RUN * 5

    asgi = median_ns(
        {
            "Starlette, bare": starlette_bare,
            "Starlette + ours (ASGI)": starlette_ours,
            "Starlette + ours, no fields on 200": starlette_ours_no_fields,
            "Starlette + ours, no-op on_decision": starlette_ours_noop_hook,
            "Starlette + ours + Prometheus": starlette_ours_prometheus,
            "Starlette + slowapi": starlette_slowapi,
        },
        args.rounds,
        number,
    )
    wsgi = median_ns(
        {
            "Flask, bare": flask_bare,
            "Flask + ours (WSGI)": flask_ours,
            "Flask + ours + Prometheus": flask_ours_prometheus,
            "Flask + flask-limiter": flask_flask_limiter,
        },
        args.rounds,
        number,
    )
    table("ASGI (Starlette), median per request", "Starlette, bare", asgi)
    table("WSGI (Flask), median per request", "Flask, bare", wsgi)

    print("\nratios of the time added (ours / peer's; the target is at most 0.2):")
    ours_asgi = asgi["Starlette + ours (ASGI)"] - asgi["Starlette, bare"]
    ours_wsgi = wsgi["Flask + ours (WSGI)"] - wsgi["Flask, bare"]
    if "Starlette + slowapi" in asgi:
        peer = asgi["Starlette + slowapi"] - asgi["Starlette, bare"]
        print(f"  ours / slowapi       = {ours_asgi / peer:.3f}")
    if "Flask + flask-limiter" in wsgi:
        peer = wsgi["Flask + flask-limiter"] - wsgi["Flask, bare"]
        print(f"  ours / flask-limiter = {ours_wsgi / peer:.3f}")

    print("\nthe metrics hook, against the same middleware without one (paired runs):")
    for label, cases in (
        (
            "ASGI",
            {
                "Starlette + ours (ASGI)": starlette_ours,
                "no-op on_decision": starlette_ours_noop_hook,
                "Prometheus": starlette_ours_prometheus,
            },
        ),
        ("WSGI", {"Flask + ours (WSGI)": flask_ours, "Prometheus": flask_ours_prometheus}),
    ):
        for name, ratio in paired(cases, args.rounds, number).items():
            print(f"  {label} {name:<22} {(ratio - 1) * 100:+5.1f}% a request")

    print("\na seat per request (max_in_flight=4), against the same middleware without one:")
    for label, cases in (
        (
            "ASGI",
            {
                "Starlette + ours (ASGI)": starlette_ours,
                "a seat in the process": starlette_seats_process,
                "a seat in the host's table": starlette_seats_shared,
            },
        ),
        (
            "WSGI",
            {
                "Flask + ours (WSGI)": flask_ours,
                "a seat in the process": flask_seats_process,
                "a seat in the host's table": flask_seats_shared,
            },
        ),
    ):
        for name, ratio in paired(cases, args.rounds, number).items():
            print(f"  {label} {name:<26} {(ratio - 1) * 100:+5.1f}% a request")

    decisions = median_ns(
        {
            "rule.limiter.check (before hooks)": decision_limiter_check,
            "rule.decider.check, no hook": decision_no_hook,
            "rule.decider.check, no-op hook": decision_noop_hook,
            "rule.decider.check, Prometheus": decision_prometheus,
        },
        args.rounds,
        number * 5,
    )
    print("\nthe decision step alone (a keyed check, median per decision):")
    base = decisions["rule.limiter.check (before hooks)"]
    for name, ns in decisions.items():
        print(f"  {name:<36} {ns:7.1f} ns  ({ns - base:+6.1f} ns)")
    fastest = minimum_ns(
        {
            "rule.limiter.check (before hooks)": decision_limiter_check,
            "rule.decider.check, no hook": decision_no_hook,
            "rule.decider.check, Prometheus": decision_prometheus,
        }
    )
    print("  the fastest of 25 alternating runs of 20,000 decisions each:")
    base = fastest["rule.limiter.check (before hooks)"]
    for name, ns in fastest.items():
        print(f"  {name:<36} {ns:7.1f} ns  ({ns - base:+6.1f} ns)")
    added = fastest["rule.decider.check, Prometheus"] - base
    for label, results, ours in (
        ("ASGI", asgi, "Starlette + ours (ASGI)"),
        ("WSGI", wsgi, "Flask + ours (WSGI)"),
    ):
        share = added / results[ours] * 100
        print(f"  Prometheus's {added:.0f} ns, of a median {label} request: {share:.1f}%")

    print("\n1,000 concurrent requests through the ASGI middleware, burst 10:")
    for label, rate in (("no middleware", None), ("wait of 1 s", 1), ("wait of 1 day", "1/day")):
        worst, allowed = stall(rate)
        print(f"  {label:<14} longest event-loop stall {worst:6.2f} ms, {allowed} allowed")


if __name__ == "__main__":
    main()
