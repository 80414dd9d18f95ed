"""The middleware's decisions as metrics: Prometheus (``prometheus_client``) and OpenTelemetry.

Each adapter is an ``on_decision`` hook for :class:`protocol_in_code.qos.asgi.RateLimitMiddleware`
and its WSGI twin::

    from prometheus_client import make_asgi_app
    from protocol_in_code.qos.metrics import PrometheusMetrics

    app.add_middleware(
        RateLimitMiddleware, limiter=limiter, on_decision=PrometheusMetrics(), exempt=["/metrics"]
    )
    app.mount("/metrics", make_asgi_app())

and records, for every decision:

* a counter of decisions by ``outcome`` (``allowed``, ``denied``, ``never``, ``refused``),
  ``policy`` (the limit's name), ``plan`` (the client's plan, for a limiter with plans; ``""``
  otherwise), ``route`` (the matched route's prefix, ``""`` for the middleware's own
  limiter), and ``enforced`` (``"false"`` under ``enforce=False``, where the outcome was only
  said);
* a histogram of the waits refusals gave (DENIED and REFUSED; an allowed request waits 0 and
  a NEVER has no wait), in seconds, by policy, plan and route;
* the occupancy of each keyed table met (a limiter with ``len()`` and ``max_keys``): keys
  remembered and the most it may, by policy and route, read when scraped. A limiter with
  plans has a table of ``max_keys`` per plan: both count every plan's (the most is
  ``max_keys`` times the plans);
* an in-flight gauge for each in-flight limiter met (how many at once,
  :mod:`protocol_in_code.qos.concurrency`): the seats held now (over every key of a keyed one)
  and the limit, by policy and route, read when scraped. Its refusals are decisions like any
  other, counted by outcome (REFUSED, or NEVER for more seats than the limit); they promise no
  wait (a seat comes free when a holder gives it back), so they are not in the waits
  histogram.

No label is ever the client's key: a label set per policy, plan and route, however many
clients.

Both libraries are optional extras: ``pip install 'protocol-in-code-qos[prometheus]'`` or
``[otel]``. Nothing is imported from them until an adapter is made.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from protocol_in_code._native import LimitOutcome
from protocol_in_code.qos._http.told import DecisionEvent
from protocol_in_code.qos.interfaces import holds_seats

__all__ = ["OpenTelemetryMetrics", "PrometheusMetrics"]

#: Buckets of the waits histogram, in seconds: from a millisecond to a day.
WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0, 86400.0)

_OUTCOMES = {
    LimitOutcome.ALLOWED: "allowed",
    LimitOutcome.DENIED: "denied",
    LimitOutcome.NEVER: "never",
    LimitOutcome.REFUSED: "refused",
}


_ALLOWED = LimitOutcome.ALLOWED
#: What a decision is counted under: the outcome (by identity), policy, plan, route, enforced.
_Where = tuple[int, str, "str | None", "str | None", bool]
#: How many allowed events are remembered by identity (one per limit is what the middleware
#: makes; more are forgotten, all at once, and found again by their labels).
EVENTS_KEPT = 64


def _plan(plan: str | None) -> str:
    return "" if plan is None else plan


def _route(route: str | None) -> str:
    return "" if route is None else route


class _Tables:
    """The keyed tables and the in-flight limiters met in decisions, by (policy, route): read
    when metrics are collected."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], Any] = {}
        self._seats: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def meet(self, event: DecisionEvent) -> None:
        where = (event.policy, _route(event.route))
        if where in self._tables or where in self._seats:
            return
        self.watch(event.limiter, event.policy, event.route)

    def watch(self, limiter: Any, policy: str, route: str | None = None) -> None:
        where = (policy, _route(route))
        if holds_seats(limiter):
            with self._lock:
                self._seats.setdefault(where, limiter)
            return
        has_len = callable(getattr(limiter, "__len__", None))
        table = limiter if has_len and hasattr(limiter, "max_keys") else None
        with self._lock:
            self._tables.setdefault(where, table)

    def occupancy(self) -> Iterator[tuple[str, str, int, int]]:
        """(policy, route, keys remembered, the most it may remember) for every keyed table
        met (see :func:`_most_keys`)."""
        with self._lock:
            tables = list(self._tables.items())
        for (policy, route), table in tables:
            if table is not None:
                yield policy, route, len(table), _most_keys(table)

    def in_flight(self) -> Iterator[tuple[str, str, int, int]]:
        """(policy, route, seats held now, the limit) for every in-flight limiter met whose
        ``in_flight`` is read at once (an asyncio limiter's would be awaited: it has none to
        read at a scrape)."""
        with self._lock:
            seats = list(self._seats.items())
        for (policy, route), limiter in seats:
            held = getattr(limiter, "in_flight", None)
            if type(held) is int:
                yield policy, route, held, int(limiter.limit)


