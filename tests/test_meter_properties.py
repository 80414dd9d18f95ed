"""Property tests of the native meters against the Fraction models of ``tests/meter_model.py``.

* ``test_each_packet_matches_the_model``: random configurations of each meter (rates as int,
  Fraction, Decimal, str and float; sizes from 0; RFC 4115 with either rate 0; with or without
  ``start_ns``) and random packet sequences (non-decreasing times, often equal, sometimes a big
  pause; sizes often at a bucket's level or one byte past it; colour-blind, colour-aware or
  mixed): the colour of every packet and both levels after it equal the model's, exactly.
* ``test_a_trace_marks_as_its_packets_do``: ``mark_many`` over a random trace, given as numpy
  int64/int32/uint32 arrays, ``array.array`` of several type codes, a memoryview or lists, and
  cut into random chunks, gives the same colours and final levels (and state) as ``mark`` one
  packet at a time on a twin meter, and as the model.
* ``test_a_bad_trace_changes_nothing``: a warmed-up meter given a bad trace (times going back,
  a negative size, lengths that differ, a colour code outside 0..2, a float or bool dtype, a
  non-int item, a size beyond 64 bits) raises, naming the index where there is one, and is left
  exactly as it was: same levels, same saved state, and the same next decision as a twin.
* ``test_splitting_a_pause_changes_nothing``: settling a pause in any number of steps (zero-byte
  packets in between) gives exactly the levels, state and next colour of one step.
* ``test_configuration_follows_the_rules``: random (also invalid) parameters build exactly when
  the model finds no broken rule, and otherwise raise ValueError naming a broken rule.
"""

from __future__ import annotations

import array
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import meter_model as mm
import pytest
import qos_support
from hypothesis import given, note
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.meter")

from protocol_in_code.qos.meter import (
    COLORS,
    Color,
    ExcessRateMeter,
    SingleRateMeter,
    TwoRateMeter,
)

try:
    import numpy as np
except ImportError:  # numpy is optional; the array.array and list flavours still run
    np = None

NATIVE = {"srtcm": SingleRateMeter, "trtcm": TwoRateMeter, "rfc4115": ExcessRateMeter}
KINDS = sorted(NATIVE)
CODE = {mm.GREEN: 0, mm.YELLOW: 1, mm.RED: 2}

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


def as_given(value: Fraction, form: str) -> Any:
    """``value`` in one of the forms a user may pass; each reads back exactly as ``value``."""
    if form == "int" and value.denominator == 1:
        return int(value)
    if form == "str":
        return str(value)
    if form in ("decimal", "float"):
        # Exactly a short decimal? Then as a Decimal, or as the float with that repr.
        scaled = value * 1000
        if scaled.denominator == 1:
            decimal = Decimal(int(scaled)).scaleb(-3)
            if form == "decimal":
                return decimal
            flt = float(decimal)
            if Fraction(repr(flt)) == value:
                return flt
    return value


positive_rates = st.one_of(
    st.integers(1, 5000).map(Fraction),
    st.fractions(Fraction(1, 1000), 5000, max_denominator=10**6),
    st.integers(1, 5_000_000).map(lambda n: Fraction(n, 1000)),
    st.sampled_from([Fraction(1, 3), Fraction(1, 10**9), Fraction(10**9 + 7, 7), Fraction(1, 7)]),
)
forms = st.sampled_from(["int", "fraction", "str", "decimal", "float"])
sizes = st.one_of(st.integers(0, 3000), st.sampled_from([0, 1, 2, 1500]), st.integers(10**5, 10**7))


