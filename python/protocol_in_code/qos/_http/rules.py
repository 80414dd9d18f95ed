"""Which limit: every limiter a form was given, checked once and ready to ask.

:class:`Rules` is made from the :class:`~.options.Options` of a form. Each route, and the
form's own limiter, is one :class:`Rule`: the limiter (made from a rate where a rate was given,
:mod:`.stores`), what kind it is, its policies and their header text, made once. For each
request :meth:`Rules.matching` picks the first route whose path prefix and method match (or,
stacked, every one), or the form's own limiter, and skips exempt paths.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import urllib.parse
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol_in_code._native import (
    ConcurrencyLimiter,
    Decision,
    KeyedConcurrencyLimiter,
    KeyedRateLimiter,
    RateLimiter,
)
from protocol_in_code.qos._http.addresses import TrustedProxies, forwarded_header_name
from protocol_in_code.qos._http.fields import PartitionKeys, Policy, host_secret, sf_string
from protocol_in_code.qos._http.keys import CostFunction, RequestInfo
from protocol_in_code.qos._http.kinds import Kind, limiter_kind
from protocol_in_code.qos._http.options import Options, Route
from protocol_in_code.qos._http.seats import Seats
from protocol_in_code.qos._http.stores import has_rate, is_rate, view_table
from protocol_in_code.qos._http.told import DecisionHook, Hooked, hooked, hooked_levels, teller
from protocol_in_code.qos._workers import INSTEAD_OF_SEATS, warn_if_several_workers
from protocol_in_code.qos.capabilities import Misfit

#: The limiters that keep their limits in this process: several workers each have their own.
IN_PROCESS = (RateLimiter, KeyedRateLimiter)
#: The in-flight limiters of one process, which the same warning is about.
IN_PROCESS_SEATS = (ConcurrencyLimiter, KeyedConcurrencyLimiter)


@dataclass
class Rule:
    """A limiter, checked and ready: its policies, their header text, how to call it."""

    limiter: Any
    keyed: bool
    awaited: bool
    cost: CostFunction | None
    policies: tuple[Policy, ...]
    names: tuple[str, ...]
    prefix: str = ""
    methods: frozenset[str] | None = None
    #: The limiter's key check, for a limiter that takes only some keys, and for one whose
    #: calls block, how the event loop's forms refuse it (see :class:`~.kinds.Kind`).
    key_refusal: Callable[[object], str | None] | None = None
    blocks: Misfit | None = None
    #: ``qu``, quoted, or ``None`` for requests (the draft's default, not sent).
    unit: str | None = None
    #: The policy name without band suffixes, and the route's prefix (``None`` for the
    #: middleware's own limiter): what ``on_decision`` is told.
    policy: str = "default"
    route: str | None = None
    #: For one plan of a limiter with plans, the plan's name (what ``on_decision`` is told).
    plan: str | None = None
    #: For a limiter with plans, each plan's rule (the request's plan chooses one; see
    #: :meth:`Rules.planned`); ``None`` otherwise.
    plans: dict[str, Rule] | None = None
    policy_items: tuple[str, ...] = field(init=False)
    policy_text: str = field(init=False)
    #: What the middleware calls ``check`` on: the limiter itself, or, with ``on_decision``,
    #: an object whose ``check`` is the limiter's wrapped to tell it (see :func:`~.told.hooked`).
    #: Without a hook the call is the very one made before hooks existed.
    decider: Any = field(init=False)
    #: The limiter's ``band_levels`` where the fields need it (several bands, or a band slow
    #: enough that ``t`` can be 1 or more) and it has one; else ``None``.
    levels: Callable[..., list[tuple[int, int]]] | None = field(init=False)
    #: Whether the middleware ask :attr:`decider`'s ``check_levels`` in place of ``check``:
    #: where the fields need levels and the limiter says them with its decision, in the same
    #: round trip, rather than with ``band_levels`` (a limiter that declares it,
    #: :class:`~protocol_in_code.qos.capabilities.Levelled`, as the Redis limiters do).
    leveled: bool = field(init=False)
    #: With ``on_decision``, what tells it of one of this rule's decisions (see
    #: :func:`~.told.teller`); ``None`` without a hook.
    tell: Callable[[Decision, Hashable | None], None] | None = field(init=False, default=None)
    #: The rule alone, as :meth:`Rules.matching` answers with it: made once.
    alone: tuple[Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.alone = (self,)
        unit = "" if self.unit is None else f";qu={self.unit}"
        self.policy_items = tuple(
            f"{name};q={policy.burst}{unit};w={policy.window}"
            for name, policy in zip(self.names, self.policies, strict=True)
        )
        self.policy_text = ", ".join(self.policy_items)
        self.decider = self.limiter
        levels = getattr(self.limiter, "band_levels", None)
        wanted = len(self.policies) > 1 or any(p.slow for p in self.policies)
        self.levels = levels if wanted and callable(levels) and not self.awaited else None
        check_levels = getattr(self.limiter, "check_levels", None)
        self.leveled = self.levels is None and wanted and callable(check_levels)

    def matches(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        prefix = self.prefix
        return (
            not prefix
            or path == prefix
            or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
        )


#: ``qu`` when a cost function applies and no unit was named: the tokens a cost function
#: counts are not requests, and nothing more is known about them.
COST_UNIT = "units"


def _unit(unit: str | None, cost: bool, parameter: str) -> str | None:
    """``qu``, quoted, for a rule: the unit named, else :data:`COST_UNIT` when a cost function
    applies; ``None`` (nothing sent: the default, requests) for requests."""
    if unit is None:
        unit = COST_UNIT if cost else "requests"
    quoted = sf_string(unit, parameter)
    return None if unit == "requests" else quoted


def _rule(
    limiter: Any,
    name: str,
    parameter: str,
    allow_async: bool,
    cost: CostFunction | None = None,
    prefix: str = "",
    methods: frozenset[str] | None = None,
    unit: str | None = None,
    route: str | None = None,
    on_event_loop: bool = False,
) -> Rule:
    kind = limiter_kind(limiter, parameter, allow_async=allow_async, on_event_loop=on_event_loop)
    plans = _plans_of(limiter)
    if plans is not None:
        # One rule per plan, each asking the limiter with its plan; the request's plan chooses.
        parent = Rule(
            limiter,
            kind.keyed,
            kind.awaited,
            cost,
            (),
            (),
            prefix,
            methods,
            kind.key_refusal,
            kind.blocks,
            unit,
            name,
        )
        parent.route = route
        parent.plans = {
            plan: _banded(
                PlanView(limiter, plan, bands),
                f"{name}-{plan}",
                parameter,
                kind,
                cost,
                prefix,
                methods,
                unit,
                route,
                policy=name,
                plan=plan,
            )
            for plan, bands in plans.items()
        }
        return parent
    return _banded(limiter, name, parameter, kind, cost, prefix, methods, unit, route)


def _plans_of(limiter: Any) -> dict[str, tuple[Any, ...]] | None:
    """A limiter's plans (name to bands), or ``None`` for a limiter without plans (see
    :class:`~protocol_in_code.qos.capabilities.Planned`)."""
    try:
        plans = getattr(limiter, "plans", None)
    except Exception:  # a limiter of another kind whose attribute fails: no plans
        return None
    return dict(plans) if isinstance(plans, Mapping) else None


class PlanView:
    """One plan of a limiter with plans, as a rule asks it: ``check`` (and ``band_levels`` or
    ``check_levels``) with the plan given, and the plan's bands."""

    __slots__ = ("band_levels", "bands", "check", "check_levels", "limiter", "plan")

    def __init__(self, limiter: Any, plan: str, bands: tuple[Any, ...]) -> None:
        self.limiter, self.plan, self.bands = limiter, plan, tuple(bands)
        self.check = functools.partial(limiter.check, plan=plan)
        levels = getattr(limiter, "band_levels", None)
        self.band_levels = None if levels is None else functools.partial(levels, plan=plan)
        with_levels = getattr(limiter, "check_levels", None)
        self.check_levels = (
            None if with_levels is None else functools.partial(with_levels, plan=plan)
        )