def _most_keys(table: Any) -> int:
    """The most keys ``table`` may remember, counted as ``len()`` counts them. A limiter with
    plans keeps a table of ``max_keys`` per plan, and its ``len()`` adds up every plan's keys:
    its most is every plan's room, ``max_keys`` times the plans, so that the keys are never
    more than their most and their ratio is the share of the room in use."""
    plans = getattr(table, "plans", None)
    return int(table.max_keys) * (len(plans) if plans else 1)


def _counted(counter: itertools.count[int]) -> int:
    """How many times ``next()`` was called on ``counter`` (made ``itertools.count()``): its
    repr is ``count(N)``, read without advancing it."""
    return int(repr(counter)[6:-1])


class PrometheusMetrics:
    """An ``on_decision`` hook counting decisions in ``prometheus_client`` metrics.

    ``registry`` is where the metrics are registered (``prometheus_client.REGISTRY`` by
    default); ``prefix`` starts every name. The metrics are ``{prefix}_decisions_total``
    (outcome, policy, plan, route, enforced), ``{prefix}_wait_seconds`` (a histogram, policy,
    plan and route), ``{prefix}_keys`` and ``{prefix}_keys_max`` (gauges, policy and
    route: for a limiter with plans, both count every plan's table), and ``{prefix}_in_flight``
    and ``{prefix}_in_flight_limit`` (gauges, policy and route: an in-flight limiter's seats
    held and its limit).

    The decisions are counted in ``itertools.count`` objects, one per label set, whose
    ``next()`` is one call into C that the interpreter lock keeps whole, and are read when
    scraped: a ``prometheus_client.Counter``'s ``inc()`` takes a lock and is several times
    slower, and this runs for every request.

    Keyed tables and in-flight limiters are found as decisions meet them; :meth:`watch` adds
    one before its first request.
    """

    def __init__(
        self,
        registry: Any = None,
        *,
        prefix: str = "ratelimit",
        buckets: Iterable[float] = WAIT_BUCKETS,
    ) -> None:
        from prometheus_client import REGISTRY, Histogram

        if registry is None:
            registry = REGISTRY
        self.prefix = prefix
        self.waits = Histogram(
            f"{prefix}_wait_seconds",
            "The waits refused requests were given, in seconds.",
            ["policy", "plan", "route"],
            buckets=tuple(buckets),
            registry=registry,
        )
        self.tables = _Tables()
        self._counts: dict[_Where, itertools.count[int]] = {}
        self._labels: dict[_Where, tuple[str, str, str, str, str]] = {}
        # Where an in-flight limiter decided: its refusals promise no wait to observe.
        self._no_waits: set[_Where] = set()
        self._seen: dict[int, tuple[DecisionEvent, itertools.count[int]]] = {}
        self._new = threading.Lock()
        # The histogram's labelled children, by what labels them: labels() is a lock and a
        # dict of its own on every call.
        self._histograms: dict[tuple[str, str | None, str | None], Any] = {}
        registry.register(_PrometheusCollector(self))

    def watch(self, limiter: Any, policy: str = "default", route: str | None = None) -> None:
        """Report ``limiter``'s occupancy (if it is a keyed table) or its seats held (if it is
        an in-flight limiter) under ``policy`` and ``route`` from now on, before any decision
        meets it."""
        self.tables.watch(limiter, policy, route)

    def __call__(self, event: DecisionEvent) -> None:
        # The middleware tells of every allowed decision of a limit with one event object:
        # found by identity, it is counted without reading it. The event is held with its
        # counter, so its id is not another's while the entry lasts.
        seen = self._seen.get(id(event))
        if seen is not None and seen[0] is event:
            next(seen[1])
            return
        # One unpacking, not an attribute read per field; the outcome by identity (members
        # are singletons), since an Enum's hash is Python code.
        policy, plan, route, outcome, wait_ns, enforced, _, _ = event
        where = (id(outcome), policy, plan, route, enforced)
        counts = self._counts.get(where)
        if counts is None:
            with self._new:
                counts = self._counts.setdefault(where, itertools.count())
                self._labels[where] = (
                    _OUTCOMES[outcome],
                    policy,
                    _plan(plan),
                    _route(route),
                    "true" if enforced else "false",
                )
                if holds_seats(event.limiter):
                    self._no_waits.add(where)
            self.tables.meet(event)
        next(counts)
        if outcome is _ALLOWED and event.key is None:
            if len(self._seen) >= EVENTS_KEPT:
                self._seen.clear()
            self._seen[id(event)] = (event, counts)
        elif wait_ns is not None and where not in self._no_waits:
            place = (policy, plan, route)
            histogram = self._histograms.get(place)
            if histogram is None:
                histogram = self.waits.labels(policy, _plan(plan), _route(route))
                self._histograms[place] = histogram
            histogram.observe(wait_ns / 1e9)

    def decisions(self) -> dict[tuple[str, str, str, str, str], int]:
        """The decisions counted so far: {(outcome, policy, plan, route, enforced): count}, as
        labelled."""
        with self._new:
            counts = [(self._labels[where], counter) for where, counter in self._counts.items()]
        return {labels: _counted(counter) for labels, counter in counts}


