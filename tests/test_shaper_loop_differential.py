"""ToyShaper and run_contention over sequences of steps, compared step by step with the reference.

Steps: ``enqueue`` (known and unknown classes), ``tick``, ``run_contention`` (tuples, lists,
generators, a generator that ticks the shaper between items, and bad items), replacing or
aliasing a bucket in ``shaper.buckets`` directly, and setting ``shaper.clock``. After every step:
the ``EnqueueResult`` (or tuple of them: class name, the outcome member itself, balance by value
and type, repr), the exception type (``KeyError`` with the same key for an unknown class), every
bucket's fields (value and type) and which names share a bucket, ``clock`` (value, type, and
whether it is still the same object), ``trace`` exactly, that ``buckets`` and ``trace`` are still
the very dict and list the shaper was given, and the Python operations done on traced numbers.

The native build's deliberate difference (``enqueue`` needs a native ``TokenBucket`` in
``buckets``) is tested in ``test_deliberate_differences.py``.
"""

from __future__ import annotations

import inspect
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qos_support import (
    Traced,
    TracedInplace,
    anything,
    assert_same_exception,
    assert_same_fields,
    describe,
    kind_values,
    materialize,
    run,
    same_value,
)

BUCKET_FIELDS = ("capacity", "tokens", "rate_per_sec", "last_refill_at")
CLASSES = ["video", "voice", "bulk"]
UNKNOWN = "ghost"
CONTAINERS = ["tuple", "list", "generator", "ticking"]
BAD_ITEMS = ["short", "long", "not iterable", "list pair", "two-letter str"]

# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------


@st.composite
def scenarios(draw, values: st.SearchStrategy):
    names = draw(st.lists(st.sampled_from(CLASSES), unique=True, min_size=1, max_size=3))
    buckets = [(name, draw(st.lists(values, min_size=4, max_size=4))) for name in names]
    clock = draw(st.one_of(st.none(), values))  # None: the default clock
    # Mostly classes that have a bucket; sometimes another course class or an unknown one.
    some_class = st.sampled_from([*names, *names, *names, *CLASSES, UNKNOWN])
    item = st.tuples(st.sampled_from(["pair"] * 12 + BAD_ITEMS), some_class, values)
    st_min = draw(st.sampled_from([0, 1, 1, 1]))
    step = st.sampled_from(
        ["enqueue"] * 4 + ["tick"] * 2 + ["contention"] * 2 + ["swap", "alias", "clock"]
    ).flatmap(
        lambda kind: st.tuples(
            st.just(kind),
            {
                "enqueue": st.tuples(some_class, values, values),
                "tick": st.tuples(values),
                "contention": st.tuples(
                    st.lists(item, min_size=st_min, max_size=4),
                    st.sampled_from(CONTAINERS),
                    values,
                ),
                "swap": st.tuples(some_class, st.lists(values, min_size=4, max_size=4)),
                "alias": st.tuples(st.sampled_from(names), some_class),
                "clock": st.tuples(values),
            }[kind],
        )
    )
    return buckets, clock, draw(st.lists(step, min_size=1, max_size=8))


class Side:
    """One implementation's shaper, with the dict and list it was given and its operation log."""

    def __init__(self, qos, buckets, clock) -> None:
        self.qos, self.log = qos, []
        self.buckets = {name: self.bucket(fields) for name, fields in buckets}
        self.trace: list[str] = []
        tree = qos.ClassTree({name: qos.TrafficClass(name, 10) for name, _ in buckets})
        if clock is None:
            self.shaper = qos.ToyShaper(tree, self.buckets, trace=self.trace)
        else:
            self.shaper = qos.ToyShaper(tree, self.buckets, self.m(clock), self.trace)

    def m(self, value):
        return materialize(value, self.log)

    def bucket(self, fields):
        return self.qos.TokenBucket(*(self.m(v) for v in fields))

    def offered(self, items, container, seconds):
        pairs = []
        for kind, name, size in items:
            size = self.m(size)
            pairs.append(
                {
                    "pair": (name, size),
                    "list pair": [name, size],
                    "short": (name,),
                    "long": (name, size, size),
                    "not iterable": 5,
                    "two-letter str": "ab",
                }[kind]
            )
        if container == "tuple":
            return tuple(pairs)
        if container == "list":
            return pairs
        if container == "generator":
            return (pair for pair in pairs)
        seconds = self.m(seconds)

        def ticking():
            for pair in pairs:
                self.shaper.tick(seconds)
                yield pair

        return ticking()

    def step(self, kind, args):
        shaper = self.shaper
        if kind == "enqueue":
            name, size, now = args
            return run(shaper.enqueue, name, self.m(size), self.m(now))
        if kind == "tick":
            return run(shaper.tick, self.m(args[0]))
        if kind == "contention":
            return run(self.qos.run_contention, shaper, self.offered(*args))
        if kind == "swap":
            shaper.buckets[args[0]] = self.bucket(args[1])
        elif kind == "alias":
            shaper.buckets[args[1]] = shaper.buckets[args[0]]
        else:
            shaper.clock = self.m(args[0])
        return run(lambda: None)