def _banded(
    limiter: Any,
    name: str,
    parameter: str,
    kind: Kind,
    cost: CostFunction | None = None,
    prefix: str = "",
    methods: frozenset[str] | None = None,
    unit: str | None = None,
    route: str | None = None,
    policy: str | None = None,
    plan: str | None = None,
) -> Rule:
    """The rule of a limiter (or of one plan of it) whose bands are ``limiter.bands``."""
    bands = tuple(limiter.bands)
    if len(bands) == 1:
        names: tuple[str, ...] = (name,)
    else:
        names = tuple(f"{name}-{i}" for i in range(1, len(bands) + 1))
    quoted = tuple(sf_string(n, f"{parameter} name") for n in names)
    policies = tuple(
        Policy.of(n, band.per_second, band.burst) for n, band in zip(names, bands, strict=True)
    )
    if cost is not None and not callable(cost):
        raise TypeError(f"{parameter} cost must be a function of the request, not {cost!r}")
    return Rule(
        limiter,
        kind.keyed,
        kind.awaited,
        cost,
        policies,
        quoted,
        prefix,
        methods,
        kind.key_refusal,
        kind.blocks,
        unit,
        name if policy is None else policy,
        route,
        plan,
    )


def _distinct_names(rules: tuple[Rule, ...]) -> None:
    """Stacked limits are told apart in the fields by their policies' names: no two limits may
    share one (the plans of one limiter may, since a request has one plan)."""
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        names: set[str] = set()
        for one in rule.plans.values() if rule.plans is not None else (rule,):
            names.update(one.names)
        for name in names:
            if seen.setdefault(name, i) != i:
                raise ValueError(
                    f"stack: two limits have the policy name {name}: give each Route a name= "
                    "of its own, so the RateLimit fields tell them apart"
                )


