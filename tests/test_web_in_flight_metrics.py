"""``max_in_flight=`` as the decision hook and the metrics see it (issue 35).

Each seat a request asks for is a decision told to ``on_decision`` (a seat taken ALLOWED, a
seat not found REFUSED, with a wait of 0), under the policy ``in-flight`` (``<name>-in-flight``
for a form given a name) and no route, with the in-flight limiter as ``limiter``: so the
metrics count the refusals and gauge the limiter's seats held. Read here from a recording hook,
from the Prometheus exporter's text in process (ASGI and WSGI, and a Flask view), from the
OpenTelemetry SDK's reader, and from a real ``/metrics`` endpoint under uvicorn while slow
views hold their seats.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.metrics")

prometheus_client = pytest.importorskip("prometheus_client")
import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from protocol_in_code.qos import LimitOutcome  # noqa: E402
from protocol_in_code.qos.asgi import DecisionEvent  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware  # noqa: E402
from protocol_in_code.qos.concurrency import (  # noqa: E402
    ConcurrencyLimiter,
    KeyedConcurrencyLimiter,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.metrics import OpenTelemetryMetrics, PrometheusMetrics  # noqa: E402
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware  # noqa: E402

#: The longest any wait here may take before the test fails: a bound, not a timing.
PATIENCE = 10.0

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(text: str) -> Samples:
    """Every sample of a Prometheus exposition: {(name, sorted labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scraped(registry: Any) -> Samples:
    return parsed(prometheus_client.generate_latest(registry).decode())


def decisions(samples: Samples, outcome: str, policy: str, enforced: str = "true") -> float:
    """The count of one label set of ``ratelimit_decisions_total`` (0 where it has none)."""
    labels = {"outcome": outcome, "policy": policy, "plan": "", "route": "", "enforced": enforced}
    key = ("ratelimit_decisions_total", tuple(sorted(labels.items())))
    return samples.get(key, 0.0)


def gauge(samples: Samples, name: str, policy: str = "in-flight") -> float | None:
    """A gauge of the form's seats (no route), ``None`` where it is not exported."""
    return samples.get((name, (("policy", policy), ("route", ""))))


class Recorded:
    """An ``on_decision`` hook that keeps every event."""

    def __init__(self) -> None:
        self.events: list[DecisionEvent] = []

    def __call__(self, event: DecisionEvent) -> None:
        self.events.append(event)

    def of(self, policy: str) -> list[DecisionEvent]:
        return [event for event in self.events if event.policy == policy]


# ---------------------------------------------------------------------------------------------
# In process: an ASGI application held on a gate, asked directly
# ---------------------------------------------------------------------------------------------


async def _gated(scope: Any, receive: Any, send: Any) -> None:
    """A view that waits on the request's gate, then answers 200."""
    await scope["gate"].wait()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _held(
    app: Any, gate: asyncio.Event, client: str = "192.0.2.1", path: str = "/"
) -> tuple[asyncio.Task[None], list[dict[str, Any]]]:
    """A request through ``app`` started as a task, run until it is answered or its view waits
    on ``gate``; the task and the messages sent so far."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "client": (client, 1)}
    scope["gate"] = gate

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never goes
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.create_task(app(scope, receive, send))
    for _ in range(50):  # bounded: a few turns of the loop answer or reach the gate
        await asyncio.sleep(0)
    return task, sent


def _status(sent: list[dict[str, Any]]) -> int | None:
    return sent[0]["status"] if sent else None


def test_a_seat_refusal_is_told_with_the_in_flight_limiter_and_no_wait() -> None:
    async def scenario() -> None:
        hook, gate = Recorded(), asyncio.Event()
        seats = KeyedConcurrencyLimiter(1)
        app = ASGIMiddleware(_gated, "100/minute", max_in_flight=seats, on_decision=hook)
        first, _ = await _held(app, gate)
        _, refused = await _held(app, gate)
        assert _status(refused) == 429
        gate.set()
        await first
        told = hook.of("in-flight")
        assert [event.outcome for event in told] == [LimitOutcome.ALLOWED, LimitOutcome.REFUSED]
        for event in told:
            assert event.limiter is seats
            assert (event.plan, event.route, event.wait_ns, event.enforced) == (None, None, 0, True)
            assert event.key is None  # not asked for
        # The rate limit is told as ever, apart: both requests were within it.
        assert [event.outcome for event in hook.of("default")] == [LimitOutcome.ALLOWED] * 2

    asyncio.run(scenario())


def test_a_request_that_asks_no_seat_tells_nothing_of_seats() -> None:
    """Refused by the rate limit, exempt, or under a key of ``None``: no seat asked, no seat
    decision told."""

    async def scenario() -> None:
        hook, gate = Recorded(), asyncio.Event()
        gate.set()
        app = ASGIMiddleware(
            _gated,
            KeyedRateLimiter(1, burst=1),
            max_in_flight=2,
            exempt=["/health"],
            key=lambda info: None if info.path == "/anonymous" else info.client,
            on_decision=hook,
        )
        answered = []
        for path in ("/", "/", "/health", "/anonymous"):
            task, sent = await _held(app, gate, path=path)
            await task
            answered.append(_status(sent))
        assert answered == [200, 429, 200, 200]
        assert [event.outcome for event in hook.of("in-flight")] == [LimitOutcome.ALLOWED]
        assert [event.outcome for event in hook.of("default")] == [
            LimitOutcome.ALLOWED,
            LimitOutcome.DENIED,
        ]

    asyncio.run(scenario())


def test_with_on_decision_key_a_keyed_seat_tells_its_key_and_one_limit_tells_none() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        for seats, key in (
            (KeyedConcurrencyLimiter(1), "192.0.2.7"),
            (ConcurrencyLimiter(1), None),
        ):
            hook = Recorded()
            app = ASGIMiddleware(
                _gated, max_in_flight=seats, on_decision=hook, on_decision_key=True
            )
            first, _ = await _held(app, gate, client="192.0.2.7")
            _, refused = await _held(app, gate, client="192.0.2.7")
            assert _status(refused) == (429 if key else 503)
            assert [event.key for event in hook.events] == [key, key]
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)

    asyncio.run(scenario())


def test_the_metrics_count_seat_refusals_and_gauge_the_seats_held_under_asgi() -> None:
    async def scenario() -> None:
        registry = prometheus_client.CollectorRegistry()
        gate = asyncio.Event()
        app = ASGIMiddleware(
            _gated, "100/minute", max_in_flight=2, on_decision=PrometheusMetrics(registry)
        )
        held = [await _held(app, gate) for _ in range(5)]
        assert [_status(sent) for _, sent in held] == [None, None, 429, 429, 429]
        samples = scraped(registry)
        assert decisions(samples, "refused", "in-flight") == 3
        assert decisions(samples, "allowed", "in-flight") == 2
        assert decisions(samples, "allowed", "default") == 5  # the rate limit, told apart
        assert gauge(samples, "ratelimit_in_flight") == 2
        assert gauge(samples, "ratelimit_in_flight_limit") == 2
        # The refusals promise no wait: the waits histogram has nothing of the seats.
        assert not [
            key for key in samples if ("policy", "in-flight") in key[1] and "wait" in key[0]
        ]
        gate.set()
        await asyncio.gather(*(task for task, _ in held))
        assert gauge(scraped(registry), "ratelimit_in_flight") == 0

    asyncio.run(scenario())


def test_under_enforce_false_a_seat_refusal_is_counted_and_the_request_goes_on() -> None:
    async def scenario() -> None:
        registry = prometheus_client.CollectorRegistry()
        gate = asyncio.Event()
        app = ASGIMiddleware(
            _gated, max_in_flight=1, enforce=False, on_decision=PrometheusMetrics(registry)
        )
        held = [await _held(app, gate) for _ in range(3)]
        assert [_status(sent) for _, sent in held] == [None, None, None]  # all three running
        samples = scraped(registry)
        assert decisions(samples, "refused", "in-flight", enforced="false") == 2
        assert decisions(samples, "allowed", "in-flight", enforced="false") == 1
        assert gauge(samples, "ratelimit_in_flight") == 1  # the seatless two hold none
        gate.set()
        await asyncio.gather(*(task for task, _ in held))
        assert [_status(sent) for _, sent in held] == [200, 200, 200]
        assert gauge(scraped(registry), "ratelimit_in_flight") == 0

    asyncio.run(scenario())


def test_the_metrics_count_seat_refusals_and_gauge_the_seats_held_under_wsgi() -> None:
    registry = prometheus_client.CollectorRegistry()
    seats = KeyedConcurrencyLimiter(1)
    app = WSGIMiddleware(
        lambda environ, start_response: (start_response("200 OK", []), [b"ok"])[1],
        max_in_flight=seats,
        on_decision=PrometheusMetrics(registry),
    )
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
    statuses: list[str] = []

    def request() -> Any:
        return app(dict(environ), lambda status, headers, *_: statuses.append(status))

    kept = request()  # its seat held until the server closes the response
    request()  # refused: no seat to give back
    assert [status.split()[0] for status in statuses] == ["200", "429"]
    samples = scraped(registry)
    assert decisions(samples, "refused", "in-flight") == 1
    assert gauge(samples, "ratelimit_in_flight") == 1
    kept.close()
    assert gauge(scraped(registry), "ratelimit_in_flight") == 0


def test_a_named_view_s_seats_are_a_policy_of_their_own() -> None:
    flask = pytest.importorskip("flask")
    from protocol_in_code.qos.for_flask import limit

    registry = prometheus_client.CollectorRegistry()
    app = flask.Flask(__name__)
    seats = ConcurrencyLimiter(1)
    held = seats.try_acquire()  # the one seat, taken elsewhere

    @app.get("/search")
    @limit(
        "100/minute", name="search", max_in_flight=seats, on_decision=PrometheusMetrics(registry)
    )
    def search() -> str:
        return "found"

    assert app.test_client().get("/search").status_code == 503
    samples = scraped(registry)
    assert decisions(samples, "refused", "search-in-flight") == 1
    assert gauge(samples, "ratelimit_in_flight", "search-in-flight") == 1
    assert held is not None
    held.release()
    assert app.test_client().get("/search").status_code == 200
    assert gauge(scraped(registry), "ratelimit_in_flight", "search-in-flight") == 0


def test_opentelemetry_counts_seat_refusals_and_gauges_the_seats_held() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    def read() -> dict[str, list[tuple[dict[str, Any], Any]]]:
        data = reader.get_metrics_data()
        assert data is not None
        return {
            metric.name: [
                (dict(point.attributes or {}), point) for point in metric.data.data_points
            ]
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }

    async def scenario() -> None:
        gate = asyncio.Event()
        metrics = OpenTelemetryMetrics(provider.get_meter("test"))
        app = ASGIMiddleware(_gated, max_in_flight=1, on_decision=metrics)
        held = [await _held(app, gate) for _ in range(2)]
        assert [_status(sent) for _, sent in held] == [None, 429]
        points = read()
        seats = {"policy": "in-flight", "route": ""}
        assert [p.value for labels, p in points["ratelimit.in_flight"] if labels == seats] == [1]
        refused = [
            p.value
            for labels, p in points["ratelimit.decisions"]
            if labels["policy"] == "in-flight" and labels["outcome"] == "refused"
        ]
        assert refused == [1]
        gate.set()
        await asyncio.gather(*(task for task, _ in held))
        points = read()
        assert [p.value for labels, p in points["ratelimit.in_flight"] if labels == seats] == [0]

    try:
        asyncio.run(scenario())
    finally:
        provider.shutdown()


# ---------------------------------------------------------------------------------------------
# Under uvicorn: slow views hold their seats, /metrics scraped over TCP
# ---------------------------------------------------------------------------------------------


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait, bounded in time, for ``condition``; fail naming ``what`` if it never holds."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.005)


def served_app(registry: Any, running: list[int], gate: threading.Event) -> Any:
    """``/slow`` counts itself running and waits on ``gate``; ``/metrics`` is the exporter."""
    exporter = prometheus_client.make_asgi_app(registry)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"].startswith("/metrics"):
            await exporter(scope, receive, send)
            return
        running.append(1)
        deadline = time.monotonic() + PATIENCE
        while not gate.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        running.pop()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"slow"})

    return ASGIMiddleware(
        app,
        "100/minute",
        max_in_flight=2,
        exempt=["/metrics"],
        on_decision=PrometheusMetrics(registry),
    )


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=PATIENCE) as one:
        yield one


def test_under_uvicorn_the_exporter_shows_seat_refusals_and_the_seats_held(
    client: httpx.Client,
) -> None:
    pytest.importorskip("uvicorn")
    from web_servers import Uvicorn

    registry = prometheus_client.CollectorRegistry()
    running: list[int] = []
    gate = threading.Event()
    server = Uvicorn(served_app(registry, running, gate)).start()
    answered: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: answered.append(client.get(server.url + "/slow").status_code),
            daemon=True,
        )
        for _ in range(4)
    ]
    try:
        for thread in threads:
            thread.start()
        eventually(lambda: len(running) == 2 and len(answered) == 2, "two running, two refused")
        assert answered == [429, 429]
        samples = parsed(client.get(server.url + "/metrics/").text)
        assert decisions(samples, "refused", "in-flight") == 2
        assert decisions(samples, "allowed", "in-flight") == 2
        assert gauge(samples, "ratelimit_in_flight") == 2
        assert gauge(samples, "ratelimit_in_flight_limit") == 2
        gate.set()
        for thread in threads:
            thread.join(PATIENCE)
        assert sorted(answered) == [200, 200, 429, 429]
        eventually(
            lambda: (
                gauge(parsed(client.get(server.url + "/metrics/").text), "ratelimit_in_flight") == 0
            ),
            "both seats given back",
        )
    finally:
        gate.set()
        server.stop()