class _PrometheusCollector:
    """The decisions and the keyed tables' occupancy, read at each scrape."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        prefix = self.metrics.prefix
        decisions = CounterMetricFamily(
            f"{prefix}_decisions",
            "Rate-limit decisions, by outcome, policy, plan and route.",
            labels=["outcome", "policy", "plan", "route", "enforced"],
        )
        for labels, count in self.metrics.decisions().items():
            decisions.add_metric(list(labels), count)
        yield decisions
        keys = GaugeMetricFamily(
            f"{prefix}_keys",
            "Keys a keyed limiter remembers.",
            labels=["policy", "route"],
        )
        most = GaugeMetricFamily(
            f"{prefix}_keys_max",
            "The most keys a keyed limiter may remember (max_keys).",
            labels=["policy", "route"],
        )
        for policy, route, count, max_keys in self.metrics.tables.occupancy():
            keys.add_metric([policy, route], count)
            most.add_metric([policy, route], max_keys)
        yield keys
        yield most
        held = GaugeMetricFamily(
            f"{prefix}_in_flight",
            "Seats an in-flight limiter has held now (over every key of a keyed one).",
            labels=["policy", "route"],
        )
        limit = GaugeMetricFamily(
            f"{prefix}_in_flight_limit",
            "The seats an in-flight limiter has (for each key, in a keyed one).",
            labels=["policy", "route"],
        )
        for policy, route, count, most_seats in self.metrics.tables.in_flight():
            held.add_metric([policy, route], count)
            limit.add_metric([policy, route], most_seats)
        yield held
        yield limit


class OpenTelemetryMetrics:
    """An ``on_decision`` hook recording decisions as OpenTelemetry metrics.

    ``meter`` is the meter to record with (``opentelemetry.metrics.get_meter(...)`` of the
    global meter provider by default). The instruments are ``{prefix}.decisions`` (a counter;
    attributes outcome, policy, plan, route, enforced), ``{prefix}.wait`` (a histogram, in
    seconds; policy, plan, route), ``{prefix}.keys`` and ``{prefix}.keys.max``, and
    ``{prefix}.in_flight`` and ``{prefix}.in_flight.limit`` (observable gauges; policy, route).
    Whatever reader the meter provider has exports them
    (the Prometheus one serves them as ``{prefix}_decisions_total``,
    ``{prefix}_wait_seconds``...).
    """

    def __init__(self, meter: Any = None, *, prefix: str = "ratelimit") -> None:
        from opentelemetry import metrics

        if meter is None:
            meter = metrics.get_meter("protocol_in_code.qos")
        self.decisions = meter.create_counter(
            f"{prefix}.decisions",
            unit="{decision}",
            description="Rate-limit decisions, by outcome, policy, plan and route.",
        )
        self.waits = meter.create_histogram(
            f"{prefix}.wait",
            unit="s",
            description="The waits refused requests were given.",
        )
        self.tables = _Tables()
        meter.create_observable_gauge(
            f"{prefix}.keys",
            callbacks=[self._keys],
            unit="{key}",
            description="Keys a keyed limiter remembers.",
        )
        meter.create_observable_gauge(
            f"{prefix}.keys.max",
            callbacks=[self._keys_max],
            unit="{key}",
            description="The most keys a keyed limiter may remember (max_keys).",
        )
        meter.create_observable_gauge(
            f"{prefix}.in_flight",
            callbacks=[self._in_flight],
            unit="{seat}",
            description="Seats an in-flight limiter has held now (over every key of a keyed one).",
        )
        meter.create_observable_gauge(
            f"{prefix}.in_flight.limit",
            callbacks=[self._in_flight_limit],
            unit="{seat}",
            description="The seats an in-flight limiter has (for each key, in a keyed one).",
        )
        # The attributes of each place decisions are counted at, and whether its refusals
        # promise a wait to record (an in-flight limiter's do not).
        self._attributes: dict[
            tuple[LimitOutcome, str, str | None, str | None, bool], tuple[dict[str, str], bool]
        ] = {}

    def watch(self, limiter: Any, policy: str = "default", route: str | None = None) -> None:
        """As :meth:`PrometheusMetrics.watch`."""
        self.tables.watch(limiter, policy, route)

    def __call__(self, event: DecisionEvent) -> None:
        where = (event.outcome, event.policy, event.plan, event.route, event.enforced)
        known = self._attributes.get(where)
        if known is None:
            attributes = {
                "outcome": _OUTCOMES[event.outcome],
                "policy": event.policy,
                "plan": _plan(event.plan),
                "route": _route(event.route),
                "enforced": "true" if event.enforced else "false",
            }
            known = self._attributes[where] = (attributes, not holds_seats(event.limiter))
            self.tables.meet(event)
        attributes, waits = known
        self.decisions.add(1, attributes)
        if event.outcome is not LimitOutcome.ALLOWED and event.wait_ns is not None and waits:
            place = {
                "policy": event.policy,
                "plan": _plan(event.plan),
                "route": _route(event.route),
            }
            self.waits.record(event.wait_ns / 1e9, place)

    def _keys(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for policy, route, count, _ in self.tables.occupancy():
            yield Observation(count, {"policy": policy, "route": route})

    def _keys_max(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for policy, route, _, max_keys in self.tables.occupancy():
            yield Observation(max_keys, {"policy": policy, "route": route})

    def _in_flight(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for policy, route, held, _ in self.tables.in_flight():
            yield Observation(held, {"policy": policy, "route": route})

    def _in_flight_limit(self, options: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for policy, route, _, limit in self.tables.in_flight():
            yield Observation(limit, {"policy": policy, "route": route})
