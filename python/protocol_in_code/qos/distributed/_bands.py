"""A limiter's configuration as the server-side script reads it, and the bound that keeps it exact.

Configuration is read once, by the native :class:`~protocol_in_code.qos.limiter.RateLimiter`:
the same arguments are accepted and refused with the same errors as in-process. The script is
sent the configuration's canonical encoding (``core::exact::config``: a version, the number of
fields per band, the number of bands, then each band's tokens per second as ``p/q``, its burst
and its period), the same bytes a fingerprint is taken of. Nothing here parses a rate.

The script settles in whole microseconds (the server's ``TIME`` has no finer grain) and counts a
band of ``p/q`` tokens per second in units of ``1/(q * 10^6)`` token, so one microsecond brings
exactly ``p`` units. Its numbers are Lua doubles, exact for integers up to ``2^53``; the
largest number the script ever forms for a band is its capacity plus ``p - 1`` (a balance plus
one accrual, the elapsed time being capped at the time to full before it is multiplied). So a
band is accepted only if ``burst * q * 10^6 + p <= 2^53``: at one token per second that is a
burst of up to about 9 billion tokens, at ``1/3`` token per second about 3 billion.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from protocol_in_code._native import _canonical
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
class ScriptConfig:
    """What the client needs of a configuration to ask the script: its canonical encoding (the
    script's second argument), its fingerprint, and the smallest and largest burst."""

    encoding: bytes
    fingerprint: int
    smallest: int
    largest: int


def parse(
    rate: Any, burst: Any, per: Any, bands: Any, initial: Any
) -> tuple[RateLimiter, ScriptConfig]:
    """The native limiter that validates (and answers what in-process would), and what the
    script is told of its configuration.

    Raises the in-process ``ValueError``/``TypeError`` for bad configuration, and a
    ``ValueError`` naming the bound for a band the script could not keep exact.
    """
    limiter = RateLimiter(rate, burst=burst, per=per, bands=bands, initial=initial)
    checked = limiter.bands
    for index, band in enumerate(checked):
        per_second = Fraction(band.per_second)
        largest = band.burst * per_second.denominator * MICROS_PER_SECOND + per_second.numerator
        if largest > EXACT_BOUND:
            raise ValueError(
                f"band {index} ({per_second} tokens/s, burst {band.burst}) is too fine for "
                f"Redis: burst * q * 10**6 + p = {largest} exceeds 2**53, the largest integer "
                "the server's Lua numbers hold exactly (rate p/q tokens per second); use a "
                "smaller burst or a rate with a smaller denominator"
            )
    encoding, fingerprint = _canonical(checked)
    bursts = [band.burst for band in checked]
    return limiter, ScriptConfig(encoding, fingerprint, min(bursts), max(bursts))


def script_args(initial: int | None, min_ttl_ms: int) -> bytes:
    """The end of the script's first argument, after op, n, now and the clock: the least TTL,
    and the tokens a new key holds (-1: full), as big-endian doubles (both below 2^53, so
    exact): the server reads them with one ``struct.unpack``, cheaper than parsing text."""
    return _TAIL.pack(min_ttl_ms, -1 if initial is None else initial)


def request(op: int, n: int, now_us: int | None) -> bytes:
    """The start of the script's argument: op, n, now and whether the server's clock decides."""
    if now_us is None:
        return _REQUEST.pack(op, n, 0, 1)
    return _REQUEST.pack(op, n, now_us, 0)


def extra(value: int) -> bytes:
    """The end of a reservation's or a give-back's first argument, after the tail: the caller's
    longest wait in microseconds (-1: none), or the reservation's moment (within 2**52 of 0)."""
    return _EXTRA.pack(value)


_REQUEST = struct.Struct(">4d")
_EXTRA = struct.Struct(">d")
_TAIL = struct.Struct(">2d")