@st.composite
def configs(draw: Any, kind: str) -> dict[str, Any]:
    """Valid parameters of a ``kind`` meter (as the native keyword arguments)."""
    if kind == "srtcm":
        cbs, ebs = draw(sizes), draw(sizes)
        if cbs == 0 and ebs == 0:
            cbs = 1
        return {"cir": as_given(draw(positive_rates), draw(forms)), "cbs": cbs, "ebs": ebs}
    if kind == "trtcm":
        cir = draw(positive_rates)
        extra = draw(st.one_of(st.just(Fraction(0)), positive_rates))
        return {
            "cir": as_given(cir, draw(forms)),
            "cbs": draw(sizes) or 1,
            "pir": as_given(cir + extra, draw(forms)),
            "pbs": draw(sizes) or 1,
        }
    rates = st.one_of(st.just(Fraction(0)), positive_rates)
    cir, eir = draw(rates), draw(rates)
    if cir == 0 and eir == 0:
        eir = draw(positive_rates)
    cbs, ebs = draw(sizes), draw(sizes)
    if cbs == 0 and ebs == 0:
        ebs = 1
    return {
        "cir": as_given(cir, draw(forms)),
        "cbs": cbs,
        "eir": as_given(eir, draw(forms)),
        "ebs": ebs,
    }


@st.composite
def meters(draw: Any) -> tuple[str, dict[str, Any], int, int | None]:
    """(kind, parameters, first packet time, start_ns or None)."""
    kind = draw(st.sampled_from(KINDS))
    params = draw(configs(kind))
    t0 = draw(st.one_of(st.just(0), st.integers(-(2**40), 2**40), st.just(2**62)))
    start = draw(st.one_of(st.none(), st.just(t0), st.integers(t0 - 10**10, t0)))
    return kind, params, t0, start


pauses = st.one_of(
    st.just(0),
    st.just(0),
    st.integers(1, 1000),
    st.integers(1, 10**7),
    st.integers(10**7, 10**10),
    st.integers(10**10, 10**13),  # a big pause: often long enough to fill every bucket
)
colour_modes = st.sampled_from(["blind", "aware", "mixed"])
colours = st.sampled_from([mm.GREEN, mm.YELLOW, mm.RED])


def bucket_sizes(params: dict[str, Any]) -> list[int]:
    return [params[name] for name in ("cbs", "ebs", "pbs") if name in params]


def draw_colour(data: Any, mode: str) -> str | None:
    if mode == "blind":
        return None
    if mode == "aware":
        return data.draw(colours)
    return data.draw(st.one_of(st.none(), colours))


def native(kind: str, params: dict[str, Any], start: int | None) -> Any:
    return NATIVE[kind](**params, start_ns=start)


def native_levels(meter: Any, kind: str) -> tuple[Any, Any]:
    first, second = mm.MODELS[kind].LEVELS
    return getattr(meter, first), getattr(meter, second)


def assert_levels(meter: Any, model: mm.ModelMeter, kind: str, context: str) -> None:
    got = native_levels(meter, kind)
    want = model.levels()
    assert got == want, f"{context}: levels {got} != model {want}"
    for level in got:
        whole = Fraction(level).denominator == 1
        assert type(level) is (int if whole else Fraction), f"{context}: {level!r}"


def state(meter: Any) -> Any:
    """The meter's exact saved state (its pickle state), compared only between native meters."""
    return meter.__reduce__()[2]


# ---------------------------------------------------------------------------------------------
# Per packet, against the model
# ---------------------------------------------------------------------------------------------


@given(meters(), colour_modes, st.data())
def test_each_packet_matches_the_model(meter_spec: Any, mode: str, data: Any) -> None:
    kind, params, now, start = meter_spec
    meter, model = native(kind, params, start), mm.model(kind, params, start)
    biggest = max(bucket_sizes(params))
    for i in range(data.draw(st.integers(1, 40), label="packets")):
        now += data.draw(pauses) if i else 0
        # Sizes at (or one byte past) what a bucket will hold at this time hit the thresholds.
        ahead = model.copy()
        ahead.settle(now)
        edges = [
            edge
            for level in ahead.levels()
            for edge in (math.floor(level), math.floor(level) + 1, math.ceil(level) + 1)
        ]
        nbytes = data.draw(
            st.one_of(st.sampled_from(edges), st.integers(0, min(biggest, 10**6) + 2)),
            label=f"size {i}",
        )
        arrived = draw_colour(data, mode)
        want = model.mark(nbytes, now, arrived)
        got = meter.mark(nbytes, now, arrived if arrived is None else Color(arrived))
        context = f"packet {i} ({nbytes} B at {now} ns, arrived {arrived})"
        assert got is Color(want), f"{context}: {got!r}, model {want}"
        assert_levels(meter, model, kind, context)


