"""A pure-Python reference model of ``protocol_in_code.qos.limiter.RateLimiter`` (issue 4).

Written from the issue's rules, not from the Rust: every quantity is an exact
``fractions.Fraction`` in *tokens* and *nanoseconds* (no units, no scaled integers), so the model
and the implementation agree only if the implementation's integer trick really is exact.

The rules, as the model applies them:

* A rate is ``rate / per`` tokens per second, read exactly: int, ``Fraction``, ``Decimal`` and
  numeric ``str`` as they are, a float through its shortest ``repr`` (so ``0.1`` is 1/10).
  ``burst`` defaults to ``ceil(rate)`` (the rate as given, before dividing by ``per``). A
  ``str`` may say its period (``"100/minute"``: rate 100, per 60); two numbers around a slash
  (``"100/60"``) are refused.
* A new limiter holds ``initial`` tokens in every band (default: each band's burst). It has no
  settlement time until ``start_ns`` or, without one, until its first call of any kind, which
  anchors it at that call's time without accruing anything.
* Settlement at ``now``: every band whose settlement time is before ``now`` becomes
  ``min(balance + (now - settled_at) * rate_per_ns, burst)``, settled at ``now``; a band
  whose settlement time is not before it (equal, a clock gone backwards, or a debt's point:
  see ``settle``) is left as it is. Until a debt, the bands share one settlement time.
* A request for ``n`` is NEVER if ``n`` exceeds some band's burst (``try_acquire`` raises
  ``ValueError`` then, after the settlement); else ALLOWED if every band
  holds ``n`` (then every band gives ``n``); else DENIED (nothing taken) with ``wait_ns``, the
  smallest whole number of nanoseconds after ``now`` at which every band would hold ``n``
  (counted from ``now`` even when ``now`` is behind the settlement point: then nothing accrues
  until the clock is back at the settlement point).
* ``remaining`` (and ``available``) is the whole tokens every band holds after the decision:
  ``floor(min(balances))``.
* Every call at a time more than ten years (of 365.25 days) from the latest time a call used
  (or ``start_ns``) raises ``ValueError`` and changes nothing: it was read on another clock.
* ``peek`` and ``available`` take nothing and leave the balances and settlement time alone
  (beyond anchoring a limiter that was never anchored); ``refund`` settles, then gives ``n``
  back to every band, each capped at its burst.
* ``settle(reserved, actual)`` (issue 35): less than reserved is ``refund(reserved -
  actual)``; more settles, then takes ``actual - reserved`` from every band, even beyond what it
  holds. A band that holds less is in debt, and a debt is held as time, to the whole nanosecond (the
  clock's grain): the band's own settlement point moves ahead to the first whole nanosecond at
  which the debt is repaid, and there it holds what has accrued beyond the debt, at most its
  burst. From then on the band is read from its own point, as every band is read from the
  settlement point when the clock is behind it: what it holds there counts, and a wait counts
  to it. So a call before that point can be answered with what only accrues within the debt's
  last nanosecond (for a band faster than a token a nanosecond, up to its burst): the rounding
  the clock's grain forces, taken in the caller's favour as a waiter's reservation is. A refund
  while some band is settled beyond the limiter's clock (the latest time any call used) is
  forfeited: the native limiter holds a debt as it holds a waiter's reservation, and gives
  nothing back while one is. A debt that would not be repaid before the end of the 64-bit
  clock (``2**63 - 1`` ns) holds the band there, empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

NS_PER_SECOND = 10**9
#: The clock's last nanosecond.
I64_MAX = 2**63 - 1
#: How far a call's time may be from the limiter's clock, either way: ten years of 365.25 days.
MAX_CLOCK_GAP_NS = 10 * 31_557_600 * NS_PER_SECOND
ALLOWED, DENIED, NEVER = "Allowed", "Denied", "Never"


def exact(value: Any) -> Fraction:
    """A number as the limiter reads it: exactly, a float through its shortest repr."""
    if isinstance(value, bool):
        raise TypeError(f"not a number: {value!r}")
    if isinstance(value, float):
        return Fraction(repr(value))
    if isinstance(value, (int, Fraction, Decimal, str)):
        return Fraction(value)
    raise TypeError(f"not a number: {value!r}")


UNIT_SECONDS = {
    **dict.fromkeys(["s", "sec", "secs", "second", "seconds"], 1),
    **dict.fromkeys(["m", "min", "mins", "minute", "minutes"], 60),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], 3600),
    **dict.fromkeys(["d", "day", "days"], 86400),
}
QUOTA = re.compile(r"\s*(?P<count>.*?)\s*(?:/|\s+per\s+)\s*(?P<many>\d*)\s*(?P<unit>.*?)\s*", re.I)


def quota(rate: Any, per: Any) -> tuple[Any, Any]:
    """A rate written with its period (``"100/minute"``, ``"300 per 5 minutes"``) as its count
    and ``per`` in seconds; any other rate unchanged. Two numbers around a slash (``"100/60"``)
    are refused as ambiguous."""
    if not isinstance(rate, str):
        return rate, per
    match = QUOTA.fullmatch(rate)
    if match is None:
        return rate, per
    count, many, unit = match["count"], match["many"], match["unit"].lower()
    if unit not in UNIT_SECONDS:
        raise ValueError(f"not a usable period: {rate!r}")
    if per is not None:
        raise TypeError(f"the period is given twice: {rate!r} and per={per!r}")
    seconds = (int(many) if many else 1) * UNIT_SECONDS[unit]
    if seconds == 0:
        raise ValueError(f"a zero period: {rate!r}")
    return count, seconds


def band_spec(rate: Any, burst: int | None = None, per: Any = None) -> tuple[Fraction, int]:
    """``(tokens per second, burst)`` of one band given as the constructor takes it."""
    rate, per = quota(rate, per)
    given = exact(rate)
    per_value = exact(1 if per is None else per)
    if burst is None:
        burst = max(1, math.ceil(given))
    return given / per_value, burst


@dataclass(frozen=True)
class ModelDecision:
    outcome: str
    wait_ns: int | None
    remaining: int

    @property
    def allowed(self) -> bool:
        return self.outcome == ALLOWED


@dataclass
class ModelBand:
    rate: Fraction  # tokens per second
    burst: int
    balance: Fraction  # tokens
    settled_at: int | None = None  # the band's own settlement point (a debt moves it ahead)

    @property
    def per_ns(self) -> Fraction:
        return self.rate / NS_PER_SECOND

    def wait_for(self, n: int) -> int:
        """The smallest whole w >= 0 with balance + w * per_ns >= n (n within the burst), as
        of the band's settlement point; 0 for n = 0, which takes nothing."""
        if n == 0 or self.balance >= n:
            return 0
        return math.ceil((n - self.balance) / self.per_ns)

    def behind(self, now: int) -> int:
        """How far ``now`` is behind the band's settlement point (0 if it is not)."""
        return 0 if self.settled_at is None else max(self.settled_at - now, 0)

    def settle(self, now: int) -> None:
        assert self.settled_at is not None
        if now > self.settled_at:
            elapsed = now - self.settled_at
            self.balance = min(self.balance + elapsed * self.per_ns, Fraction(self.burst))
            self.settled_at = now

    def take_beyond(self, n: int) -> None:
        """Take ``n`` even beyond the balance: a debt moves the band's point ahead to the first
        whole nanosecond at which it is repaid (or to the clock's end, empty)."""
        assert self.settled_at is not None
        if self.balance >= n:
            self.balance -= n
            return
        debt = n - self.balance
        repaid_in = math.ceil(debt / self.per_ns)
        if self.settled_at + repaid_in > I64_MAX:
            self.balance, self.settled_at = Fraction(0), I64_MAX
            return
        self.balance = min(repaid_in * self.per_ns - debt, Fraction(self.burst))
        self.settled_at += repaid_in


