"""A limiter's bands as the server-side script counts them, and the bound that keeps it exact.

Configuration is read once, by the native :class:`~protocol_in_code.qos.limiter.RateLimiter`:
the same arguments are accepted and refused with the same errors as in-process, and its
``bands`` give each band's rate as an exact ``p/q`` tokens per second and its burst. Nothing
here parses a rate.

The script settles in whole microseconds (the server's ``TIME`` has no finer grain) and counts a
band of ``p/q`` tokens per second in units of ``1/(q * 10^6)`` token, so one microsecond brings
exactly ``p`` units. Its numbers are Lua doubles, exact for integers up to ``2^53``; the
largest number the script ever forms for a band is its capacity plus ``p - 1`` (a balance plus
one accrual, the elapsed time being capped at the time to full before it is multiplied). So a
band is accepted only if ``burst * q * 10^6 + p <= 2^53``: at one token per second that is a
burst of up to about 9 billion tokens, at ``1/3`` token per second about 3 billion.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from protocol_in_code.qos.limiter import RateLimiter

#: The script's exactness bound: every integer it forms is at most this.
EXACT_BOUND = 2**53
#: Microseconds in a second: the script's clock grain.
MICROS_PER_SECOND = 10**6
#: min_ttl_ms is sent as a double too, so it must stay below 2^53.
MAX_TTL_MS = 2**53 - 1
#: The furthest an explicit time may be from 0, in microseconds, so that the difference of two
#: times stays below 2^53.
TIME_BOUND_US = 2**52


@dataclass(frozen=True)
class ScriptBand:
    """One band in the script's integers: ``p`` units per microsecond, units per token, burst."""

    per_us: int
    unit: int
    burst: int

    @property
    def capacity(self) -> int:
        return self.burst * self.unit


def parse(
    rate: Any, burst: Any, per: Any, bands: Any, initial: Any
) -> tuple[RateLimiter, tuple[ScriptBand, ...]]:
    """The native limiter that validates (and answers what in-process would), and its bands.

    Raises the in-process ``ValueError``/``TypeError`` for bad configuration, and a
    ``ValueError`` naming the bound for a band the script could not keep exact.
    """
    limiter = RateLimiter(rate, burst=burst, per=per, bands=bands, initial=initial)
    parsed = []
    for index, (tokens_per_second, band_burst) in enumerate(limiter.bands):
        exact = Fraction(tokens_per_second)
        band = ScriptBand(
            per_us=exact.numerator,
            unit=exact.denominator * MICROS_PER_SECOND,
            burst=operator.index(band_burst),
        )
        if band.capacity + band.per_us > EXACT_BOUND:
            raise ValueError(
                f"band {index} ({exact} tokens/s, burst {band.burst}) is too fine for Redis: "
                f"burst * q * 10**6 + p = {band.capacity + band.per_us} exceeds 2**53, the "
                "largest integer the server's Lua numbers hold exactly (rate p/q tokens per "
                "second); use a smaller burst or a rate with a smaller denominator"
            )
        parsed.append(band)
    return limiter, tuple(parsed)


def script_args(bands: tuple[ScriptBand, ...], initial: int | None, min_ttl_ms: int) -> bytes:
    """The end of the script's one argument, after op, n and now: the least TTL, then each
    band's four numbers, as big-endian doubles (all below 2^53, so exact): the server reads
    them with one ``struct.unpack``, cheaper than parsing text."""
    numbers = [min_ttl_ms]
    for band in bands:
        held = band.capacity if initial is None else initial * band.unit
        numbers += [band.per_us, band.unit, band.burst, held]
    return struct.pack(f">{len(numbers)}d", *numbers)


def request(op: int, n: int, now_us: int | None) -> bytes:
    """The start of the script's argument: op, n, now and whether the server's clock decides."""
    if now_us is None:
        return _REQUEST.pack(op, n, 0, 1)
    return _REQUEST.pack(op, n, now_us, 0)


_REQUEST = struct.Struct(">4d")