# ---------------------------------------------------------------------------------------------
# Per trace equals per packet
# ---------------------------------------------------------------------------------------------

# name -> (largest value the flavour holds, converter from a list of ints)
FLAVOURS: dict[str, tuple[int, Any]] = {
    "list": (2**63 - 1, list),
    "tuple": (2**63 - 1, tuple),
    "array-q": (2**63 - 1, lambda xs: array.array("q", xs)),
    "array-l": (2**63 - 1, lambda xs: array.array("l", xs)),
    "array-i": (2**31 - 1, lambda xs: array.array("i", xs)),
    "array-I": (2**32 - 1, lambda xs: array.array("I", xs)),
    "memoryview-q": (2**63 - 1, lambda xs: memoryview(array.array("q", xs))),
}
if np is not None:
    FLAVOURS.update(
        {
            "numpy-int64": (2**63 - 1, lambda xs: np.array(xs, dtype=np.int64)),
            "numpy-int32": (2**31 - 1, lambda xs: np.array(xs, dtype=np.int32)),
            "numpy-uint32": (2**32 - 1, lambda xs: np.array(xs, dtype=np.uint32)),
            "numpy-int64-strided": (
                2**63 - 1,
                lambda xs: np.repeat(np.array(xs, dtype=np.int64), 2)[::2],
            ),
        }
    )
COLOUR_FLAVOURS = {
    "list": list,
    "array-B": lambda xs: array.array("B", xs),
    "bytes": bytes,
    "array-q": lambda xs: array.array("q", xs),
}
if np is not None:
    COLOUR_FLAVOURS["numpy-uint8"] = lambda xs: np.array(xs, dtype=np.uint8)
    COLOUR_FLAVOURS["numpy-int64"] = lambda xs: np.array(xs, dtype=np.int64)


