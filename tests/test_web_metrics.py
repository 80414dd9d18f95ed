"""protocol_in_code.qos.metrics, scraped from a real ``/metrics`` endpoint under uvicorn.

The FastAPI example is served with a metrics adapter as its ``on_decision`` hook and
prometheus_client's ASGI app mounted on ``/metrics``; requests go to it over TCP, and the
scraped text is parsed with prometheus_client's own parser. For OpenTelemetry, the SDK's
meter provider exports through its Prometheus reader to the same kind of endpoint. The
limiters read a clock the test holds, so every count and wait is exact.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.metrics")

pytest.importorskip("fastapi")
prometheus_client = pytest.importorskip("prometheus_client")
import httpx  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from qos_support import REPO_ROOT  # noqa: E402
from web_servers import Uvicorn  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "web"))

import fastapi_app  # noqa: E402
from protocol_in_code.qos import Band  # noqa: E402
from protocol_in_code.qos.asgi import Route  # noqa: E402
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.limiter import RateLimiter  # noqa: E402
from protocol_in_code.qos.metrics import OpenTelemetryMetrics, PrometheusMetrics  # noqa: E402

SECOND = 1_000_000_000
T0 = 1_000 * SECOND


def clock() -> int:
    return T0


@pytest.fixture
def clients() -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two clients on two loopback addresses: two keys."""
    one = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=10)
    two = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10)
    yield one, two
    one.close()
    two.close()


def served(hook: Any, registry: Any) -> Uvicorn:
    """The example app, limited per client (2/s, bursts of 5, at most 10 keys) and on /api
    by one shared limit (1/s, burst 1), with ``hook`` told of every decision, and /metrics."""
    app = fastapi_app.create_app(
        KeyedRateLimiter(2, burst=5, max_keys=10, clock=clock),
        routes=[Route("/api", RateLimiter(1, burst=1, clock=clock), name="api")],
        exempt=["/health", "/metrics"],
        on_decision=hook,
    )
    app.mount("/metrics", prometheus_client.make_asgi_app(registry))
    return Uvicorn(app).start()


def traffic(url: str, one: httpx.Client, two: httpx.Client) -> None:
    """6 requests from one client (5 allowed, 1 denied, a wait of 500 ms), 1 from another,
    2 on /api (1 allowed, 1 denied, a wait of 1 s), and 3 on the exempt /health."""
    assert [one.get(url + "/").status_code for _ in range(6)] == [200] * 5 + [429]
    assert two.get(url + "/").status_code == 200
    assert [one.get(url + "/api").status_code for _ in range(2)] == [404, 429]
    assert [one.get(url + "/health").status_code for _ in range(3)] == [200] * 3


