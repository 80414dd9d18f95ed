"""Hand-derived test vectors for ``protocol_in_code.qos.meter`` (issue 5).

Every row of ``VECTORS`` is worked out by hand from the issue's rules (not from the Rust, not
from the model): a meter configuration, then packets ``(B, now_ns, arrived colour)`` with the
colour each must get and both bucket levels in bytes right after it, and one line on why. The
letters are colours (G green, Y yellow, R red; ``arrived`` None means colour-blind); levels are
``(tc, te)`` for srTCM and RFC 4115 and ``(tp, tc)`` for trTCM, as the meters name them.

* ``test_native_matches_vector``: the native meter, packet by packet with ``mark``: colours,
  exact levels (an ``int`` when whole, else a ``Fraction``).
* ``test_native_trace_matches_vector``: the same packets as one ``mark_many`` trace.
* ``test_model_matches_vector``: the Fraction model (``tests/meter_model.py``) agrees with the
  hand derivations, which checks the model before the property tests lean on it.
* ``test_each_broken_rule_is_caught``: a list of mutant models, each breaking one rule of the
  issue; for every mutant some vector must disagree with it. That is what "each vector would
  fail if the rule it covers were broken" means, checked instead of claimed.
* ``BAD_CONFIGS``: configurations that break the RFCs' rules must raise ``ValueError`` naming
  the rule (and only that rule), and the boundary configurations the rules allow must build.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import meter_model as mm
import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.meter")

from protocol_in_code.qos.meter import (
    COLORS,
    Color,
    ExcessRateMeter,
    SingleRateMeter,
    TwoRateMeter,
)

S = 10**9  # one second in nanoseconds
G, Y, R = "G", "Y", "R"
LETTER = {G: mm.GREEN, Y: mm.YELLOW, R: mm.RED}
NATIVE = {"srtcm": SingleRateMeter, "trtcm": TwoRateMeter, "rfc4115": ExcessRateMeter}
F = Fraction


@dataclass(frozen=True)
class Vector:
    id: str
    kind: str
    params: dict[str, Any]
    # (nbytes, now_ns, arrived letter or None, expected letter, expected levels)
    steps: tuple[tuple[int, int, str | None, str, tuple[Any, Any]], ...]
    why: str
    start_ns: int | None = None


def sr(cir: Any = 100, cbs: int = 1000, ebs: int = 500) -> tuple[str, dict[str, Any]]:
    return "srtcm", {"cir": cir, "cbs": cbs, "ebs": ebs}


def tr(cir: Any = 100, cbs: int = 1000, pir: Any = 200, pbs: int = 1500) -> tuple[str, dict]:
    return "trtcm", {"cir": cir, "cbs": cbs, "pir": pir, "pbs": pbs}


def x(cir: Any = 100, cbs: int = 1000, eir: Any = 50, ebs: int = 500) -> tuple[str, dict]:
    return "rfc4115", {"cir": cir, "cbs": cbs, "eir": eir, "ebs": ebs}


def v(id: str, meter: tuple[str, dict], why: str, *steps: Any, start_ns: int | None = None):
    return Vector(id, meter[0], meter[1], tuple(steps), why, start_ns)


# Configurations used below (rates in bytes per second, sizes in bytes):
#   sr()           srTCM CIR 100, CBS 1000, EBS 500
#   sr(cbs=500, ebs=1000)   E bigger than C, to reach "C cannot, E can"
#   tr()           trTCM CIR 100, CBS 1000, PIR 200, PBS 1500
#   tr(pir=100, pbs=500)    P smaller than C, to reach "C could, P cannot"
#   x()            RFC 4115 CIR 100, CBS 1000, EIR 50, EBS 500
SR_SMALL_C = sr(cbs=500, ebs=1000)
TR_SMALL_P = tr(pir=100, pbs=500)
X_SMALL_C = x(cbs=500, ebs=1000)

VECTORS: list[Vector] = [
    # --- srTCM (RFC 2697), colour-blind: thresholds of a fresh meter -------------------------
    v("sr-cbs-1", sr(), "Tc 1000 >= 999: green, taken from C only",
      (999, 0, None, G, (1, 500))),
    v("sr-cbs", sr(), "Tc >= B is inclusive: exactly CBS is green and empties C",
      (1000, 0, None, G, (0, 500))),
    v("sr-cbs+1-yellow", SR_SMALL_C, "Tc 500 < 501 so not green; Te 1000 >= 501: yellow from E",
      (501, 0, None, Y, (500, 499))),
    v("sr-cbs+1-red", sr(), "1001 fits neither C nor E: red, and red takes nothing (the full "
      "CBS then EBS still pass)",
      (1001, 0, None, R, (1000, 500)), (1000, 0, None, G, (0, 500)),
      (500, 0, None, Y, (0, 0))),
    v("sr-ebs-1", sr(), "C drained, EBS-1 is yellow; the 1 byte left in E decides the next two",
      (1000, 0, None, G, (0, 500)), (499, 0, None, Y, (0, 1)), (2, 0, None, R, (0, 1)),
      (1, 0, None, Y, (0, 0))),
    v("sr-ebs+1", sr(), "C drained, EBS+1 is red and takes nothing; exactly EBS is then yellow",
      (1000, 0, None, G, (0, 500)), (501, 0, None, R, (0, 500)), (500, 0, None, Y, (0, 0))),
    # --- srTCM: refill after a pause ---------------------------------------------------------
    v("sr-refill-1.5s", sr(), "1.5 s at 100 B/s refill C by exactly 150: 151 misses green by "
      "one byte (yellow), then 150 is green",
      (1000, 0, None, G, (0, 500)), (151, 3 * S // 2, None, Y, (150, 349)),
      (150, 3 * S // 2, None, G, (0, 349))),
    v("sr-refill-1ns", sr(), "1 ns at 100 B/s is exactly 1/10^7 byte, kept exact; 10^7 ns "
      "make exactly 1 byte",
      (1000, 0, None, G, (0, 500)), (0, 1, None, G, (F(1, 10**7), 500)),
      (1, 10**7, None, G, (0, 500))),
    v("sr-float-rate", sr(cir=0.1, cbs=10, ebs=0), "a float rate is read through its repr: "
      "0.1 B/s for 10 s is exactly 1 byte (binary 0.1 would leave C above 0)",
      (10, 0, None, G, (0, 0)), (1, 10 * S, None, G, (0, 0))),
    v("sr-start-ns", sr(), "start_ns=10 s anchors the clock: the packet at 5 s accrues "
      "nothing, nor do 5..10 s; 10..11 s give 100", (1000, 5 * S, None, G, (0, 500)),
      (0, 10 * S, None, G, (0, 500)), (100, 11 * S, None, G, (0, 500)), start_ns=10 * S),
    v("sr-backwards", sr(), "an earlier time adds nothing and does not move the settlement "
      "back: 10..11 s give 100, not 5..11 s's 600",
      (1000, 10 * S, None, G, (0, 500)), (0, 5 * S, None, G, (0, 500)),
      (0, 11 * S, None, G, (100, 500))),
    # --- srTCM: C's overflow spills into E ---------------------------------------------------
    v("sr-spill-overflow-only", sr(), "12 s bring 1200 bytes: C takes 1000 to its brim, only "
      "the other 200 spill into E",
      (1000, 0, None, G, (0, 500)), (500, 0, None, Y, (0, 0)),
      (0, 12 * S, None, G, (1000, 200))),
    v("sr-spill-c-full", sr(), "C is full, so every arriving byte goes to E: 2 s make Te 200",
      (500, 0, Y, Y, (1000, 0)), (0, 2 * S, None, G, (1000, 200)),
      (201, 2 * S, Y, R, (1000, 200)), (200, 2 * S, Y, Y, (1000, 0))),
    v("sr-spill-split", sr(), "0.2 s bring 20 bytes in one settlement: 10 top C up first, "
      "only the remaining 10 reach E",
      (500, 0, Y, Y, (1000, 0)), (10, 0, G, G, (990, 0)), (0, S // 5, None, G, (1000, 10))),
    v("sr-spill-both-full-lost", sr(), "10.5 s: C fills (1000), the other 50 reach E (450); "
      "1 s more fills E and the other 50 are lost",
      (1000, 0, None, G, (0, 500)), (100, 0, None, Y, (0, 400)),
      (0, 21 * S // 2, None, G, (1000, 450)), (0, 23 * S // 2, None, G, (1000, 500))),
    v("sr-idle-full-lost", sr(), "100 s on full buckets are lost: still CBS then EBS, no more",
      (0, 100 * S, None, G, (1000, 500)), (1000, 100 * S, None, G, (0, 500)),
      (500, 100 * S, None, Y, (0, 0)), (1, 100 * S, None, R, (0, 0))),
    v("sr-cbs-zero", sr(cbs=0), "CBS 0: C holds nothing, a byte is yellow; every token spills "
      "into E (0.01 s refill it by 1)",
      (1, 0, None, Y, (0, 499)), (0, 0, None, G, (0, 499)), (0, S // 100, None, G, (0, 500))),
    v("sr-ebs-zero", sr(ebs=0), "EBS 0: nothing is ever yellow, C's overflow has nowhere to go",
      (1001, 0, None, R, (1000, 0)), (1000, 0, None, G, (0, 0)), (1, 0, None, R, (0, 0)),
      (0, 20 * S, None, G, (1000, 0)), (1, 20 * S, Y, R, (1000, 0))),
    # --- srTCM colour-aware: arrived G/Y/R x which buckets hold B ----------------------------
    v("sr-aware-G-both", sr(), "arrived green, C holds 400: green, from C",
      (400, 0, G, G, (600, 500))),
    v("sr-aware-Y-both", sr(), "arrived yellow is never promoted: yellow from E though C holds",
      (400, 0, Y, Y, (1000, 100))),
    v("sr-aware-R-both", sr(), "arrived red stays red and takes nothing",
      (400, 0, R, R, (1000, 500))),
    v("sr-aware-G-C-only", sr(), "arrived green, C holds 800 (E does not): green",
      (800, 0, G, G, (200, 500))),
    v("sr-aware-Y-C-only", sr(), "arrived yellow may only take from E, which cannot: red",
      (800, 0, Y, R, (1000, 500))),
    v("sr-aware-R-C-only", sr(), "arrived red stays red", (800, 0, R, R, (1000, 500))),
    v("sr-aware-G-E-only", SR_SMALL_C, "arrived green, C 500 < 800: yellow from E",
      (800, 0, G, Y, (500, 200))),
    v("sr-aware-Y-E-only", SR_SMALL_C, "arrived yellow, E holds: yellow from E",
      (800, 0, Y, Y, (500, 200))),
    v("sr-aware-R-E-only", SR_SMALL_C, "arrived red stays red though E holds",
      (800, 0, R, R, (500, 1000))),
    v("sr-aware-G-neither", sr(), "neither bucket holds 1200: red whatever it arrived as",
      (1200, 0, G, R, (1000, 500))),
    v("sr-aware-Y-neither", sr(), "neither holds: red", (1200, 0, Y, R, (1000, 500))),
    v("sr-aware-R-neither", sr(), "neither holds: red", (1200, 0, R, R, (1000, 500))),
    v("sr-blind-E-only", SR_SMALL_C, "blind, C 500 < 800, E holds: yellow",
      (800, 0, None, Y, (500, 200))),
    # --- trTCM (RFC 2698), colour-blind ------------------------------------------------------
    v("tr-pbs+1", tr(), "Tp 1500 < 1501: red, nothing taken; exactly PBS then passes P "
      "(yellow: C holds only 1000)",
      (1501, 0, None, R, (1500, 1000)), (1500, 0, None, Y, (0, 1000))),
    v("tr-pbs-1", tr(), "PBS-1 passes P, C 1000 < 1499: yellow from P only; the byte left in "
      "P decides the next two",
      (1499, 0, None, Y, (1, 1000)), (2, 0, None, R, (1, 1000)), (1, 0, None, G, (0, 999))),
    v("tr-cbs-1", tr(), "both hold 999: green, taken from both", (999, 0, None, G, (501, 1))),
    v("tr-cbs", tr(), "Tc >= B is inclusive: exactly CBS is green", (1000, 0, None, G, (500, 0))),
    v("tr-cbs+1", tr(), "Tc 1000 < 1001: yellow, taken from P only",
      (1001, 0, None, Y, (499, 1000))),
    v("tr-peak-first", TR_SMALL_P, "P is checked first: with PBS 500 < CBS 1000, a packet C "
      "could hold is red beyond P",
      (501, 0, None, R, (500, 1000)), (500, 0, None, G, (0, 500)), (1, 0, None, R, (0, 500))),
    v("tr-refill-own-rates", tr(), "1.5 s refill P by 300 (PIR) and C by 150 (CIR): 151 is "
      "yellow, 150 then exceeds P (149), 149 is green",
      (1000, 0, None, G, (500, 0)), (500, 0, None, Y, (0, 0)),
      (151, 3 * S // 2, None, Y, (149, 150)), (150, 3 * S // 2, None, R, (149, 150)),
      (149, 3 * S // 2, None, G, (0, 1))),
    v("tr-caps-own-size", tr(), "after 100 s each bucket is capped at its own size",
      (1000, 0, None, G, (500, 0)), (0, 100 * S, None, G, (1500, 1000))),
    v("tr-pir-eq-cir", tr(pir=100, pbs=1000), "PIR = CIR is allowed; 1 s gives each 100",
      (1000, 0, None, G, (0, 0)), (100, S, None, G, (0, 0)), (1, S, None, R, (0, 0))),
    v("tr-start-ns", tr(), "start_ns=10 s anchors the clock: nothing accrues before it",
      (1000, 5 * S, None, G, (500, 0)), (0, 11 * S, None, G, (700, 100)), start_ns=10 * S),
    v("tr-backwards", tr(), "an earlier time adds nothing and does not move the settlement "
      "back: 10..11 s give 200 and 100",
      (1000, 10 * S, None, G, (500, 0)), (0, 5 * S, None, G, (500, 0)),
      (0, 11 * S, None, G, (700, 100))),
    v("tr-exact-rates", tr(cir="1/3", cbs=10, pir=Decimal("0.5"), pbs=10), "3 s at 1/3 B/s "
      "is exactly 1 byte in C, at 0.5 B/s 3/2 in P",
      (10, 0, None, G, (0, 0)), (1, 3 * S, None, G, (F(1, 2), 0))),
    # --- trTCM colour-aware: arrived G/Y/R x which buckets hold B ----------------------------
    v("tr-aware-G-both", tr(), "arrived green, P and C hold 800: green from both",
      (800, 0, G, G, (700, 200))),
    v("tr-aware-Y-both", tr(), "arrived yellow stays yellow though C holds: from P only",
      (800, 0, Y, Y, (700, 1000))),
    v("tr-aware-R-both", tr(), "arrived red is red, nothing taken", (800, 0, R, R, (1500, 1000))),
    v("tr-aware-G-P-only", tr(), "arrived green, C 1000 < 1200: yellow from P",
      (1200, 0, G, Y, (300, 1000))),
    v("tr-aware-Y-P-only", tr(), "arrived yellow, P holds: yellow from P",
      (1200, 0, Y, Y, (300, 1000))),
    v("tr-aware-R-P-only", tr(), "arrived red is red", (1200, 0, R, R, (1500, 1000))),
    v("tr-aware-G-C-only", TR_SMALL_P, "P 500 < 800: red though it arrived green and C holds",
      (800, 0, G, R, (500, 1000))),
    v("tr-aware-Y-C-only", TR_SMALL_P, "P 500 < 800: red", (800, 0, Y, R, (500, 1000))),
    v("tr-aware-R-C-only", TR_SMALL_P, "arrived red is red", (800, 0, R, R, (500, 1000))),
    v("tr-aware-G-neither", tr(), "P 1500 < 1600: red", (1600, 0, G, R, (1500, 1000))),
    v("tr-aware-Y-neither", tr(), "P 1500 < 1600: red", (1600, 0, Y, R, (1500, 1000))),
    v("tr-aware-R-neither", tr(), "red", (1600, 0, R, R, (1500, 1000))),
    # --- RFC 4115, colour-blind --------------------------------------------------------------
    v("x-cbs-1", x(), "Tc 1000 >= 999: green from C", (999, 0, None, G, (1, 500))),
    v("x-cbs", x(), "exactly CBS is green", (1000, 0, None, G, (0, 500))),
    v("x-cbs+1-yellow", X_SMALL_C, "Tc 500 < 501, Te 1000 >= 501: yellow from E",
      (501, 0, None, Y, (500, 499))),
    v("x-cbs+1-red", x(), "1001 fits neither: red, nothing taken",
      (1001, 0, None, R, (1000, 500)), (1000, 0, None, G, (0, 500))),
    v("x-ebs+1", x(), "C drained: EBS+1 red (nothing taken), exactly EBS yellow",
      (1000, 0, None, G, (0, 500)), (501, 0, None, R, (0, 500)), (500, 0, None, Y, (0, 0))),
    v("x-ebs-1", x(), "C drained: EBS-1 yellow; the byte left in E decides the next two",
      (1000, 0, None, G, (0, 500)), (499, 0, None, Y, (0, 1)), (2, 0, None, R, (0, 1)),
      (1, 0, None, Y, (0, 0))),
    v("x-own-rates", x(), "2 s refill C by 200 (CIR) and E by 100 (EIR) at once (srTCM would "
      "give E nothing)",
      (1000, 0, None, G, (0, 500)), (500, 0, None, Y, (0, 0)),
      (0, 2 * S, None, G, (200, 100)), (201, 2 * S, None, R, (200, 100))),
    v("x-no-spill", x(), "C is full, yet 4 s give E only its EIR (200), none of C's overflow",
      (500, 0, Y, Y, (1000, 0)), (0, 4 * S, None, G, (1000, 200))),
    v("x-float-rates", x(cir=0.1, cbs=10, eir=0.1, ebs=10), "float rates read through their "
      "repr: 10 s at 0.1 B/s give exactly 1 byte to each bucket",
      (10, 0, None, G, (0, 10)), (10, 0, None, Y, (0, 0)), (1, 10 * S, None, G, (0, 1))),
    v("x-start-ns", x(), "start_ns=10 s anchors the clock: nothing accrues before it",
      (1000, 5 * S, None, G, (0, 500)), (0, 11 * S, None, G, (100, 500)), start_ns=10 * S),
    v("x-backwards", x(), "an earlier time adds nothing and does not move the settlement back",
      (1000, 10 * S, None, G, (0, 500)), (0, 5 * S, None, G, (0, 500)),
      (0, 11 * S, None, G, (100, 500))),
    v("x-cir-zero", x(cir=0, eir=100), "CIR 0: C never refills (0 after 100 s), E still does",
      (1000, 0, None, G, (0, 500)), (100, 0, None, Y, (0, 400)),
      (1, 100 * S, None, Y, (0, 499))),
    v("x-eir-zero", x(eir=0), "EIR 0: E never refills, and 100 s of C's overflow do not reach "
      "it",
      (1000, 0, None, G, (0, 500)), (500, 0, None, Y, (0, 0)),
      (1001, 100 * S, None, R, (1000, 0)), (1000, 100 * S, None, G, (0, 0))),
    v("x-cbs-zero", x(cbs=0, eir=100), "CBS 0: a byte cannot be green, it is yellow from E",
      (1, 0, None, Y, (0, 499)), (0, S // 100, None, G, (0, 500))),
    # --- RFC 4115 colour-aware ---------------------------------------------------------------
    v("x-aware-G-both", x(), "arrived green, C holds: green from C", (400, 0, G, G, (600, 500))),
    v("x-aware-Y-both", x(), "arrived yellow is not promoted: from E", (400, 0, Y, Y, (1000, 100))),
    v("x-aware-R-both", x(), "arrived red is red, nothing taken", (400, 0, R, R, (1000, 500))),
    v("x-aware-G-C-only", x(), "arrived green, C holds 800: green", (800, 0, G, G, (200, 500))),
    v("x-aware-Y-C-only", x(), "arrived yellow, E 500 < 800: red", (800, 0, Y, R, (1000, 500))),
    v("x-aware-R-C-only", x(), "arrived red is red", (800, 0, R, R, (1000, 500))),
    v("x-aware-G-E-only", X_SMALL_C, "arrived green, C 500 < 800: yellow from E",
      (800, 0, G, Y, (500, 200))),
    v("x-aware-Y-E-only", X_SMALL_C, "arrived yellow, E holds: yellow",
      (800, 0, Y, Y, (500, 200))),
    v("x-aware-R-E-only", X_SMALL_C, "arrived red is red", (800, 0, R, R, (500, 1000))),
    v("x-aware-G-neither", x(), "neither holds 1200: red", (1200, 0, G, R, (1000, 500))),
    v("x-aware-Y-neither", x(), "neither holds: red", (1200, 0, Y, R, (1000, 500))),
    v("x-aware-R-neither", x(), "red", (1200, 0, R, R, (1000, 500))),
]  # fmt: skip

IDS = [vector.id for vector in VECTORS]
assert len(set(IDS)) == len(IDS), "vector ids must be unique"


def native_meter(vector: Vector) -> Any:
    return NATIVE[vector.kind](**vector.params, start_ns=vector.start_ns)


def native_levels(meter: Any, kind: str) -> tuple[Any, Any]:
    first, second = mm.MODELS[kind].LEVELS
    return getattr(meter, first), getattr(meter, second)


def assert_exact_level(got: Any, want: Any, context: str) -> None:
    want = Fraction(want)
    assert got == want, f"{context}: level {got!r}, expected {want}"
    kind = int if want.denominator == 1 else Fraction
    assert type(got) is kind, f"{context}: level {got!r} should be a {kind.__name__}"


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_native_matches_vector(vector: Vector) -> None:
    meter = native_meter(vector)
    for i, (nbytes, now, arrived, colour, levels) in enumerate(vector.steps):
        context = f"{vector.id} step {i} ({vector.why})"
        color = None if arrived is None else Color(LETTER[arrived])
        got = meter.mark(nbytes, now, color)
        assert got is Color(LETTER[colour]), f"{context}: {got!r}, expected {LETTER[colour]}"
        for level, want in zip(native_levels(meter, vector.kind), levels, strict=True):
            assert_exact_level(level, want, context)


TRACEABLE = [
    vector
    for vector in VECTORS
    if all(a[1] <= b[1] for a, b in zip(vector.steps, vector.steps[1:], strict=False))
    and len({step[2] is None for step in vector.steps}) == 1
]


@pytest.mark.parametrize("vector", TRACEABLE, ids=[vector.id for vector in TRACEABLE])
def test_native_trace_matches_vector(vector: Vector) -> None:
    meter = native_meter(vector)
    sizes = [step[0] for step in vector.steps]
    times = [step[1] for step in vector.steps]
    aware = vector.steps[0][2] is not None
    colors = [mm.COLOR_CODES.index(LETTER[step[2]]) for step in vector.steps] if aware else None
    codes = meter.mark_many(sizes, times, colors)
    got = [COLORS[code] for code in codes]
    assert got == [Color(LETTER[step[3]]) for step in vector.steps], vector.why
    for level, want in zip(native_levels(meter, vector.kind), vector.steps[-1][4], strict=True):
        assert_exact_level(level, want, f"{vector.id} after the trace ({vector.why})")


def disagreement(model: mm.ModelMeter, vector: Vector) -> str | None:
    """Where ``model`` departs from the vector, or None."""
    for i, (nbytes, now, arrived, colour, levels) in enumerate(vector.steps):
        got = model.mark(nbytes, now, None if arrived is None else LETTER[arrived])
        if got != LETTER[colour] or model.levels() != tuple(map(Fraction, levels)):
            return f"step {i}: {got} {model.levels()} != {LETTER[colour]} {levels}"
    return None


@pytest.mark.parametrize("vector", VECTORS, ids=IDS)
def test_model_matches_vector(vector: Vector) -> None:
    found = disagreement(mm.model(vector.kind, vector.params, vector.start_ns), vector)
    assert found is None, f"{vector.id} ({vector.why}): {found}"


# ---------------------------------------------------------------------------------------------
# Mutants: each breaks one rule; some vector must catch each
# ---------------------------------------------------------------------------------------------


def _strict_green(meter: Any, nbytes: int, arrived: str | None) -> str:
    may_green, may_yellow = arrived in (None, mm.GREEN), arrived in (None, mm.GREEN, mm.YELLOW)
    if may_green and meter.tc > nbytes:
        meter.tc -= nbytes
        return mm.GREEN
    if may_yellow and meter.te >= nbytes:
        meter.te -= nbytes
        return mm.YELLOW
    return mm.RED


def _strict_yellow(meter: Any, nbytes: int, arrived: str | None) -> str:
    may_green, may_yellow = arrived in (None, mm.GREEN), arrived in (None, mm.GREEN, mm.YELLOW)
    if may_green and meter.tc >= nbytes:
        meter.tc -= nbytes
        return mm.GREEN
    if may_yellow and meter.te > nbytes:
        meter.te -= nbytes
        return mm.YELLOW
    return mm.RED


def _decide_mutant(base: type, name: str, fn: Any) -> type:
    """A mutant whose decision is ``fn(meter, nbytes, arrived)``."""
    return type(name, (base,), {"decide": lambda self, n, a: fn(self, n, a)})


def _decide_with(base: type, name: str, pre: Any) -> type:
    """A mutant that rewrites (nbytes, arrived) or the levels before the correct decision."""

    def decide(self: Any, nbytes: int, arrived: str | None) -> str:
        return base.decide(self, *pre(self, nbytes, arrived))

    return type(name, (base,), {"decide": decide})


def _after(base: type, name: str, post: Any) -> type:
    """A mutant that changes the levels after the correct decision."""

    def decide(self: Any, nbytes: int, arrived: str | None) -> str:
        before = self.levels()
        colour = base.decide(self, nbytes, arrived)
        post(self, nbytes, colour, before)
        return colour

    return type(name, (base,), {"decide": decide})


def _accrue(base: type, name: str, fn: Any) -> type:
    return type(name, (base,), {"accrue": lambda self, s: fn(self, s)})


def _sr_no_spill(m: Any, s: Fraction) -> None:
    m.tc = min(m.tc + m.cir * s, Fraction(m.cbs))


def _sr_e_independent(m: Any, s: Fraction) -> None:
    m.tc = min(m.tc + m.cir * s, Fraction(m.cbs))
    m.te = min(m.te + m.cir * s, Fraction(m.ebs))


def _sr_e_uncapped(m: Any, s: Fraction) -> None:
    arrived = m.cir * s
    into_c = min(arrived, m.cbs - m.tc)
    m.tc += into_c
    m.te += arrived - into_c


def _sr_c_uncapped(m: Any, s: Fraction) -> None:
    m.tc += m.cir * s


def _sr_whole_bytes(m: Any, s: Fraction) -> None:
    mm.SrTcm.accrue(m, Fraction(math.floor(m.cir * s)))


def _x_spill(m: Any, s: Fraction) -> None:
    arrived = m.cir * s
    into_c = min(arrived, m.cbs - m.tc)
    m.tc += into_c
    m.te = min(m.te + m.eir * s + arrived - into_c, Fraction(m.ebs))


def _x_e_at_cir(m: Any, s: Fraction) -> None:
    m.tc = min(m.tc + m.cir * s, Fraction(m.cbs))
    m.te = min(m.te + m.cir * s, Fraction(m.ebs))


def _tr_swapped_rates(m: Any, s: Fraction) -> None:
    m.tp = min(m.tp + m.cir * s, Fraction(m.pbs))
    m.tc = min(m.tc + m.pir * s, Fraction(m.cbs))


def _tr_shared_cap(m: Any, s: Fraction) -> None:
    m.tp = min(m.tp + m.pir * s, Fraction(m.pbs))
    m.tc = min(m.tc + m.cir * s, Fraction(m.pbs))


def _tr_decide(rule: str) -> Any:
    def decide(m: Any, nbytes: int, arrived: str | None) -> str:
        red = arrived == mm.RED or (m.tp <= nbytes if rule == "strict-p" else m.tp < nbytes)
        if rule == "aware-red-ignored":
            red = m.tp < nbytes
        if rule == "green-without-p" and arrived is None and m.tc >= nbytes:
            m.tp = max(m.tp - nbytes, Fraction(0))
            m.tc -= nbytes
            return mm.GREEN
        if red:
            if rule == "red-takes-p":
                m.tp = max(m.tp - nbytes, Fraction(0))
            return mm.RED
        yellow = m.tc <= nbytes if rule == "strict-c" else m.tc < nbytes
        if rule != "aware-yellow-promoted":
            yellow = yellow or arrived == mm.YELLOW
        if yellow:
            m.tp -= nbytes
            if rule == "yellow-takes-both":
                m.tc = max(m.tc - nbytes, Fraction(0))
            return mm.YELLOW
        m.tp -= nbytes
        if rule != "green-takes-p-only":
            m.tc -= nbytes
        return mm.GREEN

    return decide


def _time_mutant(base: type, name: str, kind: str) -> type:
    def settle(self: Any, now: int) -> None:
        if kind == "rewinds" and self.settled_at is not None and now < self.settled_at:
            self.settled_at = now
            return
        if kind == "start-ignored" and not getattr(self, "_seen", False):
            self._seen = True
            self.settled_at = now
            return
        base.settle(self, now)

    return type(name, (base,), {"settle": settle})


def _float_rate(base: type, name: str) -> type:
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        for attr in ("cir", "pir", "eir"):
            if hasattr(self, attr):
                setattr(self, attr, Fraction(float(getattr(self, attr))))

    return type(name, (base,), {"__init__": init})


def _excess_mutants(base: type, prefix: str) -> dict[str, type]:
    def promote_yellow(m: Any, n: int, a: str | None) -> tuple[int, str | None]:
        return n, (mm.GREEN if a == mm.YELLOW else a)

    def red_as_yellow(m: Any, n: int, a: str | None) -> tuple[int, str | None]:
        return n, (mm.YELLOW if a == mm.RED else a)

    def blind(m: Any, n: int, a: str | None) -> tuple[int, str | None]:
        return n, None

    def red_drains_e(m: Any, n: int, colour: str, before: Any) -> None:
        if colour == mm.RED:
            m.te = Fraction(0)

    def yellow_takes_c_too(m: Any, n: int, colour: str, before: Any) -> None:
        if colour == mm.YELLOW:
            m.tc = max(m.tc - n, Fraction(0))

    def green_takes_e_too(m: Any, n: int, colour: str, before: Any) -> None:
        if colour == mm.GREEN:
            m.te = max(m.te - n, Fraction(0))

    return {
        f"{prefix}: green needs Tc > B": _decide_mutant(base, "M", _strict_green),
        f"{prefix}: yellow needs Te > B": _decide_mutant(base, "M", _strict_yellow),
        f"{prefix}: arrived yellow may turn green": _decide_with(base, "M", promote_yellow),
        f"{prefix}: arrived red may turn yellow": _decide_with(base, "M", red_as_yellow),
        f"{prefix}: colour-aware ignored": _decide_with(base, "M", blind),
        f"{prefix}: red drains E": _after(base, "M", red_drains_e),
        f"{prefix}: yellow also takes from C": _after(base, "M", yellow_takes_c_too),
        f"{prefix}: green also takes from E": _after(base, "M", green_takes_e_too),
        f"{prefix}: backwards clock rewinds": _time_mutant(base, "M", "rewinds"),
        f"{prefix}: start_ns ignored": _time_mutant(base, "M", "start-ignored"),
        f"{prefix}: float rates": _float_rate(base, "M"),
    }


MUTANTS: dict[str, tuple[str, type]] = {}
for _name, _cls in {
    **_excess_mutants(mm.SrTcm, "srTCM"),
    "srTCM: no spill from C into E": _accrue(mm.SrTcm, "M", _sr_no_spill),
    "srTCM: E fills at CIR independently": _accrue(mm.SrTcm, "M", _sr_e_independent),
    "srTCM: E not capped at EBS": _accrue(mm.SrTcm, "M", _sr_e_uncapped),
    "srTCM: C not capped at CBS": _accrue(mm.SrTcm, "M", _sr_c_uncapped),
    "srTCM: refill in whole bytes": _accrue(mm.SrTcm, "M", _sr_whole_bytes),
}.items():
    MUTANTS[_name] = ("srtcm", _cls)
for _name, _cls in {
    **_excess_mutants(mm.Rfc4115, "RFC 4115"),
    "RFC 4115: C's overflow spills into E": _accrue(mm.Rfc4115, "M", _x_spill),
    "RFC 4115: E fills at CIR": _accrue(mm.Rfc4115, "M", _x_e_at_cir),
}.items():
    MUTANTS[_name] = ("rfc4115", _cls)
for _rule in (
    "strict-p",
    "strict-c",
    "aware-red-ignored",
    "aware-yellow-promoted",
    "green-without-p",
    "red-takes-p",
    "yellow-takes-both",
    "green-takes-p-only",
):
    MUTANTS[f"trTCM: {_rule}"] = ("trtcm", _decide_mutant(mm.TrTcm, "M", _tr_decide(_rule)))
MUTANTS["trTCM: P and C rates swapped"] = ("trtcm", _accrue(mm.TrTcm, "M", _tr_swapped_rates))
MUTANTS["trTCM: C capped at PBS"] = ("trtcm", _accrue(mm.TrTcm, "M", _tr_shared_cap))
MUTANTS["trTCM: backwards clock rewinds"] = ("trtcm", _time_mutant(mm.TrTcm, "M", "rewinds"))
MUTANTS["trTCM: start_ns ignored"] = ("trtcm", _time_mutant(mm.TrTcm, "M", "start-ignored"))
MUTANTS["trTCM: float rates"] = ("trtcm", _float_rate(mm.TrTcm, "M"))


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_broken_rule_is_caught(name: str) -> None:
    kind, mutant = MUTANTS[name]
    caught = [
        vector.id
        for vector in VECTORS
        if vector.kind == kind
        and disagreement(mutant(**vector.params, start_ns=vector.start_ns), vector) is not None
    ]
    assert caught, f"no vector catches the mutant {name!r}"


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

# (meter class, arguments, the one RFC rule the message must name)
BAD_CONFIGS = [
    (SingleRateMeter, (0, 1000, 500), "CIR > 0"),  # RFC 2697: CIR must be positive
    (SingleRateMeter, ("0", 1000, 500), "CIR > 0"),  # ... also when given as a string
    (SingleRateMeter, (0.0, 1000, 500), "CIR > 0"),  # ... or a float
    (SingleRateMeter, (100, 0, 0), "CBS > 0 or EBS > 0"),  # at least one bucket has a size
    (TwoRateMeter, (0, 1000, 200, 1500), "CIR > 0"),  # RFC 2698: CIR must be positive
    (TwoRateMeter, (200, 1000, 100, 1500), "PIR >= CIR"),  # the peak is at least the commitment
    (TwoRateMeter, (100, 1000, F(9999, 100), 1500), "PIR >= CIR"),  # ... exactly: 99.99 < 100
    (TwoRateMeter, (100, 1000, 200, 0), "PBS > 0"),  # the peak bucket has a size
    (TwoRateMeter, (100, 0, 200, 1500), "CBS > 0"),  # the committed bucket has a size
    (ExcessRateMeter, (0, 1000, 0, 500), "CIR > 0 or EIR > 0"),  # RFC 4115: not both rates 0
    (ExcessRateMeter, (100, 0, 50, 0), "CBS > 0 or EBS > 0"),  # at least one bucket has a size
]

# Boundaries the rules allow (each next to a refused row above).
GOOD_CONFIGS = [
    (SingleRateMeter, (F(1, 10**9), 1000, 500)),  # CIR > 0, however small
    (SingleRateMeter, (100, 0, 500)),  # CBS 0 is fine when EBS > 0
    (SingleRateMeter, (100, 1000, 0)),  # EBS 0 is fine when CBS > 0
    (TwoRateMeter, (100, 1000, 100, 1500)),  # PIR = CIR
    (TwoRateMeter, (100, 1000, "100.000000001", 1500)),  # PIR just above CIR
    (TwoRateMeter, (100, 1000, 200, 1)),  # PBS 1 (smaller than CBS is allowed)
    (ExcessRateMeter, (0, 1000, 50, 500)),  # CIR 0 alone
    (ExcessRateMeter, (100, 1000, 0, 500)),  # EIR 0 alone
    (ExcessRateMeter, (0, 0, 50, 500)),  # CIR 0 and CBS 0
]

# Arguments that are no RFC rule but still refused, naming the parameter: (class, args, name).
BAD_ARGUMENTS = [
    (SingleRateMeter, (-1, 1000, 500), ValueError, "cir"),
    (SingleRateMeter, (100, -1, 500), ValueError, "cbs"),
    (SingleRateMeter, (100, 1000, -1), ValueError, "ebs"),
    (SingleRateMeter, (float("nan"), 1000, 500), ValueError, "cir"),
    (SingleRateMeter, (float("inf"), 1000, 500), ValueError, "cir"),
    (SingleRateMeter, (True, 1000, 500), TypeError, "cir"),
    (SingleRateMeter, (100, 10.0, 500), TypeError, "cbs"),
    (TwoRateMeter, (100, 1000, -200, 1500), ValueError, "pir"),
    (TwoRateMeter, (100, 1000, 200, 2**64), ValueError, "pbs"),
    (ExcessRateMeter, (100, 1000, "fast", 500), ValueError, "eir"),
]


def rules_named(message: str) -> set[str]:
    """The rules of ``mm.RULES`` a message names (a rule inside a longer named one excluded)."""
    named = {rule for rule in mm.RULES if rule in message}
    return {rule for rule in named if not any(rule != o and rule in o for o in named)}


@pytest.mark.parametrize(("cls", "args", "rule"), BAD_CONFIGS)
def test_bad_configuration_names_the_rule(cls: type, args: tuple, rule: str) -> None:
    with pytest.raises(ValueError) as info:
        cls(*args)
    assert rules_named(str(info.value)) == {rule}, str(info.value)


@pytest.mark.parametrize(("cls", "args"), GOOD_CONFIGS)
def test_boundary_configuration_builds(cls: type, args: tuple) -> None:
    meter = cls(*args)
    assert meter.mark(0, 0) is Color.GREEN


@pytest.mark.parametrize(("cls", "args", "exc", "name"), BAD_ARGUMENTS)
def test_bad_argument_names_the_parameter(cls: type, args: tuple, exc: type, name: str) -> None:
    with pytest.raises(exc, match=name):
        cls(*args)


def test_the_model_agrees_on_the_configuration_tables() -> None:
    kinds = {SingleRateMeter: "srtcm", TwoRateMeter: "trtcm", ExcessRateMeter: "rfc4115"}
    names = {
        "srtcm": ("cir", "cbs", "ebs"),
        "trtcm": ("cir", "cbs", "pir", "pbs"),
        "rfc4115": ("cir", "cbs", "eir", "ebs"),
    }
    for cls, args, rule in BAD_CONFIGS:
        kind = kinds[cls]
        assert mm.broken_rules(kind, **dict(zip(names[kind], args, strict=True))) == [rule]
    for cls, args in GOOD_CONFIGS:
        kind = kinds[cls]
        assert mm.broken_rules(kind, **dict(zip(names[kind], args, strict=True))) == []