def _names(rule: Rule) -> str:
    """A limiter's plans, listed for an error."""
    return ", ".join(repr(name) for name in rule.plans or {})


class Rules:
    """Everything a form was configured with, checked at construction, and ready to decide:
    a :class:`Rule` for each route and one for the form's own limiter, the proxies to trust,
    the partition keys, the hooks.

    ``allow_async`` for a form that can await an asyncio limiter; ``on_event_loop`` for one that
    runs on the event loop, where a limiter that declares its calls block is refused; ``table``
    is the first part of the name a rate's limits are kept under.

    Every bad argument raises ``TypeError`` or ``ValueError`` naming the parameter, so a
    misconfigured application fails when it starts, not on its first request.
    """

    def __init__(
        self,
        options: Options,
        *,
        allow_async: bool,
        on_event_loop: bool = False,
        table: str = "web",
    ) -> None:
        self.options = options
        limiter, where = options.limiter, options.where
        if is_rate(limiter):
            sf_string(options.name, "name")
        #: The in-flight limit, ``None`` where none was given (see :mod:`.seats`).
        self.seats = Seats.of(options, table, allow_async=allow_async, on_event_loop=on_event_loop)
        rules = [
            _route_rule(i, route, options, table, allow_async, on_event_loop)
            for i, route in enumerate(options.routes)
        ]
        if limiter is not None:
            unit = _unit(options.quota_unit, options.cost is not None, "quota_unit")
            parameter = where.parameter(limiter, "limiter")
            limiter = where.limiter(limiter, options.burst, table, options.name, "limiter")
            rules.append(
                _rule(
                    limiter,
                    options.name,
                    parameter,
                    allow_async,
                    unit=unit,
                    on_event_loop=on_event_loop,
                )
            )
        elif not rules and self.seats is None:
            raise ValueError(
                "limiter: give a limiter, or routes with limiters, or both, or an in-flight "
                "limit alone (max_in_flight=)"
            )
        elif options.burst is not None:
            raise TypeError("burst is for a rate given as limiter ('100/minute'), not for routes")
        in_process = [rule.limiter for rule in rules if isinstance(rule.limiter, IN_PROCESS)]
        if in_process:
            warn_if_several_workers(type(in_process[0]).__name__)
        elif self.seats is not None and isinstance(self.seats.limiter, IN_PROCESS_SEATS):
            warn_if_several_workers(type(self.seats.limiter).__name__, INSTEAD_OF_SEATS)
        self.rules = tuple(rules)
        #: Whether a rule's limiter is an asyncio one, whose decision must be awaited.
        self.awaited = any(rule.awaited for rule in self.rules)
        self.exempt_prefixes, self.exempt = _exemption(options.exempt)
        self.proxies = TrustedProxies.parse(options.trusted_proxies)
        #: The field a trusted proxy names the client in (see :mod:`.addresses`).
        self.header = forwarded_header_name(options.forwarded_header)
        secret = options.partition_secret
        #: ``pk`` of a key (see :class:`~.fields.PartitionKeys`).
        keys = PartitionKeys(host_secret(where.folder) if secret is None else secret)
        self.partition_key = keys.of
        planned = [rule for rule in self.rules if rule.plans is not None]
        if planned and options.plan is None:
            raise TypeError(
                f"plan: the limiter has plans ({_names(planned[0])}): give plan=, a function of "
                "the request that returns the name of the client's plan"
            )
        if options.plan is not None and not planned:
            raise TypeError("plan= was given, but no limiter here has plans")
        if options.on_decision is not None:
            self._hook(options.on_decision)
            if self.seats is not None:
                self.seats = self.seats.told(options.on_decision, options)
        if options.stack:
            _distinct_names(self.rules)

    def _hook(self, on_decision: DecisionHook) -> None:
        """Have every rule tell ``on_decision`` of each of its decisions (see :mod:`.told`)."""
        enforced = bool(self.options.enforce)
        with_key = bool(self.options.on_decision_key)
        for rule in self.rules:
            for one in rule.plans.values() if rule.plans is not None else (rule,):
                if one.limiter is None:
                    continue
                limiter = one.limiter
                decided = limiter.limiter if isinstance(limiter, PlanView) else limiter
                tell = teller(
                    on_decision,
                    policy=one.policy,
                    plan=one.plan,
                    route=one.route,
                    limiter=decided,
                    enforced=enforced,
                    with_key=with_key and one.keyed,
                )
                kind = {"keyed": one.keyed, "awaited": one.awaited}
                levels = hooked_levels(limiter.check_levels, tell, **kind) if one.leveled else None
                one.tell = tell
                one.decider = Hooked(hooked(limiter.check, tell, **kind), levels)

    def matching(self, method: str, path: str) -> tuple[Rule, ...] | None:
        """The rules this request is under: the first that matches, or under ``stack=True``
        every one (each matching route's and the form's own limiter); ``()`` if nothing
        matches, and ``None`` if the request is exempt (an exempt prefix, or a matching route
        without a limiter), which takes no seat of an in-flight limit either. The method and
        path are matched as routers read them (see :func:`routed`)."""
        method, path = routed(method, path)
        for prefix in self.exempt_prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return None
        if self.options.stack:
            matched = []
            for rule in self.rules:
                if rule.matches(method, path):
                    if rule.limiter is None:
                        return None
                    matched.append(rule)
            return tuple(matched)
        for rule in self.rules:
            if rule.matches(method, path):
                return rule.alone if rule.limiter is not None else None
        return ()

    def planned(self, rule: Rule, info: RequestInfo) -> Rule:
        """``rule``, or for a limiter with plans the rule of the request's plan (``plan=``)."""
        plans = rule.plans
        if plans is None:
            return rule
        plan = self.options.plan
        assert plan is not None  # checked at construction
        name = plan(info)
        chosen = plans.get(name) if isinstance(name, str) else None
        if chosen is None:
            raise ValueError(
                f"plan() returned {name!r} for {info.method} {info.path}: not one of the "
                f"limiter's plans ({_names(rule)})"
            )
        return chosen


