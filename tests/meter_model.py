"""Pure-Python models of the three-colour meters of issue 5 (``protocol_in_code.qos.meter``).

Written from the issue's rule text, not from the Rust: every level is an exact
``fractions.Fraction`` of *bytes*, time is integer nanoseconds turned into exact seconds, and
nothing is scaled into integer units. The native meters agree with these models only if their
integer settlement really is exact.

The rules, as the models apply them (B = packet size in bytes, rates in bytes per second):

* **srTCM (RFC 2697)**: one rate CIR; buckets C (size CBS) and E (size EBS), both full at the
  start. Tokens arrive at CIR into C; only once C is full do they go to E; once both are full
  they are lost. Blind: ``Tc >= B`` green (``Tc -= B``), else ``Te >= B`` yellow (``Te -= B``),
  else red (nothing taken). Aware: green only if it arrived green and ``Tc >= B``; else yellow
  if it arrived green or yellow and ``Te >= B`` (taken from E); else red.
* **trTCM (RFC 2698)**: P (PIR, PBS) and C (CIR, CBS), independent, both full at the start.
  Blind: ``Tp < B`` red (nothing taken), else ``Tc < B`` yellow (``Tp -= B``), else green
  (``Tp -= B``, ``Tc -= B``). Aware: red if it arrived red or ``Tp < B``; else yellow if it
  arrived yellow or ``Tc < B`` (from P only); else green (from both).
* **RFC 4115**: srTCM's decisions, but C fills at CIR and E at EIR, independently, with no
  spill from C into E; CIR or EIR may be 0 (not both).
* Each decision first settles the buckets to ``now``. A new meter has no settlement time until
  ``start_ns`` or its first decision, which anchors it there without accruing anything. When
  ``now`` is not after the settlement time (the same instant, or a clock gone backwards), nothing
  accrues and the settlement time stays where it was (the real-clock limiter's settlement,
  which issue 5 reuses).

Colours are the strings ``"Green"``, ``"Yellow"`` and ``"Red"`` (the values of ``Color``).
Rates are read exactly: int, ``Fraction``, ``Decimal`` and numeric ``str`` as they are, a float
through its shortest ``repr`` (``0.1`` is 1/10).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from limiter_model import exact  # rates are read as the limiter reads them

NS_PER_SECOND = 10**9
GREEN, YELLOW, RED = "Green", "Yellow", "Red"
COLOR_CODES = (GREEN, YELLOW, RED)  # the codes of mark_many's arrays: 0, 1, 2


class ModelMeter:
    """What the three meters share: lazy settlement to ``now``, then a decision."""

    #: The native meter's names for its two levels, in order.
    LEVELS: tuple[str, str]

    def __init__(self, start_ns: int | None = None) -> None:
        self.settled_at: int | None = start_ns

    # -- settlement ---------------------------------------------------------------------------

    def settle(self, now: int) -> None:
        if self.settled_at is None:
            self.settled_at = now  # anchored, nothing accrues
            return
        if now <= self.settled_at:
            return  # the same instant, or a clock gone backwards: nothing changes
        seconds = Fraction(now - self.settled_at, NS_PER_SECOND)
        self.settled_at = now
        self.accrue(seconds)

    def accrue(self, seconds: Fraction) -> None:
        raise NotImplementedError

    # -- decisions ----------------------------------------------------------------------------

    def decide(self, nbytes: int, arrived: str | None) -> str:
        raise NotImplementedError

    def mark(self, nbytes: int, now: int, arrived: str | None = None) -> str:
        if nbytes < 0:
            raise ValueError("a packet has a size >= 0")
        if arrived not in (None, *COLOR_CODES):
            raise ValueError(f"not a colour: {arrived!r}")
        self.settle(now)
        return self.decide(nbytes, arrived)

    def levels(self) -> tuple[Fraction, Fraction]:
        first, second = self.LEVELS
        return getattr(self, first), getattr(self, second)

    def copy(self) -> ModelMeter:
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin


def excess_decision(meter: Any, nbytes: int, arrived: str | None) -> str:
    """RFC 2697's decision (also RFC 4115's): green from C, else yellow from E, else red."""
    may_be_green = arrived in (None, GREEN)
    may_be_yellow = arrived in (None, GREEN, YELLOW)
    if may_be_green and meter.tc >= nbytes:
        meter.tc -= nbytes
        return GREEN
    if may_be_yellow and meter.te >= nbytes:
        meter.te -= nbytes
        return YELLOW
    return RED


class SrTcm(ModelMeter):
    """RFC 2697: one rate; C's overflow spills into E; beyond both, tokens are lost."""

    LEVELS = ("tc", "te")

    def __init__(self, cir: Any, cbs: int, ebs: int, start_ns: int | None = None) -> None:
        super().__init__(start_ns)
        self.cir, self.cbs, self.ebs = exact(cir), cbs, ebs
        self.tc, self.te = Fraction(cbs), Fraction(ebs)

    def accrue(self, seconds: Fraction) -> None:
        arrived = self.cir * seconds
        into_c = min(arrived, self.cbs - self.tc)  # C first, up to its brim
        self.tc += into_c
        self.te = min(self.te + (arrived - into_c), Fraction(self.ebs))  # the rest to E, capped

    def decide(self, nbytes: int, arrived: str | None) -> str:
        return excess_decision(self, nbytes, arrived)


