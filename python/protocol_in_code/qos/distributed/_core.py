"""A limiter's core: its configuration on the server, and the script's arguments for each call.

No client and no awaiting: a core says what to send (:meth:`Core.args`), the shells send it, and
``_replies`` reads what comes back.
"""

from __future__ import annotations

import operator
from typing import Any

from protocol_in_code.qos.distributed import _bands, _keys
from protocol_in_code.qos.distributed._options import Options, Parsed
from protocol_in_code.qos.distributed._policy import OnError, Policy
from protocol_in_code.qos.distributed._replies import (
    GIVE_BACK,
    RESERVE,
    SETTLE,
    TAKE,
    Reserved,
    never,
)
from protocol_in_code.qos.distributed._server import Server

#: The moment a give-back names for a reservation that had no wait: any time no later than the
#: give-back's own will do (the script reads it as "now"), and this is the earliest there is.
NO_WAIT_AT_US = -_bands.TIME_BOUND_US


class Core:
    """One configuration on one server: its keys' layout, the script's arguments for each call
    (with ``n`` and ``now_ns`` checked as in-process), and its ``on_error`` policy."""

    def __init__(self, server: Server, options: Options, configuration: Parsed) -> None:
        """The core of ``options`` on ``server``, for ``configuration`` (their rate and bands,
        or one plan's, as :class:`Options` read them)."""
        self.validator, config = configuration
        name, prefix, on_error = options.name, options.prefix_bytes, options.on_error
        self.server = server
        self.name: str = name
        self.prefix: bytes = prefix
        #: The configuration's fingerprint (``core::exact::config``), 16 hex digits: part of
        #: every Redis key, so limiters of one name but different bands never share state.
        self.fingerprint: bytes = b"%016x" % config.fingerprint
        #: What goes around a one-key limiter's ``{name}`` in its Redis key (see ``_keys.py``).
        self.one_key_layout = _keys.one_key(prefix, self.fingerprint)
        #: What goes around each ``{key}`` in a keyed limiter's Redis keys: its prefix, then
        #: its fingerprint and name, so no other limiter's key can be one of its keys.
        self.key_layout = _keys.keyed(prefix, options.name_bytes, self.fingerprint)
        self.on_error: OnError = on_error
        self.tail = _bands.script_args(options.initial, options.min_ttl_ms)
        self.config = config.encoding
        self.largest = config.largest
        self.smallest = config.smallest
        #: What a call answers when the server cannot decide.
        self.policy = Policy(on_error, config.smallest)
        self.take_one = [_bands.request(TAKE, 1, None) + self.tail, self.config]

    def args(self, op: int, n: Any, now_ns: Any) -> list[bytes]:
        """The script's arguments for ``op``, after checking ``n`` and ``now_ns`` as in-process.

        ``n`` above every burst is NEVER whatever its size, so it is passed as the largest burst
        plus one, which keeps the script's products within its bound.
        """
        if type(n) is not int or not 0 <= n < 2**64:
            self.validator.peek(n, 0)  # raises the in-process error
            n = operator.index(n)
        now_us = self.checked_now_us(now_ns)
        return [_bands.request(op, min(n, self.largest + 1), now_us) + self.tail, self.config]

    def settle_args(self, reserved: Any, actual: Any, now_ns: Any) -> list[bytes] | None:
        """The script's arguments to settle a cost taken as ``reserved`` tokens and now known
        to be ``actual`` (both checked as in-process), or None when they are equal: nothing to
        settle, so nothing is sent.

        The script is sent the difference, ``actual - reserved``: a refund when negative, a
        debt when positive. Beyond ``2**53`` either way it is sent as ``2**53``, which means
        the same: a refund that fills every band, or a debt beyond the script's exact range,
        held to its last moment (see ``settle.lua``, Settlement).
        """
        for value in (reserved, actual):
            if type(value) is not int or not 0 <= value < 2**64:
                self.validator.settle(reserved, actual, 0)  # raises the in-process error
        now_us = self.checked_now_us(now_ns)
        difference = operator.index(actual) - operator.index(reserved)
        if difference == 0:
            return None
        bound = _bands.EXACT_BOUND
        sent = max(-bound, min(difference, bound))
        return [_bands.request(SETTLE, sent, now_us) + self.tail, self.config]

    def checked_now_us(self, now_ns: Any) -> int | None:
        """An explicit time checked as in-process, in the script's grain (None: the server's
        clock decides)."""
        if now_ns is None:
            return None
        if type(now_ns) is not int or not -(2**63) <= now_ns < 2**63:
            self.validator.peek(0, now_ns)  # raises the in-process error
            now_ns = operator.index(now_ns)
        return self.now_us(now_ns)

    def reserve_args(self, n: Any, left: float | None) -> list[bytes]:
        """The script's arguments to reserve ``n`` tokens on the server's clock, waiting at most
        ``left`` seconds (None: as long as it takes), in whole microseconds rounded down."""
        request, config = self.args(RESERVE, n, None)
        longest = -1 if left is None else min(int(left * 1e6), _bands.TIME_BOUND_US)
        return [request + _bands.extra(longest), config]

    def give_back_args(self, n: Any, reserved: Reserved) -> list[bytes] | None:
        """The script's arguments to give back ``reserved`` (of ``n`` tokens): undone if nobody
        queued behind it, else forfeited (see ``settle.lua``). None for a reservation whose
        moment is unknown (a re-sent one, answered by the key's settlement point): it is
        forfeited, which never lets anyone in early."""
        if reserved.wait_us == 0:
            at_us = NO_WAIT_AT_US
        elif reserved.at_us is None:
            return None
        else:
            at_us = reserved.at_us
        request, config = self.args(GIVE_BACK, n, None)
        return [request + _bands.extra(at_us), config]

    def refuse_never(self, n: Any) -> None:
        """A take of more than a band's burst raises, as ``try_acquire`` does (``n`` is
        already checked by :meth:`args`)."""
        if operator.index(n) > self.smallest:
            raise never(n)

    @staticmethod
    def now_us(now_ns: int) -> int:
        """An explicit time in the script's grain: whole microseconds, or a ValueError."""
        micros, rest = divmod(now_ns, 1000)
        if rest:
            raise ValueError(
                "now_ns must be a whole number of microseconds (a multiple of 1000: the "
                f"server's clock has no finer grain), not {now_ns}"
            )
        if not -_bands.TIME_BOUND_US <= micros <= _bands.TIME_BOUND_US:
            raise ValueError(
                "now_ns must be within 2**52 microseconds of 0 (so that the difference of two "
                f"times stays below 2**53, exact in the server's Lua numbers), not {now_ns}"
            )
        return micros