def _route_rule(
    i: int, route: Any, options: Options, table: str, allow_async: bool, on_event_loop: bool
) -> Rule:
    """The rule of ``routes[i]``, checked, its limiter made where it is a rate."""
    if not isinstance(route, Route):
        raise TypeError(f"routes[{i}] must be a Route, not {type(route).__name__}")
    if not isinstance(route.prefix, str) or not route.prefix.startswith("/"):
        raise ValueError(f"routes[{i}].prefix must be a path starting with '/'")
    prefix = route.prefix.rstrip("/") or "/"
    methods = _methods(route, i)
    if route.limiter is None:
        return Rule(None, False, False, None, (), (), prefix, methods)
    costed = route.cost is not None or options.cost is not None
    unit = route.unit if route.unit is not None else options.quota_unit
    parameter = f"routes[{i}].limiter"
    name = _route_name(route)
    if is_rate(route.limiter):
        sf_string(name, f"routes[{i}].name")
    return _rule(
        options.where.limiter(route.limiter, None, table, name, parameter),
        name,
        options.where.parameter(route.limiter, parameter),
        allow_async,
        route.cost,
        prefix,
        methods,
        _unit(unit, costed, f"routes[{i}].unit"),
        route.prefix,
        on_event_loop=on_event_loop,
    )


def _exemption(
    exempt: Callable[[RequestInfo], bool] | Iterable[str] | None,
) -> tuple[tuple[str, ...], Callable[[RequestInfo], bool] | None]:
    """``exempt`` checked: its path prefixes, or its function of the request."""
    if exempt is None:
        return (), None
    if callable(exempt):
        return (), exempt
    if isinstance(exempt, str):
        raise TypeError(f"exempt must be a list of path prefixes, not the string {exempt!r}")
    prefixes = tuple(exempt)
    for p in prefixes:
        if not isinstance(p, str) or not p.startswith("/"):
            raise ValueError(f"exempt: {p!r} is not a path starting with '/'")
    return prefixes, None


def _route_name(route: Route) -> str:
    """The route's policy name: ``name``, or else the prefix, percent-encoded as in a URL when
    it is not ASCII (``/café`` is ``/caf%C3%A9``), since the name is an ASCII String."""
    if route.name is not None:
        return route.name
    if route.prefix.isascii():
        return route.prefix
    return urllib.parse.quote(route.prefix)