def check_enqueue_result(impl, got, want, context: str = "") -> None:
    assert type(got) is impl.EnqueueResult, context
    assert same_value(got.class_name, want.class_name), context
    assert got.outcome is impl.ConsumeOutcome(want.outcome.value), context
    assert same_value(got.tokens_remaining, want.tokens_remaining), (
        f"{context}tokens_remaining: got {describe(got.tokens_remaining)}, "
        f"reference {describe(want.tokens_remaining)}"
    )
    assert repr(got) == repr(want), context


def assert_same_shaper(got: Side, want: Side, context: str = "") -> None:
    gs, rs = got.shaper, want.shaper
    assert gs.buckets is got.buckets, f"{context}shaper.buckets is not the dict it was given"
    assert gs.trace is got.trace, f"{context}shaper.trace is not the list it was given"
    assert list(gs.buckets) == list(rs.buckets), context
    for name in rs.buckets:
        assert_same_fields(gs.buckets[name], rs.buckets[name], BUCKET_FIELDS, context, name)
    shared = [[a is b for b in s.buckets.values()] for s in (rs, gs) for a in s.buckets.values()]
    half = len(shared) // 2
    assert shared[:half] == shared[half:], f"{context}buckets shared differently"
    assert same_value(gs.clock, rs.clock), (
        f"{context}clock: got {describe(gs.clock)}, reference {describe(rs.clock)}"
    )
    assert gs.trace == rs.trace, f"{context}trace differs"
    assert all(type(line) is str for line in gs.trace), context
    assert got.log == want.log, f"{context}Python operations differ"


def run_scenario(impl, ref, buckets, clock, steps) -> None:
    want, got = Side(ref, buckets, clock), Side(impl, buckets, clock)
    assert_same_shaper(got, want, "constructed: ")
    for i, (kind, args) in enumerate(steps):
        context = f"step {i} {kind} {args!r}: "
        clocks = (want.shaper.clock, got.shaper.clock)
        expected, outcome = want.step(kind, args), got.step(kind, args)
        assert_same_exception(expected, outcome, context)
        if expected.raised:
            if isinstance(expected.exc, KeyError):
                assert outcome.exc.args == expected.exc.args, context
        elif kind == "enqueue":
            check_enqueue_result(impl, outcome.value, expected.value, context)
            assert outcome.value.class_name is args[0], context
        elif kind == "contention":
            results, wanted = outcome.value, expected.value
            assert type(results) is tuple and len(results) == len(wanted), context
            for result, want_result in zip(results, wanted, strict=True):
                check_enqueue_result(impl, result, want_result, context)
        else:
            assert outcome.value is None, context
        assert (want.shaper.clock is clocks[0]) == (got.shaper.clock is clocks[1]), (
            f"{context}clock replaced in one and updated in place in the other"
        )
        assert_same_shaper(got, want, context)


@given(scenario=scenarios(anything))
def test_any_mix_of_types_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


@given(scenario=kind_values.flatmap(scenarios))
def test_one_kind_of_number_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


# --------------------------------------------------------------------------------------------
# Worked by hand
# --------------------------------------------------------------------------------------------


def make_shaper(qos, **buckets):
    tree = qos.ClassTree({name: qos.TrafficClass(name, 10) for name in buckets})
    return qos.ToyShaper(tree, {name: qos.TokenBucket(*f) for name, f in buckets.items()})


