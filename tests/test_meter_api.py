"""The Python surface of ``protocol_in_code.qos.meter`` (issue 5), beyond the rules themselves.

* ``Color`` is a str-mixin enum (GREEN, YELLOW, RED; values "Green", "Yellow", "Red"), and
  ``COLORS[code]`` is the colour of a code in ``mark_many``'s arrays.
* ``mark`` returns the ``Color`` members themselves; ``color=`` takes a member or its value; a
  bad colour or argument raises before anything changes (not even the clock's anchor).
* Rates are read exactly whatever their form (int, Fraction, Decimal, str, float by its repr);
  ``repr`` shows the configuration and the levels.
* Pickle, ``copy`` and ``deepcopy`` keep configuration, levels, settlement time and clock: the
  copy answers every later packet as the original does.
* ``clock=``: read when ``now_ns`` is omitted.
* ``mark_many`` takes every buffer of integers, including empty and unaligned ones and
  non-native byte order (read correctly or refused, never misread).
* Long traces (10,000 packets, more than one of the pieces a trace is read in) mark as their
  packets do one by one; a fault deep inside one (at and around the piece boundaries) names
  its index and leaves the meter exactly as it was.
"""

from __future__ import annotations

import array
import copy
import enum
import itertools
import pickle
import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.meter")

from protocol_in_code.qos import meter as meter_module
from protocol_in_code.qos.meter import (
    COLORS,
    Color,
    ExcessRateMeter,
    SingleRateMeter,
    TwoRateMeter,
)

try:
    import numpy as np
except ImportError:
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")
S = 10**9


def make_all() -> list[Any]:
    return [
        SingleRateMeter(100, 1000, 500),
        TwoRateMeter(100, 1000, 200, 1500),
        ExcessRateMeter(100, 1000, 50, 500),
    ]


def levels(meter: Any) -> tuple[Any, Any]:
    if isinstance(meter, TwoRateMeter):
        return meter.tp, meter.tc
    return meter.tc, meter.te


def state(meter: Any) -> Any:
    return meter.__reduce__()[2]