def routed(method: str, path: str) -> tuple[str, str]:
    """The method and path as the frameworks' routers read them, which is what a route must
    match: a spelling that a router sends to a limited view is limited.

    * The method in upper case: Flask (Werkzeug) and Django route ``post`` as ``POST``.
    * Empty segments merged and dot segments resolved: Werkzeug merges ``//upload`` into
      ``/upload``, and a client (or a server that decodes ``%2F``) may send ``/a/../upload``.
      A trailing slash is kept, since routers tell ``/upload/`` apart. (Servers decode
      percent-escapes before the application sees the path, ``%2F`` included under WSGI.)
    """
    method = method.upper()
    if "//" in path or "/." in path:
        segments: list[str] = []
        for segment in path.split("/"):
            if segment == "..":
                if segments:
                    segments.pop()
            elif segment not in ("", "."):
                segments.append(segment)
        trailing = "/" if path.endswith(("/", "/.", "/..")) and segments else ""
        path = "/" + "/".join(segments) + trailing
    return method, path


def _methods(route: Route, i: int) -> frozenset[str] | None:
    """The route's methods in upper case, and HEAD wherever GET is.

    Frameworks answer HEAD by running the GET handler and dropping the body, so a limit on
    GET that let HEAD through would let anyone run the handler unlimited.
    """
    if route.methods is None:
        return None
    if isinstance(route.methods, str):
        raise TypeError(f"routes[{i}].methods must be a set of methods, not {route.methods!r}")
    methods = frozenset(m.upper() for m in route.methods)
    if "GET" in methods:
        methods |= {"HEAD"}
    return methods


def view_rules(
    options: Options, *, allow_async: bool, table: str, on_event_loop: bool = False
) -> tuple[Rules, Rule]:
    """The rules of one view's limit, and its one rule: the middleware's, without routes.

    ``options.limiter`` is a limiter of any of the four interfaces, or a rate (``"5/minute"``,
    ``10``) with an optional ``burst``: one limit per client, kept in the store under a name
    made of ``table`` (the view's) and the policy's name (see :meth:`~.stores.Store.limiter`).
    A mapping of policy names to such limiters or rates is several limits stacked on the view
    (``{"global": RateLimiter("1000/second"), "client": "10/second"}``), decided together:
    taken from all or none. Every other option means what it means for the middleware.
    """
    limiter = options.limiter
    if isinstance(limiter, Mapping):
        if options.burst is not None:
            raise TypeError("burst is for one rate (limit('5/minute', burst=10)), not a mapping")
        if not limiter:
            raise ValueError("limiter: a mapping of stacked limits needs at least one")
        for policy, one in limiter.items():
            if not isinstance(policy, str):
                raise TypeError(f"limiter: a stacked limit's name must be a str, not {policy!r}")
            if one is None:
                raise TypeError(
                    f"limiter[{policy!r}]: give a limiter, or a rate such as '5/minute'"
                )
        (name, first), *others = limiter.items()
        routes = tuple(Route("/", one, name=policy) for policy, one in others)
        options = dataclasses.replace(
            options, limiter=first, name=name, routes=routes, stack=bool(routes)
        )
    elif limiter is None:
        raise TypeError("limiter: give a limiter, or a rate such as '5/minute'")
    rules = Rules(options, allow_async=allow_async, on_event_loop=on_event_loop, table=table)
    return rules, rules.rules[-1]


class ViewLimit:
    """The rules of one view decorator's limit, built once.

    A limit of limiters is built when the decorator is made. A rate's limit, and the seats of
    an int ``max_in_flight``, are named after the view (:func:`~.stores.view_table`), so they
    are built when the decorator is given its first view: one decorator put on several views
    is one limit for all of them. Django's ``method_decorator`` first decorates a stand-in of
    its own, which names nothing: the method, decorated at each request (in many threads),
    names the limit then.
    """

    def __init__(self, options: Options, *, allow_async: bool) -> None:
        self.options, self.allow_async = options, allow_async
        self.built: tuple[Rules, Rule] | None = None
        if not has_rate(options.limiter) and not options.keeps_seats:
            self.built = view_rules(options, allow_async=allow_async, table="view")
        self._building = threading.Lock()

    def of(self, view: Callable[..., Any]) -> tuple[Rules, Rule] | None:
        """The rules for ``view``; ``None`` for a stand-in that names nothing."""
        if self.built is None:
            table = view_table(view)
            if table is None:
                return None
            with self._building:
                if self.built is None:
                    self.built = view_rules(self.options, allow_async=self.allow_async, table=table)
        return self.built