def test_isolation_retry_and_trace(impl):
    allowed, throttled = impl.ConsumeOutcome.ALLOWED, impl.ConsumeOutcome.THROTTLED
    shaper = make_shaper(impl, video=(3, 3, 1), voice=(5, 5, 1))
    results = impl.run_contention(shaper, [("video", 2), ("video", 2), ("voice", 1)])
    assert results == (
        impl.EnqueueResult("video", allowed, 1),
        impl.EnqueueResult("video", throttled, 1),
        impl.EnqueueResult("voice", allowed, 4),
    )
    assert [r.outcome for r in results] == [allowed, throttled, allowed]
    assert all(r.outcome is m for r, m in zip(results, (allowed, throttled, allowed), strict=True))
    assert shaper.tick(2) is None
    assert shaper.clock == 2 and type(shaper.clock) is int
    retry = shaper.enqueue("video", 2, shaper.clock)
    assert repr(retry) == (
        "EnqueueResult(class_name='video', outcome=<ConsumeOutcome.ALLOWED: 'Allowed'>, "
        "tokens_remaining=1)"
    )
    with pytest.raises(KeyError) as info:
        shaper.enqueue("bulk", 1, shaper.clock)
    assert info.value.args == ("bulk",)
    assert shaper.trace == [
        "enqueue video size=2 at t=0: Allowed (tokens_remaining=1)",
        "enqueue video size=2 at t=0: Throttled (tokens_remaining=1)",
        "enqueue voice size=1 at t=0: Allowed (tokens_remaining=4)",
        "enqueue video size=2 at t=2: Allowed (tokens_remaining=1)",
    ]
    assert repr(shaper.buckets["voice"]) == (
        "TokenBucket(capacity=5, tokens=4, rate_per_sec=1, last_refill_at=0)"
    )


def test_trace_formats_values_as_an_f_string_does(impl, ref):
    for qos in (impl, ref):
        shaper = make_shaper(qos, video=(Fraction(5), Fraction(1, 2), 0.5))
        shaper.clock = 0.5
        shaper.tick(Fraction(1, 2))
        assert shaper.clock == 1.0 and type(shaper.clock) is float
        shaper.enqueue("video", True, shaper.clock)
        shaper.enqueue("video", 10**20, 2)
        assert shaper.trace == [
            "enqueue video size=True at t=1.0: Allowed (tokens_remaining=0.0)",
            "enqueue video size=100000000000000000000 at t=2: Throttled (tokens_remaining=0.5)",
        ]


def test_run_contention_reads_the_clock_for_each_item(impl, ref):
    """Items are pulled one at a time; each is enqueued at the clock as it is then."""
    traces = []
    for qos in (ref, impl):
        shaper = make_shaper(qos, video=(10, 0, 1))

        def offered(shaper=shaper):
            for size in (1, 1, 5):
                shaper.tick(2)
                yield ("video", size)

        results = qos.run_contention(shaper, offered())
        assert [(r.outcome.value, r.tokens_remaining) for r in results] == [
            ("Allowed", 1),
            ("Allowed", 2),
            ("Throttled", 4),
        ]
        traces.append(shaper.trace)
    assert traces[0] == traces[1]
    assert traces[1][-1] == "enqueue video size=5 at t=6: Throttled (tokens_remaining=4)"


@pytest.mark.parametrize(
    "make",
    [tuple, list, iter, lambda pairs: (p for p in pairs), lambda pairs: map(list, pairs)],
    ids=["tuple", "list", "iterator", "generator", "lists"],
)
def test_run_contention_takes_any_iterable_of_pairs(impl, make):
    shaper = make_shaper(impl, video=(3, 3, 0), voice=(1, 1, 0))
    results = impl.run_contention(shaper, make([("video", 2), ("voice", 1), ("video", 2)]))
    assert type(results) is tuple
    assert [(r.class_name, r.outcome.value, r.tokens_remaining) for r in results] == [
        ("video", "Allowed", 1),
        ("voice", "Allowed", 0),
        ("video", "Throttled", 1),
    ]
    assert impl.run_contention(shaper, make([])) == ()
    assert len(shaper.trace) == 3


