"""The in-flight gauge per policy (issue 35): seats held and the limit, read when scraped, and
the in-flight refusals counted as the rate refusals are, with no wait observed.

The hooks are told of decisions as the web layer tells them (``DecisionEvent``), and scraped
through each library's own reader: prometheus_client's text exposition, parsed by its parser,
and the OpenTelemetry SDK's in-memory reader.
"""

from __future__ import annotations

from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.metrics")

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from protocol_in_code.qos import (  # noqa: E402
    ConcurrencyLimiter,
    KeyedConcurrencyLimiter,
    LimitOutcome,
    RateLimiter,
)
from protocol_in_code.qos._http.told import DecisionEvent  # noqa: E402
from protocol_in_code.qos.metrics import OpenTelemetryMetrics, PrometheusMetrics  # noqa: E402

SECOND = 1_000_000_000


def event(limiter: Any, policy: str, outcome: LimitOutcome, wait_ns: int | None) -> DecisionEvent:
    return DecisionEvent(policy, None, "/api", outcome, wait_ns, True, None, limiter)


def samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample scraped: {(name, sorted labels): value}."""
    text = prometheus_client.generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def at(policy: str) -> tuple[tuple[str, str], ...]:
    return (("policy", policy), ("route", "/api"))


def test_prometheus_gauges_the_seats_held_per_policy() -> None:
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    downloads, per_client = ConcurrencyLimiter(3), KeyedConcurrencyLimiter(2)
    metrics.watch(downloads, "downloads", "/api")  # before any decision
    scraped = samples(registry)
    assert scraped[("ratelimit_in_flight", at("downloads"))] == 0
    assert scraped[("ratelimit_in_flight_limit", at("downloads"))] == 3

    held = [downloads.try_acquire(), downloads.try_acquire(2), per_client.try_acquire("k")]
    metrics(event(per_client, "per-client", LimitOutcome.ALLOWED, 0))  # found as met
    scraped = samples(registry)
    assert scraped[("ratelimit_in_flight", at("downloads"))] == 3
    assert scraped[("ratelimit_in_flight", at("per-client"))] == 1
    assert scraped[("ratelimit_in_flight_limit", at("per-client"))] == 2
    for lease in held:
        assert lease is not None
        lease.release()
    scraped = samples(registry)
    assert scraped[("ratelimit_in_flight", at("downloads"))] == 0
    assert scraped[("ratelimit_in_flight", at("per-client"))] == 0


def test_prometheus_counts_in_flight_refusals_without_a_wait() -> None:
    registry = prometheus_client.CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    seats, rate = ConcurrencyLimiter(1), RateLimiter(1)
    for _ in range(3):
        metrics(event(seats, "seats", LimitOutcome.REFUSED, 0))
    metrics(event(seats, "seats", LimitOutcome.ALLOWED, 0))
    metrics(event(rate, "rate", LimitOutcome.DENIED, 2 * SECOND))
    scraped = samples(registry)
    labels = (("enforced", "true"), ("outcome", "refused"), ("plan", ""), *at("seats"))
    assert scraped[("ratelimit_decisions_total", tuple(sorted(labels)))] == 3
    waits = (("plan", ""), *at("seats"))
    assert ("ratelimit_wait_seconds_count", tuple(sorted(waits))) not in scraped
    rate_waits = tuple(sorted((("plan", ""), *at("rate"))))
    assert scraped[("ratelimit_wait_seconds_count", rate_waits)] == 1


def test_opentelemetry_gauges_the_seats_held_and_records_no_wait_for_refusals() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics = OpenTelemetryMetrics(provider.get_meter("test"))
    seats, rate = KeyedConcurrencyLimiter(4), RateLimiter(1)
    held = seats.try_acquire("a", 3)
    metrics(event(seats, "seats", LimitOutcome.REFUSED, 0))
    metrics(event(rate, "rate", LimitOutcome.DENIED, SECOND))

    read: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                read[metric.name] = [
                    (dict(point.attributes or {}), point) for point in metric.data.data_points
                ]
    gauge = {"policy": "seats", "route": "/api"}
    assert [point.value for labels, point in read["ratelimit.in_flight"] if labels == gauge] == [3]
    limits = read["ratelimit.in_flight.limit"]
    assert [point.value for labels, point in limits if labels == gauge] == [4]
    assert [labels["policy"] for labels, _ in read["ratelimit.wait"]] == ["rate"]
    refused = [p.value for labels, p in read["ratelimit.decisions"] if labels["policy"] == "seats"]
    assert refused == [1]
    assert held is not None
    held.release()
    provider.shutdown()