class TickClock:
    """A picklable clock: each reading one millisecond after the last."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 10**6
        return self.now


# ---------------------------------------------------------------------------------------------
# Colours
# ---------------------------------------------------------------------------------------------


def test_color_is_a_str_enum_and_colors_are_the_codes() -> None:
    assert issubclass(Color, str) and issubclass(Color, enum.Enum)
    assert [(c.name, c.value) for c in Color] == [
        ("GREEN", "Green"),
        ("YELLOW", "Yellow"),
        ("RED", "Red"),
    ]
    assert COLORS == (Color.GREEN, Color.YELLOW, Color.RED)
    assert set(meter_module.__all__) >= {
        "COLORS",
        "Color",
        "SingleRateMeter",
        "TwoRateMeter",
        "ExcessRateMeter",
    }


@pytest.mark.parametrize("meter", make_all(), ids=lambda m: type(m).__name__)
def test_color_by_member_or_value(meter: Any) -> None:
    twin = copy.deepcopy(meter)
    for member in Color:
        assert meter.mark(10, 0, member) is twin.mark(10, 0, member.value)
    assert levels(meter) == levels(twin)


@pytest.mark.parametrize("bad", ["green", "GREEN", "Blue", 0, 1.0, True, object()])
def test_a_bad_colour_changes_nothing(bad: Any) -> None:
    meter = SingleRateMeter(100, 1000, 500)
    with pytest.raises((ValueError, TypeError)):
        meter.mark(600, 5 * S, bad)
    # Not even anchored: the first good decision at 0 anchors, and 1 s later C has refilled 100.
    assert meter.mark(1000, 0) is Color.GREEN
    assert meter.mark(100, S) is Color.GREEN


@pytest.mark.parametrize(
    ("args", "exc"),
    [
        ((-1, 0), ValueError),
        ((2**64, 0), ValueError),
        ((1.0, 0), TypeError),
        ((True, 0), TypeError),
        ((1, 0.5), TypeError),
        ((1, 2**63), ValueError),
        ((1, "0"), TypeError),
    ],
)
def test_bad_mark_arguments_change_nothing(args: tuple, exc: type) -> None:
    meter = SingleRateMeter(100, 1000, 500)
    before = state(meter)
    with pytest.raises(exc):
        meter.mark(*args)
    assert state(meter) == before


def test_the_largest_packet_is_red_not_an_error() -> None:
    meter = TwoRateMeter(100, 1000, 200, 1500)
    assert meter.mark(2**64 - 1, 0) is Color.RED
    assert levels(meter) == (1500, 1000)


def test_the_whole_clock_range_neither_overflows_nor_wraps() -> None:
    for meter, fresh in zip(make_all(), make_all(), strict=True):
        assert meter.mark(500, -(2**63)) is Color.GREEN
        assert meter.mark(0, 2**63 - 1) is Color.GREEN
        assert levels(meter) == levels(fresh)  # after centuries every bucket is full again


# ---------------------------------------------------------------------------------------------
# Configuration, repr, levels
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", [100, "100", Decimal("100.00"), 100.0, Fraction(200, 2)])
def test_rate_forms_read_exactly(form: Any) -> None:
    meter = SingleRateMeter(form, 1000, 500)
    assert repr(meter) == "SingleRateMeter(cir=100, cbs=1000, ebs=500, tc=1000, te=500)"


def test_a_float_rate_is_its_shortest_repr() -> None:
    meter = ExcessRateMeter(0.1, 10, 0.3, 10)
    assert repr(meter).startswith(
        "ExcessRateMeter(cir=Fraction(1, 10), cbs=10, eir=Fraction(3, 10), ebs=10"
    )
    meter.mark(10, 0)
    meter.mark(10, 0)
    meter.mark(0, 10 * S)
    assert levels(meter) == (1, 3)
    assert type(meter.tc) is int and type(meter.te) is int


def test_repr_shows_configuration_and_exact_levels() -> None:
    meter = TwoRateMeter("1/3", 10, "0.5", 20)
    meter.mark(10, 0)
    meter.mark(0, 1)
    assert repr(meter) == (
        "TwoRateMeter(cir=Fraction(1, 3), cbs=10, pir=Fraction(1, 2), pbs=20, "
        "tp=Fraction(20000000001, 2000000000), tc=Fraction(1, 3000000000))"
    )
    assert meter.tc == Fraction(1, 3 * S)


def test_levels_are_read_only() -> None:
    meter = SingleRateMeter(100, 1000, 500)
    with pytest.raises(AttributeError):
        meter.tc = 5  # type: ignore[misc]


def test_a_size_too_fine_for_its_rate_is_refused() -> None:
    with pytest.raises(ValueError):
        SingleRateMeter(Fraction(1, 10**18), 10**18, 0)


# ---------------------------------------------------------------------------------------------
# Pickle, copy, clock
# ---------------------------------------------------------------------------------------------


def future(meter: Any) -> list[Any]:
    """Colours and levels of a fixed run of later packets (on a copy, the meter is kept)."""
    probe = copy.deepcopy(meter)
    out = []
    for i, (nbytes, dt) in enumerate(itertools.product((1, 99, 400, 1200), (0, 7, S // 3))):
        colour = None if i % 3 == 0 else COLORS[i % 3]
        out.append((probe.mark(nbytes, 10 * S + i * S + dt, colour), levels(probe)))
    return out


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
@pytest.mark.parametrize("index", [0, 1, 2], ids=["srtcm", "trtcm", "rfc4115"])
@pytest.mark.parametrize("used", [False, True], ids=["fresh", "used"])
def test_pickle_and_copy_keep_everything(how: str, index: int, used: bool) -> None:
    meter = make_all()[index]
    if used:
        meter.mark(700, 3 * S)
        meter.mark(600, 3 * S + 1, Color.YELLOW)
    clone = {
        "pickle": lambda m: pickle.loads(pickle.dumps(m)),
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
    }[how](meter)
    assert clone is not meter and type(clone) is type(meter)
    assert repr(clone) == repr(meter)
    assert state(clone) == state(meter)
    assert future(clone) == future(meter)
    # Independent: marking the clone leaves the original alone.
    clone.mark(1000, 20 * S)
    assert state(clone) != state(meter)


def test_pickle_keeps_the_clock_and_start() -> None:
    meter = SingleRateMeter(1000, 10, 10, start_ns=0, clock=TickClock())
    assert meter.mark(10) is Color.GREEN  # at 1 ms: C had been full since 0
    twin = pickle.loads(pickle.dumps(meter))
    # Both clocks now read 2 ms next: 1 ms at 1000 B/s is exactly 1 byte.
    assert meter.mark(1) is twin.mark(1) is Color.GREEN
    assert levels(meter) == levels(twin) == (0, 10)


def test_the_clock_is_read_when_now_is_omitted() -> None:
    readings = iter([5 * S, 6 * S, 6 * S])
    meter = SingleRateMeter(100, 1000, 500, clock=lambda: next(readings))
    assert meter.mark(1000) is Color.GREEN  # anchored at 5 s
    assert meter.mark(101) is Color.YELLOW  # 6 s: C holds 100
    assert meter.mark(100, 6 * S) is Color.GREEN  # an explicit time wins over the clock
    assert levels(meter) == (0, 399)


@pytest.mark.parametrize("reading", [1.5, "1", None, 2**63])
def test_a_bad_clock_reading_is_refused(reading: Any) -> None:
    meter = SingleRateMeter(100, 1000, 500, clock=lambda: reading)
    with pytest.raises((TypeError, ValueError)):
        meter.mark(1)
    assert levels(meter) == (1000, 500)


def test_a_clock_must_be_callable() -> None:
    with pytest.raises(TypeError):
        SingleRateMeter(100, 1000, 500, clock=5)


# ---------------------------------------------------------------------------------------------
# mark_many's inputs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("meter", make_all(), ids=lambda m: type(m).__name__)
def test_an_empty_trace_marks_nothing_and_anchors_nothing(meter: Any) -> None:
    before = state(meter)
    assert meter.mark_many([], []) == array.array("B")
    assert meter.mark_many([], [], []) == array.array("B")
    if np is not None:
        empty = np.array([], dtype=np.int64)
        assert meter.mark_many(empty, empty, empty) == array.array("B")
    assert state(meter) == before


EMPTY_AND_UNALIGNED = {
    "array('q') empty": lambda: (array.array("q"), array.array("q")),
    "array('i') empty": lambda: (array.array("i"), array.array("i")),
    "memoryview of array('l') empty": lambda: (
        memoryview(array.array("l")),
        memoryview(array.array("l")),
    ),
}
if np is not None:

    def _packed_records() -> tuple[Any, Any]:
        # A packed record array (say, parsed from a capture file): its fields are unaligned.
        records = np.zeros(3, dtype=[("flag", "u1"), ("size", "<i8"), ("t", "<i8")])
        records["size"], records["t"] = [600, 600, 10], [0, 1, 2]
        assert not records["t"].flags.aligned
        return records["size"], records["t"]

    EMPTY_AND_UNALIGNED["numpy packed record fields"] = _packed_records


@pytest.mark.parametrize("name", sorted(EMPTY_AND_UNALIGNED))
def test_empty_and_unaligned_buffers(name: str) -> None:
    """Any buffer of integers works, whatever its length or alignment (issue 5: "taking any
    buffer of integers"). An earlier build refused an empty array.array of 4- or 8-byte items
    (its buffer points at a 1-byte static) and unaligned numpy views with "must hold
    integers"."""
    sizes, times = EMPTY_AND_UNALIGNED[name]()
    meter, twin = SingleRateMeter(100, 1000, 500), SingleRateMeter(100, 1000, 500)
    got = meter.mark_many(sizes, times)
    assert list(got) == list(twin.mark_many(list(sizes), list(times)))
    assert state(meter) == state(twin)


@needs_numpy
@pytest.mark.parametrize("dtype", [">i8", ">i4", ">u4"])
def test_non_native_byte_order_is_read_right_or_refused(dtype: str) -> None:
    """A big-endian array holds the same integers; reading its bytes as native integers gives
    wrong colours with no error. An earlier build misread it: pyo3 0.30's buffer check
    (``is_matching_endian``) takes '>' for native order on little-endian machines."""
    sizes, times = [600, 600, 10], [0, 1, 2]
    meter, twin = SingleRateMeter(100, 1000, 500), SingleRateMeter(100, 1000, 500)
    expected = list(twin.mark_many(sizes, times))
    try:
        got = meter.mark_many(np.array(sizes, dtype=dtype), np.array(times, dtype=dtype))
    except TypeError:
        assert state(meter) == state(SingleRateMeter(100, 1000, 500))
        return
    assert list(got) == expected
    assert state(meter) == state(twin)


# ---------------------------------------------------------------------------------------------
# Long traces: marked in pieces, still one trace
# ---------------------------------------------------------------------------------------------

LONG = 10_000  # spans several of the pieces a trace is read in (4096 packets today)
KINDS = {
    "srtcm": lambda: SingleRateMeter(Fraction(250_000, 3), 12_000, 24_000),
    "trtcm": lambda: TwoRateMeter(Fraction(250_000, 3), 12_000, 200_000, 24_000),
    "rfc4115": lambda: ExcessRateMeter(Fraction(250_000, 3), 12_000, 50_000, 24_000),
}


def long_trace(seed: int) -> tuple[list[int], list[int], list[int]]:
    rng = random.Random(seed)
    sizes, times, codes, now = [], [], [], 0
    for _ in range(LONG):
        now += rng.choice((0, 0, rng.randint(1, 10**5), rng.randint(10**5, 10**8)))
        sizes.append(rng.choice((64, 576, 1500, rng.randint(0, 3000))))
        times.append(now)
        codes.append(rng.randint(0, 2))
    return sizes, times, codes


FLAVOURS = {
    "list": lambda xs: xs,
    "array": lambda xs: array.array("q", xs),
    **({"numpy": lambda xs: np.array(xs, dtype=np.int64)} if np is not None else {}),
}


@pytest.mark.parametrize("aware", [False, True], ids=["blind", "aware"])
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_long_trace_marks_as_its_packets_do(kind: str, flavour: str, aware: bool) -> None:
    sizes, times, codes = long_trace(len(kind) + 7 * aware)
    convert = FLAVOURS[flavour]
    traced, one_by_one = KINDS[kind](), KINDS[kind]()
    got = traced.mark_many(convert(sizes), convert(times), convert(codes) if aware else None)
    want = [
        one_by_one.mark(size, now, COLORS[code] if aware else None)
        for size, now, code in zip(sizes, times, codes, strict=True)
    ]
    assert [COLORS[code] for code in got] == want
    assert len(set(want)) == 3, "the trace is meant to reach every colour"
    assert state(traced) == state(one_by_one)


FAULTS = ("backwards", "negative size", "colour code", "size beyond 64 bits")


@pytest.mark.parametrize("index", [1, 4095, 4096, 4097, 8192, LONG - 1])
@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_deep_in_a_long_trace_changes_nothing(fault: str, index: int) -> None:
    sizes, times, codes = long_trace(index)
    meter, twin = KINDS["srtcm"](), KINDS["srtcm"]()
    meter.mark(5000, -1)
    twin.mark(5000, -1)
    before = state(meter)
    if fault == "backwards":
        times[index] = times[index - 1] - 1
    elif fault == "negative size":
        sizes[index] = -1
    elif fault == "colour code":
        codes[index] = 3
    sized: Any = sizes
    if fault == "size beyond 64 bits":
        sizes[index] = 2**64
        sized = sizes
    for convert in (list, lambda xs: array.array("q", xs)):
        args = (
            sized if fault == "size beyond 64 bits" else convert(sizes),
            convert(times),
            convert(codes),
        )
        with pytest.raises(ValueError, match=rf"\[{index}\]"):
            meter.mark_many(*args)
        assert state(meter) == before
    assert meter.mark(700, 10**12) is twin.mark(700, 10**12)
    assert state(meter) == state(twin)


def test_a_trace_takes_every_size_mark_takes() -> None:
    # Sizes up to 2**64 - 1 (a uint64 buffer's whole range) colour as mark colours them.
    sizes = [2**64 - 1, 2**63, 1500, 0]
    times = [0, 1, 2, 3]
    one_by_one = SingleRateMeter(10**9, 10**6, 10**6)
    traced = SingleRateMeter(10**9, 10**6, 10**6)
    expected = [one_by_one.mark(size, t) for size, t in zip(sizes, times, strict=True)]
    codes = traced.mark_many(array.array("Q", sizes), array.array("q", times))
    assert [list(Color)[code] for code in codes] == expected
    assert (traced.tc, traced.te) == (one_by_one.tc, one_by_one.te)