@pytest.mark.parametrize(
    ("bad", "exc"),
    [(("video",), ValueError), (("video", 1, 2), ValueError), ([], ValueError), (7, TypeError)],
    ids=repr,
)
def test_run_contention_bad_item_after_good_ones(impl, ref, bad, exc):
    """Unpacking fails at the bad item: the items before it were enqueued and traced."""
    shapers = {}
    for side, qos in (("ref", ref), ("got", impl)):
        shaper = make_shaper(qos, video=(3, 3, 0))
        with pytest.raises(exc) as info:
            qos.run_contention(shaper, [("video", 1), bad, ("video", 1)])
        assert type(info.value) is exc
        shapers[side] = shaper
    assert shapers["got"].trace == shapers["ref"].trace
    assert shapers["ref"].trace == ["enqueue video size=1 at t=0: Allowed (tokens_remaining=2)"]
    assert shapers["got"].buckets["video"].tokens == 2


def test_unknown_class_changes_nothing(impl):
    shaper = make_shaper(impl, video=(3, 3, 1))
    before = repr(shaper)
    for name in ("bulk", "Video", ""):
        with pytest.raises(KeyError) as info:
            shaper.enqueue(name, 1, 5)
        assert info.value.args == (name,)
    with pytest.raises(KeyError):
        impl.run_contention(shaper, [("bulk", 1)])
    assert repr(shaper) == before and shaper.trace == []


def test_tick_adds_in_place(impl, ref):
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        clock = TracedInplace(1, "clk", log)
        shaper = qos.ToyShaper(qos.ClassTree(), clock=clock)
        shaper.tick(2)
        assert shaper.clock is clock and clock.v == 3
        other = Traced(1, "clk", log)
        shaper.clock = other
        shaper.tick(2)
        assert shaper.clock is not other and shaper.clock.v == 3
        logs[side] = log
    assert logs["got"] == logs["ref"] == [("iadd", "clk", "2"), ("add", "clk", "2")]


@pytest.mark.parametrize(
    ("start", "seconds", "expected"),
    [(0, 1, 1), (0, 0.5, 0.5), (1.5, 1, 2.5), (0, Fraction(1, 3), Fraction(1, 3)), (0, True, 1)],
)
def test_tick_keeps_pythons_types(impl, start, seconds, expected):
    shaper = impl.ToyShaper(impl.ClassTree(), clock=start)
    shaper.tick(seconds)
    assert same_value(shaper.clock, expected), describe(shaper.clock)


def test_tick_failure_leaves_the_clock(impl, ref):
    for qos in (ref, impl):
        shaper = qos.ToyShaper(qos.ClassTree(), clock=5)
        with pytest.raises(TypeError):
            shaper.tick("1")
        assert shaper.clock == 5


# --------------------------------------------------------------------------------------------
# How they can be called
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "params"),
    [
        ("enqueue", ("class_name", "size", "now")),
        ("tick", ("seconds",)),
        ("run_contention", ("shaper", "offered")),
    ],
)
def test_signature(impl, what, params):
    if what == "run_contention":
        fn = impl.run_contention
    else:
        fn = getattr(impl.ToyShaper(impl.ClassTree()), what)
    assert fn.__name__ == what
    got = inspect.signature(fn).parameters
    assert list(got) == list(params)
    for p in got.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        assert p.default is inspect.Parameter.empty, p


def test_keyword_calls(impl):
    shaper = make_shaper(impl, video=(3, 3, 1))
    shaper.tick(seconds=1)
    r1 = shaper.enqueue(class_name="video", size=1, now=1)
    r2 = shaper.enqueue("video", now=1, size=1)
    results = impl.run_contention(offered=[("video", 1)], shaper=shaper)
    assert [r.tokens_remaining for r in (r1, r2, *results)] == [2, 1, 0]
    assert impl.ToyShaper.enqueue(shaper, "video", 1, 1).outcome is impl.ConsumeOutcome.THROTTLED


@pytest.mark.parametrize(
    ("what", "args", "kwargs"),
    [
        ("enqueue", ("video", 1), {}),
        ("enqueue", ("video", 1, 2, 3), {}),
        ("enqueue", ("video", 1, 2), {"size": 1}),
        ("enqueue", ("video", 1), {"when": 2}),
        ("tick", (), {}),
        ("tick", (1, 2), {}),
        ("tick", (), {"secs": 1}),
        ("run_contention", ("S",), {}),
        ("run_contention", ("S", [], []), {}),
        ("run_contention", ("S", []), {"shaper": 1}),
    ],
)
def test_bad_calls_raise_type_error_like_the_reference(impl, ref, what, args, kwargs):
    def call_on(qos):
        shaper = make_shaper(qos, video=(3, 3, 1))
        if what == "run_contention":
            return run(qos.run_contention, *(shaper if a == "S" else a for a in args), **kwargs)
        return run(getattr(shaper, what), *args, **kwargs)

    expected, got = call_on(ref), call_on(impl)
    assert type(expected.exc) is TypeError
    assert_same_exception(expected, got)