class ModelLimiter:
    def __init__(
        self,
        bands: Iterable[tuple[Fraction, int]],
        initial: int | None = None,
        start_ns: int | None = None,
    ) -> None:
        self.bands = [
            ModelBand(
                Fraction(rate), burst, Fraction(burst if initial is None else initial), start_ns
            )
            for rate, burst in bands
        ]
        if not self.bands:
            raise ValueError("no bands")
        if initial is not None and any(initial > band.burst for band in self.bands):
            raise ValueError("initial above a burst")
        self.latest: int | None = start_ns

    @property
    def settled_at(self) -> int | None:
        """The limiter's settlement point: the latest of its bands' (all the same until a
        debt moves one ahead); ``None`` until it is anchored."""
        points = [band.settled_at for band in self.bands if band.settled_at is not None]
        return max(points) if points else None

    # -- the rules ----------------------------------------------------------------------------

    def _on_the_clock(self, now: int) -> None:
        """A time more than ten years (of 365.25 days) from the latest one a call used (or
        ``start_ns``) is refused, changing nothing: it was read on another clock."""
        if self.latest is not None and abs(now - self.latest) > MAX_CLOCK_GAP_NS:
            raise ValueError(f"now_ns={now} is more than ten years from {self.latest}")
        self.latest = now if self.latest is None else max(self.latest, now)

    def _anchor(self, now: int) -> None:
        """The first call anchors every band at its time, even one that takes nothing."""
        for band in self.bands:
            if band.settled_at is None:
                band.settled_at = now

    def _settle(self, now: int) -> None:
        self._anchor(now)
        for band in self.bands:
            band.settle(now)

    def _decide(self, n: int, now: int) -> tuple[str, int | None]:
        """Decide on each band as of its settlement point, settled to ``now`` if that is later.
        A wait counts from ``now``: a band settled ahead of it (a clock gone backwards,
        ``start_ns`` ahead, or a debt) accrues nothing until its point is reached."""
        if any(n > band.burst for band in self.bands):
            return NEVER, None
        waits = [band.behind(now) + band.wait_for(n) for band in self.bands if band.wait_for(n)]
        if not waits:
            return ALLOWED, 0
        return DENIED, max(waits)

    def _whole(self) -> int:
        return max(0, math.floor(min(band.balance for band in self.bands)))

    def _in_debt(self) -> bool:
        """Whether some band's debt is still unpaid at the limiter's clock: its point lies
        beyond the latest time any call used."""
        assert self.latest is not None
        return any(band.behind(self.latest) > 0 for band in self.bands)

    def copy(self) -> ModelLimiter:
        twin = ModelLimiter.__new__(ModelLimiter)
        twin.bands = [
            ModelBand(band.rate, band.burst, band.balance, band.settled_at) for band in self.bands
        ]
        twin.latest = self.latest
        return twin

    def _settled_copy(self, now: int) -> ModelLimiter:
        self._anchor(now)
        twin = self.copy()
        twin._settle(now)
        return twin

    # -- the API ------------------------------------------------------------------------------

    def check(self, n: int, now: int) -> ModelDecision:
        self._on_the_clock(now)
        self._settle(now)
        outcome, wait = self._decide(n, now)
        if outcome == ALLOWED:
            for band in self.bands:
                band.balance -= n
        return ModelDecision(outcome, wait, self._whole())

    def try_acquire(self, n: int, now: int) -> bool:
        decision = self.check(n, now)
        if decision.outcome == NEVER:
            raise ValueError(f"n={n} is more than a band's burst")
        return decision.allowed

    def peek(self, n: int, now: int) -> ModelDecision:
        self._on_the_clock(now)
        twin = self._settled_copy(now)
        outcome, wait = twin._decide(n, now)
        return ModelDecision(outcome, wait, twin._whole())

    def available(self, now: int) -> int:
        self._on_the_clock(now)
        return self._settled_copy(now)._whole()

    def refund(self, n: int, now: int) -> None:
        self._on_the_clock(now)
        self._settle(now)
        if self._in_debt():
            return
        for band in self.bands:
            band.balance = min(band.balance + n, Fraction(band.burst))

    def settle(self, reserved: int, actual: int, now: int) -> None:
        if actual < reserved:
            self.refund(reserved - actual, now)
            return
        self._on_the_clock(now)
        if actual > reserved:
            self._settle(now)
            for band in self.bands:
                band.take_beyond(actual - reserved)

    # -- inspection ---------------------------------------------------------------------------

    def band_pairs(self) -> tuple[tuple[Fraction, int], ...]:
        """What the limiter's ``bands`` property should say: ``(tokens per second, burst)``."""
        return tuple((band.rate, band.burst) for band in self.bands)

    def whole_as_settled(self) -> int:
        """Whole tokens as last settled (what ``repr`` shows as ``available``)."""
        return self._whole()