def scrape(url: str, client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at /metrics: {(name, sorted labels): value}."""
    response = client.get(url + "/metrics/")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    """One sample's value, the labels given matched exactly (others, such as OpenTelemetry's
    scope labels, ignored)."""
    found = [
        value
        for (sample_name, sample_labels), value in samples.items()
        if sample_name == name and labels.items() <= dict(sample_labels).items()
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def check(samples: dict[Any, float]) -> None:
    decisions = "ratelimit_decisions_total"
    for outcome, policy, route, count in (
        ("allowed", "default", "", 6),
        ("denied", "default", "", 1),
        ("allowed", "api", "/api", 1),
        ("denied", "api", "/api", 1),
    ):
        got = sample(samples, decisions, outcome=outcome, policy=policy, route=route)
        assert got == count, (outcome, policy)
    assert not [key for key in samples if key[0] == decisions and ("outcome", "never") in key[1]]
    # The waits of refusals: 500 ms on the default policy, 1 s on /api.
    assert sample(samples, "ratelimit_wait_seconds_count", policy="default", route="") == 1
    assert sample(samples, "ratelimit_wait_seconds_sum", policy="default", route="") == 0.5
    assert sample(samples, "ratelimit_wait_seconds_sum", policy="api", route="/api") == 1.0
    # The keyed table: two clients remembered, of at most 10; the shared limit has no table.
    assert sample(samples, "ratelimit_keys", policy="default", route="") == 2
    assert sample(samples, "ratelimit_keys_max", policy="default", route="") == 10
    assert not [
        key for key in samples if key[0] == "ratelimit_keys" and ("policy", "api") in key[1]
    ]
    # No client's address is a label anywhere.
    assert not [key for key in samples if any("127.0.0" in value for _, value in key[1])]


def test_prometheus_metrics_scraped_from_uvicorn(clients):
    registry = prometheus_client.CollectorRegistry()
    server = served(PrometheusMetrics(registry), registry)
    try:
        traffic(server.url, *clients)
        samples = scrape(server.url, clients[0])
    finally:
        server.stop()
    check(samples)
    # Every decision was enforced.
    assert not [key for key in samples if ("enforced", "false") in key[1]]


def test_prometheus_counts_shadow_decisions_apart(clients):
    registry = prometheus_client.CollectorRegistry()
    app = fastapi_app.create_app(
        KeyedRateLimiter(1, burst=1, clock=clock),
        exempt=["/metrics"],
        enforce=False,
        on_decision=PrometheusMetrics(registry),
    )
    app.mount("/metrics", prometheus_client.make_asgi_app(registry))
    server = Uvicorn(app).start()
    try:
        assert [clients[0].get(server.url + "/").status_code for _ in range(3)] == [200] * 3
        samples = scrape(server.url, clients[0])
    finally:
        server.stop()
    decisions = "ratelimit_decisions_total"
    assert sample(samples, decisions, outcome="allowed", enforced="false") == 1
    assert sample(samples, decisions, outcome="denied", enforced="false") == 2


def test_with_plans_the_keys_and_the_most_keys_count_every_plan(clients):
    """A limiter with plans keeps a table of ``max_keys`` per plan. Two clients under each of
    two plans fill both tables (2 keys each): ``ratelimit_keys`` says 4, and
    ``ratelimit_keys_max`` must say 4 too, every plan's room, not one plan's 2 (which read as
    twice as many keys as the limiter may hold). A third client is then refused for room."""
    registry = prometheus_client.CollectorRegistry()
    plans = {"free": Band(1, burst=2, per=60), "pro": Band(10, burst=5)}
    app = fastapi_app.create_app(
        KeyedRateLimiter(plans=plans, max_keys=2, clock=clock),
        plan=lambda info: info.headers.get("x-plan", "free"),
        exempt=["/metrics"],
        on_decision=PrometheusMetrics(registry),
    )
    app.mount("/metrics", prometheus_client.make_asgi_app(registry))
    server = Uvicorn(app).start()
    third = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.3"), timeout=10)
    try:
        for client in clients:
            for plan in plans:
                assert client.get(server.url + "/", headers={"x-plan": plan}).status_code == 200
        assert third.get(server.url + "/", headers={"x-plan": "pro"}).status_code == 503
        samples = scrape(server.url, clients[0])
    finally:
        third.close()
        server.stop()
    keys = sample(samples, "ratelimit_keys", policy="default", route="")
    most = sample(samples, "ratelimit_keys_max", policy="default", route="")
    assert (keys, most) == (4, 4)


def test_opentelemetry_metrics_scraped_from_uvicorn(clients):
    pytest.importorskip("opentelemetry.sdk")
    exporter = pytest.importorskip("opentelemetry.exporter.prometheus")
    from opentelemetry.sdk.metrics import MeterProvider

    reader = exporter.PrometheusMetricReader()  # registers with prometheus_client's REGISTRY
    provider = MeterProvider(metric_readers=[reader])
    try:
        metrics = OpenTelemetryMetrics(provider.get_meter("test"))
        server = served(metrics, prometheus_client.REGISTRY)
        try:
            traffic(server.url, *clients)
            samples = scrape(server.url, clients[0])
        finally:
            server.stop()
    finally:
        provider.shutdown()  # and the reader leaves the registry
    check(samples)


def test_prometheus_counts_every_decision_of_many_threads():
    # Counted without a lock (itertools.count): none is lost however the threads interleave.
    import threading

    from protocol_in_code.qos import LimitOutcome
    from protocol_in_code.qos.asgi import DecisionEvent

    metrics = PrometheusMetrics(prometheus_client.CollectorRegistry())
    events = [
        DecisionEvent("default", None, None, outcome, 0, True, None, None)
        for outcome in (LimitOutcome.ALLOWED, LimitOutcome.DENIED)
    ]

    def decide() -> None:
        for i in range(20_000):
            metrics(events[i % 2])

    threads = [threading.Thread(target=decide) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert metrics.decisions() == {
        ("allowed", "default", "", "", "true"): 80_000,
        ("denied", "default", "", "", "true"): 80_000,
    }