class TrTcm(ModelMeter):
    """RFC 2698: independent peak (P) and committed (C) buckets."""

    LEVELS = ("tp", "tc")

    def __init__(self, cir: Any, cbs: int, pir: Any, pbs: int, start_ns: int | None = None) -> None:
        super().__init__(start_ns)
        self.cir, self.cbs, self.pir, self.pbs = exact(cir), cbs, exact(pir), pbs
        self.tp, self.tc = Fraction(pbs), Fraction(cbs)

    def accrue(self, seconds: Fraction) -> None:
        self.tp = min(self.tp + self.pir * seconds, Fraction(self.pbs))
        self.tc = min(self.tc + self.cir * seconds, Fraction(self.cbs))

    def decide(self, nbytes: int, arrived: str | None) -> str:
        if arrived == RED or self.tp < nbytes:
            return RED
        if arrived == YELLOW or self.tc < nbytes:
            self.tp -= nbytes
            return YELLOW
        self.tp -= nbytes
        self.tc -= nbytes
        return GREEN


class Rfc4115(ModelMeter):
    """RFC 4115: C at CIR and E at EIR, independent, no spill; decided like RFC 2697."""

    LEVELS = ("tc", "te")

    def __init__(self, cir: Any, cbs: int, eir: Any, ebs: int, start_ns: int | None = None) -> None:
        super().__init__(start_ns)
        self.cir, self.cbs, self.eir, self.ebs = exact(cir), cbs, exact(eir), ebs
        self.tc, self.te = Fraction(cbs), Fraction(ebs)

    def accrue(self, seconds: Fraction) -> None:
        self.tc = min(self.tc + self.cir * seconds, Fraction(self.cbs))
        self.te = min(self.te + self.eir * seconds, Fraction(self.ebs))

    def decide(self, nbytes: int, arrived: str | None) -> str:
        return excess_decision(self, nbytes, arrived)


# ---------------------------------------------------------------------------------------------
# Configuration: which of the RFC's rules a set of parameters breaks
# ---------------------------------------------------------------------------------------------

#: Every rule text a bad configuration may be refused with.
RULES = ("CIR > 0", "PIR >= CIR", "PBS > 0", "CBS > 0", "CBS > 0 or EBS > 0", "CIR > 0 or EIR > 0")


def broken_rules(kind: str, **params: Any) -> list[str]:
    """The RFC rules (in ``RULES``' words) that the (non-negative) parameters break."""
    p = {name: exact(value) for name, value in params.items()}
    broken = []
    if kind == "srtcm":
        if p["cir"] <= 0:
            broken.append("CIR > 0")
        if p["cbs"] <= 0 and p["ebs"] <= 0:
            broken.append("CBS > 0 or EBS > 0")
    elif kind == "trtcm":
        if p["cir"] <= 0:
            broken.append("CIR > 0")
        if p["pir"] < p["cir"]:
            broken.append("PIR >= CIR")
        if p["pbs"] <= 0:
            broken.append("PBS > 0")
        if p["cbs"] <= 0:
            broken.append("CBS > 0")
    elif kind == "rfc4115":
        if p["cir"] <= 0 and p["eir"] <= 0:
            broken.append("CIR > 0 or EIR > 0")
        if p["cbs"] <= 0 and p["ebs"] <= 0:
            broken.append("CBS > 0 or EBS > 0")
    else:
        raise ValueError(f"unknown meter kind {kind!r}")
    return broken


MODELS: dict[str, type[ModelMeter]] = {"srtcm": SrTcm, "trtcm": TrTcm, "rfc4115": Rfc4115}


def model(kind: str, params: dict[str, Any], start_ns: int | None = None) -> ModelMeter:
    """A model meter of ``kind`` ("srtcm", "trtcm", "rfc4115") from the native keyword names."""
    return MODELS[kind](**params, start_ns=start_ns)