def model_from(
    rate: Any = None,
    burst: int | None = None,
    *,
    per: Any = None,
    bands: Sequence[Any] | None = None,
    initial: int | None = None,
    start_ns: int | None = None,
) -> ModelLimiter:
    """A model built from the same arguments as ``RateLimiter`` (bands as ``Band`` objects or
    ``(rate, burst)`` / ``(rate, burst, per)`` tuples)."""
    if bands is None:
        specs = [band_spec(rate, burst, per)]
    else:
        specs = []
        for band in bands:
            if isinstance(band, tuple):
                specs.append(band_spec(*band))
            else:
                specs.append(band_spec(band.rate, band.burst, band.per))
    return ModelLimiter(specs, initial=initial, start_ns=start_ns)


class FakeClock:
    """A clock the test controls: ``clock()`` returns ``clock.now`` (int nanoseconds).

    Module-level (so a limiter holding one pickles) and counting its reads.
    """

    def __init__(self, now: int = 0) -> None:
        self.now = now
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns

    def __repr__(self) -> str:
        return f"FakeClock(now={self.now})"


class TurningClock:
    """A clock that reads ``first`` once (when a limiter checks it, as it is made) and from then
    on returns ``later`` (or raises it, if it is an exception): a clock that goes bad in use."""

    def __init__(self, later: Any, first: int = 0) -> None:
        self.later, self.first, self.reads = later, first, 0

    def __call__(self) -> Any:
        self.reads += 1
        if self.reads == 1:
            return self.first
        if isinstance(self.later, BaseException):
            raise self.later
        return self.later