@st.composite
def traces(draw: Any, limit: int, params: dict[str, Any], n_max: int = 60) -> Any:
    """(sizes, times, colours or None): non-negative times within ``limit``, non-decreasing."""
    n = draw(st.integers(0, n_max))
    edges = [b + d for b in bucket_sizes(params) for d in (-1, 0, 1) if 0 <= b + d <= limit]
    size = st.one_of(
        st.integers(0, min(max(bucket_sizes(params)) + 2, limit)), st.sampled_from(edges or [0])
    )
    big = max(1, limit // (4 * max(n, 1)))
    pause = st.one_of(st.just(0), st.integers(1, min(10**7, big)), st.integers(0, big))
    now = draw(st.integers(0, limit // 4))
    times, sizes_ = [], []
    for _ in range(n):
        now = min(now + draw(pause), limit)
        times.append(now)
        sizes_.append(draw(size))
    mode = draw(st.sampled_from(["blind", "aware"]))
    colours_ = [CODE[draw(colours)] for _ in range(n)] if mode == "aware" else None
    return sizes_, times, colours_


@given(st.data())
def test_a_trace_marks_as_its_packets_do(data: Any) -> None:
    flavour = data.draw(st.sampled_from(sorted(FLAVOURS)), label="flavour")
    limit, convert = FLAVOURS[flavour]
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    params = data.draw(configs(kind), label="params")
    start = data.draw(st.one_of(st.none(), st.just(0)), label="start_ns")
    sizes_, times, codes = data.draw(traces(min(limit, 2**62), params), label="trace")
    colour_flavour = data.draw(st.sampled_from(sorted(COLOUR_FLAVOURS)), label="colours as")

    traced, one_by_one = native(kind, params, start), native(kind, params, start)
    model = mm.model(kind, params, start)
    # The trace in random chunks, each chunk one mark_many call.
    cuts = sorted(data.draw(st.lists(st.integers(0, len(sizes_)), max_size=3), label="cuts"))
    got: list[int] = []
    for lo, hi in zip([0, *cuts], [*cuts, len(sizes_)], strict=True):
        chunk_colours = None if codes is None else COLOUR_FLAVOURS[colour_flavour](codes[lo:hi])
        result = traced.mark_many(convert(sizes_[lo:hi]), convert(times[lo:hi]), chunk_colours)
        assert isinstance(result, array.array) and result.typecode == "B"
        assert len(result) == hi - lo
        got.extend(result)

    want = []
    for i, (nbytes, now) in enumerate(zip(sizes_, times, strict=True)):
        arrived = None if codes is None else mm.COLOR_CODES[codes[i]]
        colour = one_by_one.mark(nbytes, now, arrived)
        assert colour is Color(model.mark(nbytes, now, arrived)), f"packet {i}"
        want.append(colour)
    assert [COLORS[code] for code in got] == want
    assert native_levels(traced, kind) == native_levels(one_by_one, kind) == model.levels()
    assert state(traced) == state(one_by_one)
    assert repr(traced) == repr(one_by_one)


# ---------------------------------------------------------------------------------------------
# A bad trace changes nothing
# ---------------------------------------------------------------------------------------------

FAULTS = (
    "backwards",
    "negative size",
    "sizes longer",
    "times longer",
    "colours shorter",
    "colour code",
    "float dtype",
    "bool dtype",
    "non-int item",
    "size beyond 64 bits",
)


@given(st.data())
def test_a_bad_trace_changes_nothing(data: Any) -> None:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    params = data.draw(configs(kind), label="params")
    meter, twin = native(kind, params, None), native(kind, params, None)
    warm_sizes, warm_times, warm_codes = data.draw(traces(2**40, params, 20), label="warm-up")
    assert list(meter.mark_many(warm_sizes, warm_times, warm_codes)) == list(
        twin.mark_many(warm_sizes, warm_times, warm_codes)
    )
    before = (state(meter), native_levels(meter, kind), repr(meter))

    sizes_, times, codes = data.draw(traces(2**40, params, 20), label="bad trace")
    sizes_, times = list(sizes_), [t + 2**40 for t in times]
    fault = data.draw(st.sampled_from(FAULTS), label="fault")
    n = len(sizes_)
    index: int | None = None
    if fault in ("backwards", "negative size", "colour code", "non-int item") and n < 2:
        sizes_, times, n = [*sizes_, 1, 1], [*times, 2**41, 2**41], n + 2
        codes = None if codes is None else [*codes, 0, 0]
    if fault in ("backwards", "negative size", "colour code", "non-int item"):
        index = data.draw(st.integers(1, n - 1), label="index")
    if fault == "backwards":
        times[index] = times[index - 1] - data.draw(st.integers(1, 10**9))
        args = (sizes_, times, codes)
    elif fault == "negative size":
        sizes_[index] = -data.draw(st.integers(1, 2**40))
        flavour = data.draw(st.sampled_from(["list", *(["numpy"] if np is not None else [])]))
        args = (np.array(sizes_) if flavour == "numpy" else sizes_, times, codes)
    elif fault == "sizes longer":
        args = ([*sizes_, 1], times, codes)
    elif fault == "times longer":
        args = (sizes_, [*times, times[-1] if times else 0], codes)
    elif fault == "colours shorter":
        args = (sizes_, times, [0] * max(n - 1, 0) if n else [0])
    elif fault == "colour code":
        codes = [0] * n if codes is None else list(codes)
        codes[index] = data.draw(st.sampled_from([3, 4, 255, -1, 2**40]))
        args = (sizes_, times, array.array("B", codes) if codes[index] == 255 else codes)
    elif fault == "float dtype":
        which = data.draw(st.integers(0, 2))
        floats = array.array("d", [float(s) for s in sizes_])
        args = [sizes_, times, codes if codes is not None else [0] * n]
        args[which] = floats
        args = tuple(args)
    elif fault == "bool dtype":
        if np is None:
            args = (sizes_, times, [0.5] * n)
        else:
            args = (np.array([s > 0 for s in sizes_], dtype=bool), times, codes)
    elif fault == "non-int item":
        sizes_[index] = data.draw(st.sampled_from([1.5, "3", None, Fraction(3), Decimal(3)]))
        args = (sizes_, times, codes)
    else:  # a size beyond 64 bits (a uint64 buffer holds any size a packet may have)
        index, sizes_, times = n, [*sizes_, 2**64], [*times, times[-1] if times else 0]
        args = (sizes_, times, None)
    note(f"fault {fault} at {index}")

    with pytest.raises((ValueError, TypeError)) as info:
        meter.mark_many(*args)
    if index is not None and fault != "backwards":
        assert f"[{index}]" in str(info.value), str(info.value)
    if fault == "backwards":
        assert f"times_ns[{index}]" in str(info.value), str(info.value)
    assert (state(meter), native_levels(meter, kind), repr(meter)) == before
    # The next decision is the twin's.
    later = 2**41 + data.draw(st.integers(0, 10**10))
    nbytes = data.draw(st.integers(0, max(bucket_sizes(params)) + 1))
    assert meter.mark(nbytes, later) is twin.mark(nbytes, later)
    assert state(meter) == state(twin)


# ---------------------------------------------------------------------------------------------
# Exact settlement: a pause settled in steps is the pause settled at once
# ---------------------------------------------------------------------------------------------


@given(st.data())
def test_splitting_a_pause_changes_nothing(data: Any) -> None:
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    params = data.draw(configs(kind), label="params")
    once, stepped = native(kind, params, 0), native(kind, params, 0)
    model = mm.model(kind, params, 0)
    # Drain the buckets a little (or a lot) at time 0, the same way on both.
    for nbytes in data.draw(st.lists(st.integers(0, 3000), max_size=4), label="drain"):
        arrived = data.draw(st.one_of(st.none(), colours))
        assert once.mark(nbytes, 0, arrived) is stepped.mark(nbytes, 0, arrived)
        model.mark(nbytes, 0, arrived)
    end = data.draw(st.integers(1, 10**12), label="pause")
    steps = sorted(data.draw(st.lists(st.integers(1, end), min_size=1, max_size=12)))
    for now in steps:
        assert stepped.mark(0, now) is Color.GREEN  # zero bytes: settles, takes nothing
    nbytes = data.draw(st.integers(0, max(bucket_sizes(params)) + 1), label="last packet")
    assert once.mark(nbytes, end) is stepped.mark(nbytes, end) is Color(model.mark(nbytes, end))
    assert native_levels(once, kind) == native_levels(stepped, kind) == model.levels()
    assert state(once) == state(stepped)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

NAMES = {
    "srtcm": ("cir", "cbs", "ebs"),
    "trtcm": ("cir", "cbs", "pir", "pbs"),
    "rfc4115": ("cir", "cbs", "eir", "ebs"),
}


@given(st.sampled_from(KINDS), st.data())
def test_configuration_follows_the_rules(kind: str, data: Any) -> None:
    params = {}
    for name in NAMES[kind]:
        if name.endswith("ir"):
            rate = data.draw(st.one_of(st.just(Fraction(0)), positive_rates), label=name)
            params[name] = as_given(rate, data.draw(forms))
        else:
            params[name] = data.draw(st.sampled_from([0, 0, 1, 1000]), label=name)
    broken = mm.broken_rules(kind, **params)
    if not broken:
        meter = NATIVE[kind](**params)
        assert native_levels(meter, kind) == mm.model(kind, params).levels()
        return
    with pytest.raises(ValueError) as info:
        NATIVE[kind](**params)
    message = str(info.value)
    assert any(rule in message for rule in broken), f"{message!r} names none of {broken}"