class Shouting(str):
    def __format__(self, spec: str) -> str:
        return self.upper()


class Sly(str):
    """A str whose own ``encode`` lies: an f-string never calls it."""

    def encode(self, *args: object, **kwargs: object) -> bytes:  # type: ignore[override]
        return b"?"


class Loud(int):
    def __str__(self) -> str:
        return f"<{int(self)}>"


class Formats:
    """A bucket key whose ``format`` returns ``result`` (or raises it)."""

    def __init__(self, result: object) -> None:
        self.result = result

    def __format__(self, spec: str) -> object:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


ODD_NAMES = [
    "video", "vidéo", "视频", "\ud800x", "a\udc80", "\ud83d\ude00", "", Shouting("voice"), 5,
    -(2**63), 2**64, True, 2.5, Fraction(1, 3), Formats("fmt"), Formats(Shouting("sub")),
    Formats(ValueError("no format")), Formats(5), Formats(Sly("\ud800")), Sly("x\udfff"),
]  # fmt: skip
ODD_NUMBERS = [0, 1, -1, 2**63 - 1, -(2**63), 2**63, 10**30, 0.5, -0.0, True, Loud(3)]


@pytest.mark.parametrize("name", ODD_NAMES, ids=repr)
@pytest.mark.parametrize("size", [1, Loud(1), True, 2**63, 0.5])
def test_trace_line_is_the_f_string(impl, ref, name, size):
    """Every value as the course's f-string formats it: str, non-ASCII, lone surrogates, ints
    of every size, subclasses, custom ``__format__`` (also one that raises or returns no str)."""
    outcomes = {}
    for side, qos in (("ref", ref), ("got", impl)):
        bucket = qos.TokenBucket(2**64, 2**63, 1, 0)
        shaper = qos.ToyShaper(qos.ClassTree({}), {name: bucket})
        results = [run(shaper.enqueue, name, size, now) for now in ODD_NUMBERS]
        outcomes[side] = (results, shaper.trace, bucket)
    (ref_results, ref_trace, ref_bucket) = outcomes["ref"]
    (got_results, got_trace, got_bucket) = outcomes["got"]
    for want, got in zip(ref_results, got_results, strict=True):
        assert_same_exception(want, got)
        if want.exc is None:
            assert repr(got.value) == repr(want.value)
    assert got_trace == ref_trace
    assert all(type(line) is str for line in got_trace)
    assert repr(got_bucket) == repr(ref_bucket)


class Rebinds:
    """A bucket key whose ``format`` runs ``action(shaper)`` first."""

    def __init__(self, action) -> None:
        self.action = action
        self.shaper = None

    def __format__(self, spec: str) -> str:
        self.action(self.shaper)
        return "rebinds"


def swap_trace(shaper) -> None:
    shaper.trace = ["swapped"]


def refuse(shaper) -> None:
    raise ValueError("formatted")


class ShoutedTrace(list):
    """A trace whose own ``append`` changes what it is given."""

    def append(self, line: str) -> None:
        super().append(line.upper())


def no_op(shaper) -> None:
    pass


@pytest.mark.parametrize("trace", [None, tuple, ShoutedTrace], ids=["list", "tuple", "subclass"])
@pytest.mark.parametrize("action", [no_op, swap_trace, refuse])
def test_trace_append_is_looked_up_before_the_line_is_made(impl, ref, action, trace):
    """``self.trace.append(f"...")``: the method is found first, then the line is formatted."""
    seen = {}
    for side, qos in (("ref", ref), ("got", impl)):
        name = Rebinds(action)
        shaper = qos.ToyShaper(qos.ClassTree({}), {name: qos.TokenBucket(10, 10, 1, 0)})
        if trace is not None:
            shaper.trace = trace()
        name.shaper = shaper
        first = shaper.trace
        outcome = run(shaper.enqueue, name, 1, 0)
        seen[side] = (outcome, list(first), list(shaper.trace))
    assert_same_exception(seen["ref"][0], seen["got"][0])
    assert seen["got"][1:] == seen["ref"][1:]
