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
* Settlement at ``now``: if ``now`` is after the settlement time, every band becomes
  ``min(balance + (now - settled_at) * rate_per_ns, burst)`` and the settlement time becomes
  ``now``; if ``now`` is not after it (equal, or a clock gone backwards), nothing changes.
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
  actual)``; more settles, then takes ``actual - reserved`` from every band even below zero.
  A balance below zero is a debt: it accrues like any balance, so a request waits until the
  debt is repaid and its own tokens have accrued; ``remaining`` counts no band below zero. A
  refund while some band is still in debt at the limiter's clock (the latest time any call
  used) is forfeited: the native limiter holds a debt as a settlement point ahead of its
  clock, as it holds a waiter's reservation, and gives nothing back while one is. A debt
  that would not be repaid before the end of the 64-bit clock (``2**63 - 1`` ns) is repaid
  exactly then, as the native limiter holds it there.
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

    @property
    def per_ns(self) -> Fraction:
        return self.rate / NS_PER_SECOND

    def wait_for(self, n: int) -> int:
        """The smallest whole w >= 0 with balance + w * per_ns >= n (n within the burst); 0
        for n = 0, which takes nothing, even from a band in debt."""
        if n == 0 or self.balance >= n:
            return 0
        return math.ceil((n - self.balance) / self.per_ns)


class ModelLimiter:
    def __init__(
        self,
        bands: Iterable[tuple[Fraction, int]],
        initial: int | None = None,
        start_ns: int | None = None,
    ) -> None:
        self.bands = [
            ModelBand(Fraction(rate), burst, Fraction(burst if initial is None else initial))
            for rate, burst in bands
        ]
        if not self.bands:
            raise ValueError("no bands")
        if initial is not None and any(initial > band.burst for band in self.bands):
            raise ValueError("initial above a burst")
        self.settled_at: int | None = start_ns
        self.latest: int | None = start_ns

    # -- the rules ----------------------------------------------------------------------------

    def _on_the_clock(self, now: int) -> None:
        """A time more than ten years (of 365.25 days) from the latest one a call used (or
        ``start_ns``) is refused, changing nothing: it was read on another clock."""
        if self.latest is not None and abs(now - self.latest) > MAX_CLOCK_GAP_NS:
            raise ValueError(f"now_ns={now} is more than ten years from {self.latest}")
        self.latest = now if self.latest is None else max(self.latest, now)

    def _settle(self, now: int) -> None:
        if self.settled_at is None:
            self.settled_at = now
            return
        if now <= self.settled_at:
            return
        elapsed = now - self.settled_at
        for band in self.bands:
            band.balance = min(band.balance + elapsed * band.per_ns, Fraction(band.burst))
        self.settled_at = now

    def _decide(self, n: int, now: int) -> tuple[str, int | None]:
        """Decide on balances settled to ``max(now, settled_at)``. The wait counts from ``now``:
        if the clock is behind the settlement point (it went backwards, or ``start_ns`` is
        ahead), nothing accrues until the settlement point is reached again."""
        if any(n > band.burst for band in self.bands):
            return NEVER, None
        wait = max(band.wait_for(n) for band in self.bands)
        if wait == 0:
            return ALLOWED, 0
        assert self.settled_at is not None
        return DENIED, max(self.settled_at - now, 0) + wait

    def _whole(self) -> int:
        return max(0, math.floor(min(band.balance for band in self.bands)))

    def _in_debt(self) -> bool:
        """Whether some band is still below zero at the limiter's clock."""
        assert self.settled_at is not None and self.latest is not None
        since = max(self.latest - self.settled_at, 0)
        return any(band.balance + since * band.per_ns < 0 for band in self.bands)

    def copy(self) -> ModelLimiter:
        twin = ModelLimiter.__new__(ModelLimiter)
        twin.bands = [ModelBand(band.rate, band.burst, band.balance) for band in self.bands]
        twin.settled_at = self.settled_at
        twin.latest = self.latest
        return twin

    def _settled_copy(self, now: int) -> ModelLimiter:
        if self.settled_at is None:
            self.settled_at = now  # the first call anchors, even one that takes nothing
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
            assert self.settled_at is not None
            to_the_end = I64_MAX - self.settled_at
            for band in self.bands:
                band.balance = max(band.balance - (actual - reserved), -to_the_end * band.per_ns)

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
