"""The limiters: arguments checked here, decisions made by the script, answers built here.

Every public call is: check the arguments exactly as in-process (before any round trip), one
script call, and a :class:`Decision` (or ``bool``, ``int``, ``None``) built from its four
integers. A call the server cannot answer goes to the ``on_error`` policy. The synchronous and
asyncio classes differ only in awaiting the round trip: :class:`_Core` (configuration, checks,
``on_error``), :class:`_OneKey` and :class:`_ManyKeys` (what a limiter of each kind holds) and
:class:`_Batch` (a batch by hash slot) hold everything else.

``acquire`` is one script call too, a reservation of the caller's turn on the server, then a
sleep until it (see :func:`_blocking_acquire`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import operator
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, NamedTuple, ParamSpec, TypeAlias, TypeVar

from protocol_in_code._native import (
    Band,
    Decision,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    _read_plans,
    _wait_for_turn,
)
from protocol_in_code.qos import _conveniences
from protocol_in_code.qos._give_backs import in_background as _in_background
from protocol_in_code.qos.distributed import _bands, _keys, _plugin, _waits
from protocol_in_code.qos.distributed._keys import redis_key
from protocol_in_code.qos.distributed._server import (
    Call,
    ClientErrors,
    LimiterUnavailable,
    Server,
)

_F = TypeVar("_F", bound=Callable[..., Any])

#: What a denial caused by an unreachable server (``on_error="deny"``) asks callers to wait
#: before they ask again: 100 ms, so a blocking ``acquire`` neither spins nor sleeps long.
UNAVAILABLE_WAIT_NS = 100_000_000

# The script's operations.
TAKE, MANY, PEEK, REFUND, AVAILABLE, RESERVE, GIVE_BACK = 0, 1, 2, 3, 4, 5, 6
#: A take answered with each band's level too (``check_levels``; ops 7 and 8 are stacks').
TAKE_WITH_LEVELS = 9

#: The moment a give-back names for a reservation that had no wait: any time no later than the
#: give-back's own will do (the script reads it as "now"), and this is the earliest there is.
_NO_WAIT_AT_US = -_bands.TIME_BOUND_US

OnError: TypeAlias = str | RateLimiter | KeyedRateLimiter
#: Each band's whole tokens and the nanoseconds until it holds one more, as ``band_levels``
#: says them in-process.
Levels: TypeAlias = list[tuple[int, int]]


def _checked_name(name: Any) -> bytes:
    """A limiter's name as it goes into its Redis keys: a non-empty ``str`` (any characters:
    the key layout keeps every name apart, see ``_keys.py``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__} ({name!r})")
    if not name:
        raise ValueError("name must not be empty: it is the limit's identity on the server")
    return name.encode("utf-8", "surrogatepass")


def decision(reply: Any) -> Decision:
    """The :class:`Decision` in the script's reply for one key.

    ALLOWED and NEVER come as one integer, ``4 * remaining + outcome``; DENIED as a list whose
    wait is in whole microseconds, in two parts (the clock behind the settlement point, and the
    refill) that are added here, where integers have no bound.
    """
    if type(reply) is int:
        if reply & 3:
            return Decision(LimitOutcome.NEVER, None, reply >> 2)
        return Decision(LimitOutcome.ALLOWED, 0, reply >> 2)
    _, remaining, behind, wait = reply
    return Decision(LimitOutcome.DENIED, (behind + wait) * 1000, remaining)


def leveled(reply: Any) -> tuple[Decision, Levels]:
    """The :class:`Decision` and each band's level in the script's reply to a take with levels:
    ``[answer, behind, tokens, next, tokens, next, ...]``, ``answer`` as :func:`decision` reads
    it, and each band's ``next`` in microseconds from the key's settlement point, ``behind`` the
    clock (added here, as for a wait), so the nanoseconds are the in-process ones rounded up to
    the microsecond."""
    behind = int(reply[1])
    return decision(reply[0]), [
        (int(reply[at]), (behind + int(reply[at + 1])) * 1000) for at in range(2, len(reply), 2)
    ]


def taken(reply: Any, n: Any) -> bool:
    """Whether the script's reply to a take says the tokens were taken. NEVER raises
    ValueError, as in-process: no wait would ever be enough, and a loop retrying on False
    would spin for ever."""
    if type(reply) is int:
        if reply & 3:
            raise _never(n)
        return True
    return False


def allowed(answer: Decision, n: Any) -> bool:
    """:func:`taken`, for an answer already read as a :class:`Decision`."""
    if answer.outcome is LimitOutcome.NEVER:
        raise _never(n)
    return bool(answer.allowed)


def remaining(reply: Any) -> int:
    """Whole tokens remaining in the script's reply for one key."""
    return reply >> 2 if type(reply) is int else int(reply[1])


def allowed_digits(reply: Any) -> list[bool]:
    """The outcomes of a batch: one digit per key, "0" for allowed."""
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return [digit == "0" for digit in text]


def took(reply: Any) -> bool:
    """Whether the script's reply to a take on one key says it took the tokens."""
    return type(reply) is int and not reply & 3


_T = TypeVar("_T")


async def _net_zero(asked: Awaitable[_T], give_back: Callable[[_T], Awaitable[None] | None]) -> _T:
    """Await a script call that may take tokens, so that a caller cancelled meanwhile is net
    zero: the call is let finish (it may already be running on the server), and what it took,
    which nobody will be told of, is given back (``give_back`` of its reply, if that took
    anything). A cancelled caller is thus never charged for a decision it never saw.

    A call or give-back that fails after the caller was cancelled is never taken for "nothing
    was taken": unless its error says it changed nothing (:meth:`ClientErrors.took_nothing`),
    it is logged (see :func:`_not_given_back`). Each was sent again with its own token where
    that is safe, by the client's retries and after a fault of the client's own (see
    :class:`~protocol_in_code.qos.distributed._server.ClientErrors`).
    """
    call = asyncio.ensure_future(asked)
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        _in_background(_settle(call, give_back))
        raise


async def _settle(call: Awaitable[_T], give_back: Callable[[_T], Awaitable[None] | None]) -> None:
    """:func:`_net_zero`'s part after the cancel, in the background: the reply, and the
    give-back of what it took."""
    try:
        try:
            reply = await call
        except Exception as error:
            if not ClientErrors.took_nothing(error):
                _not_given_back(error, "a cancelled call failed, and may have taken tokens")
            return
        undo = give_back(reply)
        if undo is not None:
            await undo
    except asyncio.CancelledError:  # the event loop closing, or the client's own cancel
        _not_given_back(None, "a cancelled call was itself cancelled before it was settled")
        raise
    except Exception as error:
        _not_given_back(error, "the give-back of a cancelled call failed")


#: Where the limiters say that tokens nobody was told of may stay taken.
_log = logging.getLogger("protocol_in_code.qos.distributed")


def _not_given_back(error: BaseException | None, what: str) -> None:
    """Log, as a warning, that tokens taken for a caller who was never told of them may stay
    taken until they refill: a give-back that failed, or a call whose outcome is unknown. One
    such warning stands for at most the ``n`` tokens of one call (of each key of a batch)."""
    reason = "" if error is None else f" ({type(error).__name__}: {error})"
    _log.warning(
        "%s%s: any tokens it took stay taken until they refill (the limit admits that many "
        "fewer, never more)",
        what,
        reason,
    )


_ALLOW = Decision(LimitOutcome.ALLOWED, 0, 0)
_DENY = Decision(LimitOutcome.DENIED, UNAVAILABLE_WAIT_NS, 0)


class _Core:
    """Configuration, argument checks, the server, and the ``on_error`` policy."""

    def __init__(
        self,
        client: Any,
        rate: Any,
        name: Any,
        burst: Any,
        per: Any,
        bands: Any,
        initial: Any,
        on_error: Any,
        min_ttl_ms: Any,
        prefix: Any,
        local_type: type[RateLimiter] | type[KeyedRateLimiter],
    ) -> None:
        name_bytes = _checked_name(name)
        self.validator, config = _bands.parse(rate, burst, per, bands, initial)
        if not isinstance(min_ttl_ms, int) or isinstance(min_ttl_ms, bool):
            raise TypeError(f"min_ttl_ms must be an int, not {type(min_ttl_ms).__name__}")
        if not 0 <= min_ttl_ms <= _bands.MAX_TTL_MS:
            raise ValueError(f"min_ttl_ms must be between 0 and 2**53 - 1, not {min_ttl_ms!r}")
        if isinstance(prefix, str):
            prefix = prefix.encode("utf-8", "surrogatepass")
        if not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if b"{" in prefix:
            raise ValueError(
                f"prefix must not contain '{{': the first '{{' of a Redis key opens its cluster "
                f"hash tag, which is the key's (or the name's), not {prefix!r}"
            )
        if isinstance(on_error, str):
            if on_error not in ("raise", "allow", "deny"):
                raise ValueError(
                    "on_error must be 'raise', 'allow', 'deny' or a local "
                    f"{local_type.__name__} to fall back on, not {on_error!r}"
                )
        elif not isinstance(on_error, local_type):
            raise TypeError(
                "on_error must be 'raise', 'allow', 'deny' or a local "
                f"{local_type.__name__} to fall back on, not {type(on_error).__name__}"
            )
        self.server = Server(client)
        self.name: str = name
        self.prefix: bytes = prefix
        #: The configuration's fingerprint (``core::exact::config``), 16 hex digits: part of
        #: every Redis key, so limiters of one name but different bands never share state.
        self.fingerprint: bytes = b"%016x" % config.fingerprint
        #: What goes around a one-key limiter's ``{name}`` in its Redis key (see ``_keys.py``).
        self.one_key_layout = _keys.one_key(prefix, self.fingerprint)
        #: What goes around each ``{key}`` in a keyed limiter's Redis keys: its prefix, then
        #: its fingerprint and name, so no other limiter's key can be one of its keys.
        self.key_layout = _keys.keyed(prefix, name_bytes, self.fingerprint)
        self.on_error: OnError = on_error
        self.tail = _bands.script_args(initial, min_ttl_ms)
        self.config = config.encoding
        self.largest = config.largest
        self.smallest = config.smallest
        self.take_one = [_bands.request(TAKE, 1, None) + self.tail, self.config]

    def args(self, op: int, n: Any, now_ns: Any) -> list[bytes]:
        """The script's arguments for ``op``, after checking ``n`` and ``now_ns`` as in-process.

        ``n`` above every burst is NEVER whatever its size, so it is passed as the largest burst
        plus one, which keeps the script's products within its bound.
        """
        if type(n) is not int or not 0 <= n < 2**64:
            self.validator.peek(n, 0)  # raises the in-process error
            n = operator.index(n)
        now_us = None
        if now_ns is not None:
            if type(now_ns) is not int or not -(2**63) <= now_ns < 2**63:
                self.validator.peek(0, now_ns)  # raises the in-process error
                now_ns = operator.index(now_ns)
            now_us = self.now_us(now_ns)
        return [_bands.request(op, min(n, self.largest + 1), now_us) + self.tail, self.config]

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
            at_us = _NO_WAIT_AT_US
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
            raise _never(n)

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

    def unavailable(self, error: BaseException, method: str, *args: Any, **kwargs: Any) -> Any:
        """What ``method`` answers when the server cannot: the ``on_error`` policy.

        ``args`` are the method's own arguments (with the key first for a keyed limiter), and
        ``kwargs`` its ``plan=`` if it has one, so a local limiter given as the policy is simply
        asked the same question.
        """
        policy = self.on_error
        if policy == "raise":
            raise LimiterUnavailable(
                f"the rate limit cannot be decided: the Redis server could not answer "
                f"({type(error).__name__}: {error})"
            ) from error
        if not isinstance(policy, str):
            return getattr(policy, method)(*args, **kwargs)
        allow = policy == "allow"
        if method == "try_acquire":
            return allow
        if method in ("check", "peek"):
            return _ALLOW if allow else _DENY
        if method == "available":
            return self.smallest if allow else 0
        return None  # refund: nothing to give back to

    def unavailable_levels(
        self, error: BaseException, *args: Any, **kwargs: Any
    ) -> tuple[Decision, Levels | None]:
        """What ``check_levels`` answers when the server cannot: ``check``'s ``on_error``
        answer, and the levels of a local limiter given as the policy (its ``band_levels``
        right after its ``check``, at the same time); None under ``"allow"`` and ``"deny"``,
        which know no level. ``args`` are ``check``'s (the key first for a keyed limiter)."""
        answer = self.unavailable(error, "check", *args, **kwargs)
        policy = self.on_error
        if isinstance(policy, str):
            return answer, None
        if isinstance(policy, RateLimiter):
            _n, now_ns = args
            return answer, policy.band_levels(now_ns)
        key, _n, now_ns = args
        return answer, policy.band_levels(key, now_ns, **kwargs)


def _never(n: Any) -> ValueError:
    return ValueError(f"n={n} is more than a band's burst: it can never be acquired")


class Reserved(NamedTuple):
    """What a reservation took: the caller's turn comes ``wait_us`` microseconds after the script
    ran, at ``at_us`` on the script's clock (None when there was no wait, or for a re-sent
    reservation, whose moment the server no longer knows)."""

    wait_us: int
    at_us: int | None


def reservation(reply: Any, n: Any) -> Reserved | None:
    """The script's reply to a reservation: what it took, or None if it took nothing (the tokens
    would only be there after the caller's longest wait). NEVER raises ValueError, as
    in-process."""
    if type(reply) is int:
        if reply & 3:
            raise _never(n)
        return Reserved(0, None)
    if reply[0] == 1:
        return None
    return Reserved(int(reply[2]), int(reply[3]) if len(reply) > 3 else None)


class _Waiter:
    """One ``acquire``'s reservations on the server, as the one deadline loop asks for them.

    The blocking forms wait in the native limiters' own loop (``wait_for_turn`` in
    ``src/python/waiting.rs``, through ``_wait_for_turn``) and the asyncio forms in theirs
    (:func:`_conveniences.await_turn`): each reserves (here, a script call), sleeps until the
    turn, and gives it back if it stops waiting. This holds what those loops need of a Redis
    reservation: the turn read from the script's reply, as ``at_ns`` on the local monotonic
    clock (:meth:`turn`, :meth:`until`); the ``on_error`` answer in its place when the server
    cannot answer (:meth:`fallen_back`); and the one reservation the loop sleeps on, to give back
    (:meth:`give_back`). ``late`` gives back a reservation whose turn came too late, and
    ``stopped`` one the caller stopped waiting for (interrupted, or cancelled).
    """

    def __init__(
        self,
        n: Any,
        fall_back: Callable[[BaseException], Any],
        late: Callable[[Reserved], object],
        stopped: Callable[[Reserved], object],
    ) -> None:
        self.n, self.fall_back, self.late, self.stopped = n, fall_back, late, stopped
        #: The reservation the loop sleeps on (None before one, or after an ``on_error`` answer).
        self.reserved: Reserved | None = None

    def turn(self, reply: Any, asked_ns: int, left: float | None) -> _conveniences.Turn:
        """The turn in the script's reply to a reservation asked at ``asked_ns`` with ``left``
        seconds to spare: None if it took nothing, or if the server ran it so late (it was
        slow, or stopped) that the turn comes more than :data:`ASK_GRACE` after the deadline;
        such a reservation goes to ``late``, so that the call keeps its deadline."""
        reserved = reservation(reply, self.n)
        if reserved is None:
            return None
        at_ns = time.monotonic_ns() + reserved.wait_us * 1000
        if left is not None and at_ns > asked_ns + (left + ASK_GRACE) * 1e9:
            self.late(reserved)
            return None
        self.reserved = reserved
        return True, at_ns

    def fallen_back(self, error: BaseException) -> _conveniences.Turn:
        """The ``on_error`` answer (asked as ``check``) as a turn: ALLOWED is a turn now, a
        DENIED a refusal to sleep on before asking again, NEVER a ValueError."""
        answer = self.fall_back(error)
        self.reserved = None
        if answer.outcome is LimitOutcome.ALLOWED:
            return True, time.monotonic_ns()
        if answer.wait_ns is None:
            raise _never(self.n)
        return False, answer.wait_ns

    @staticmethod
    def until(at_ns: int) -> int:
        """Nanoseconds from now until the turn ``at_ns`` (0 once it is there)."""
        return max(at_ns - time.monotonic_ns(), 0)

    def give_back(self, _at_ns: int) -> None:
        """Give back the reservation the loop slept on: its caller stopped waiting."""
        if self.reserved is not None:
            self.stopped(self.reserved)


def _blocking_acquire(
    core: _Core,
    keys: list[bytes],
    n: Any,
    timeout: Any,
    limiter: str,
    fall_back: Callable[[BaseException], Any],
) -> bool:
    """Reserve ``n`` tokens on the server, then sleep until they are there (True); False at once
    if they would only be there after ``timeout`` seconds, as in-process. Refused on a thread
    running an event loop, as the in-process limiters refuse it: the wait is theirs, the native
    loop (see :class:`_Waiter`).

    One script call per admission: the script books the tokens at the moment they will be there
    and moves the key's settlement point to it, so later callers queue behind (see
    ``settle.lua``). A waiter that stops waiting (interrupted, or past its deadline) gives its
    reservation back, which the script undoes only if nobody queued behind it.

    With a ``timeout``, the reservation is asked on the server's own threads (see ``_waits``)
    and waited for at most what is left of it (plus :data:`ASK_GRACE`), so the call returns by
    its deadline whatever the client's socket timeout; a reservation answered later is given
    back. A client with no socket timeout would leave such a question blocked for ever on a
    stopped server: ``timeout=`` is refused there. On the main thread, the reservation is asked
    there too, so that Ctrl-C (``KeyboardInterrupt``, or any exception raised meanwhile) ends
    the wait and the reservation is given back once the server answers. When the server cannot
    answer, ``fall_back`` (the ``on_error`` policy, asked as ``check``) answers instead, and a
    DENIED from it is slept on and asked again.
    """
    server = core.server
    where = _waits.of(server, keys[0])

    def late(reserved: Reserved) -> None:
        try:
            where.submit(functools.partial(_give_back, core, keys, n, reserved))
        except RuntimeError:  # the interpreter is shutting down: no new threads
            _give_back(core, keys, n, reserved)

    stopped = functools.partial(_give_back, core, keys, n)
    waiter = _Waiter(n, fall_back, late=late, stopped=stopped)

    def reserve(left: float | None) -> _conveniences.Turn:
        if left is not None and server.socket_timeout is None:
            raise ValueError(
                f"{limiter}.acquire(timeout={timeout!r}) cannot return by its deadline on a "
                f"client with no socket_timeout: a stopped server would keep its question for "
                f"ever. Give the client socket_timeout (redis.Redis(..., socket_timeout=0.2, "
                f"socket_connect_timeout=0.2)), or use acquire_async"
            )
        asked_ns = time.monotonic_ns()
        args = core.reserve_args(n, left)
        try:
            if left is None and threading.current_thread() is not threading.main_thread():
                reply = server.run(keys, args)  # no deadline, and no signal lands here
            else:
                reply = _waits.asked(
                    where,
                    functools.partial(server.run, keys, args),
                    None if left is None else left + ASK_GRACE,
                    functools.partial(_give_back_reply, core, keys, n),
                )
        except server.unavailable as error:
            return waiter.fallen_back(error)
        return None if reply is _waits.NO_REPLY else waiter.turn(reply, asked_ns, left)

    return _wait_for_turn(limiter, timeout, reserve, waiter.until, waiter.give_back)


def _give_back_reply(core: _Core, keys: list[bytes], n: Any, reply: Any) -> None:
    """Give back what the reply to a reservation says it took, for a caller that stopped
    waiting for it."""
    with contextlib.suppress(ValueError):  # NEVER: nothing taken
        reserved = reservation(reply, n)
        if reserved is not None:
            _give_back(core, keys, n, reserved)


def _give_back(core: _Core, keys: list[bytes], n: Any, reserved: Reserved) -> None:
    """Give back a reservation nobody will use (see :meth:`_Core.give_back_args`); a server that
    cannot be reached keeps it, as any lost reply's take stands."""
    args = core.give_back_args(n, reserved)
    if args is not None:
        with contextlib.suppress(*core.server.unavailable):
            core.server.run(keys, args)


#: How long past its deadline an ``acquire(timeout=...)`` lets its reservation's round trip
#: run, and how far past it the turn it was given may come: later than that, the reservation is
#: given back and the call returns False.
ASK_GRACE = 0.05


async def _awaited_acquire(
    core: _Core,
    keys: list[bytes],
    n: Any,
    timeout: Any,
    run: Callable[[list[bytes], Any], Awaitable[Any]],
    fall_back: Callable[[BaseException], Any],
) -> bool:
    """:func:`_blocking_acquire` for asyncio, in the native limiters' asyncio loop (see
    :class:`_Waiter`): awaits the reservation (``run`` runs the script: awaited on an asyncio
    client, on the server's own threads on a synchronous one: see ``_waits``) and the sleep.

    With a ``timeout``, the reservation is waited for at most what is left of it (plus
    :data:`ASK_GRACE`), whatever the client's socket timeout: a stopped server makes the call
    return False at its deadline. A waiter cancelled at any point is net zero: a reservation
    under way is let finish and given back, and one made is given back (undone if nobody queued
    behind it, else forfeited, as in-process)."""
    server = core.server

    def give_back(reserved: Reserved) -> Awaitable[None] | None:
        args = core.give_back_args(n, reserved)
        if args is None:
            return None

        async def give() -> None:
            try:
                await run(keys, args)
            except Exception as error:
                _not_given_back(error, "the give-back of a reservation failed")

        return give()

    def give_back_reply(reply: Any) -> Awaitable[None] | None:
        try:
            reserved = reservation(reply, n)
        except ValueError:  # NEVER: nothing taken
            return None
        return None if reserved is None else give_back(reserved)

    def in_background(reserved: Reserved) -> None:
        undo = give_back(reserved)
        if undo is not None:
            _in_background(undo)

    waiter = _Waiter(n, fall_back, late=in_background, stopped=in_background)

    async def reserve(left: float | None) -> _conveniences.Turn:
        asked_ns = time.monotonic_ns()
        asked = _net_zero(run(keys, core.reserve_args(n, left)), give_back_reply)
        try:
            if left is None:
                reply = await asked
            else:
                reply = await asyncio.wait_for(asked, left + ASK_GRACE)
        except asyncio.TimeoutError:
            return None
        except server.unavailable as error:
            return waiter.fallen_back(error)
        return waiter.turn(reply, asked_ns, left)

    return await _conveniences.await_turn(reserve, waiter.until, waiter.give_back, timeout)


def _in_thread(server: Server) -> Callable[[list[bytes], Any], Awaitable[Any]]:
    """Run the script on a synchronous client on the server's own threads (see ``_waits``),
    for an awaiting caller: never on the event loop's default executor, the application's."""
    return lambda keys, args: _waits.awaited(
        _waits.of(server, keys[0]), functools.partial(server.run, keys, args)
    )


def _awaited(server: Server) -> Callable[[list[bytes], Any], Awaitable[Any]]:
    """Run the script on an asyncio client."""
    return lambda keys, args: server.run_async(keys, args)


async def _net_zero_if_taking(
    core: _Core, keys: list[bytes], op: int, args: Any, n: Any, now_ns: Any
) -> Any:
    """The script's reply on an asyncio client; a take is net zero for a cancelled caller."""
    if op != TAKE:
        return await core.server.run_async(keys, args)
    return await _taken(core.server.run_async, keys, args, core.args(REFUND, n, now_ns))


async def _taken_with_levels(core: _Core, keys: list[bytes], args: Any, n: Any, now_ns: Any) -> Any:
    """The reply to a take with levels on an asyncio client, net zero for a cancelled caller
    (as :func:`_taken`: its answer comes first in the reply)."""
    run = core.server.run_async
    refund = core.args(REFUND, n, now_ns)

    def give_back(reply: Any) -> Awaitable[Any] | None:
        return run(keys, refund) if took(reply[0]) else None

    return await _net_zero(run(keys, args), give_back)


async def _taken(
    run: Callable[[list[bytes], Any], Awaitable[Any]], keys: list[bytes], take: Any, refund: Any
) -> Any:
    """The reply to a take on one key run by ``run``, net zero if the caller is cancelled: the
    refund is run for it if it took (see :func:`_net_zero`)."""

    def give_back(reply: Any) -> Awaitable[Any] | None:
        return run(keys, refund) if took(reply) else None

    return await _net_zero(run(keys, take), give_back)


#: The questions about one key: the script's operation for each method, and how its reply is
#: read.
_QUESTIONS: dict[str, tuple[int, Callable[[Any], Any]]] = {
    "try_acquire": (TAKE, decision),  # the asyncio forms' (the others have a quicker path)
    "check": (TAKE, decision),
    "peek": (PEEK, decision),
    "refund": (REFUND, lambda reply: None),
    "available": (AVAILABLE, remaining),
}


#: The node of every call of a batch on a single server: the one server, which a batch does not
#: ask again once a call failed there, as a cluster's node (see :class:`_Batch`).
_ONE_SERVER: Any = object()


class _Batch:
    """One ``try_acquire_many``: the keys grouped by hash slot, their answers, and the nodes
    found unreachable, for a caller that runs each group's script call, blocking or awaited.

    On a single server each group is one round trip. On a cluster the groups are sent in
    rounds of pipelines, one per node (see :meth:`Server.pipelines`): the first round sends
    every group, and a later one only the groups sent again, as ``EVAL`` after ``NOSCRIPT``
    or to the new owner of their slot (see :meth:`settle`).

    A node found unreachable is not asked again within the batch: its other slots go straight
    to ``on_error``, so a batch waits for at most one timeout per unreachable node, not one per
    slot. A single server is one node: once a call of 1,000 keys failed there, the calls not
    sent yet get the ``on_error`` answer unsent (they would wait a timeout each, and run when a
    stopped server resumes, taking tokens nobody was told of).
    """

    #: The most rounds of pipelines a batch on a cluster sends; a call still unanswered after
    #: them is sent on its own through the client.
    ROUNDS = 4

    def __init__(
        self,
        core: _Core,
        keys: Iterable[str | bytes],
        n: Any,
        now_ns: Any,
        planned: dict[str, str] | None = None,
    ) -> None:
        self.keys = list(keys)
        #: ``{"plan": name}`` with plans (what a local fallback is asked with), else empty.
        self._planned = planned or {}
        self.names = [redis_key(core.key_layout, key) for key in self.keys]
        self.args = core.args(MANY, n, now_ns)
        if self.keys:
            core.refuse_never(n)
        self.answers = [False] * len(self.keys)
        self._core, self._n, self._now_ns = core, n, now_ns
        self._unreachable: dict[Any, BaseException] = {}  # node -> its error
        self._error: BaseException | None = None  # the first, under on_error="raise"
        self.undecided: list[int] = []
        self.taken: list[bytes] = []  # the Redis keys the servers took tokens from
        self.taken_locally: list[Any] = []  # the keys a local fallback took tokens for

    def groups(self) -> Iterator[tuple[list[int], Any]]:
        """Each slot's keys (their positions) and the node asked for them, read before the
        call: after a failure the client may re-read the cluster's layout, and the slot's owner
        is then another node (after a failover, the promoted replica), which must not be taken
        for the unreachable one."""
        server = self._core.server
        for group in server.slot_groups(self.names):
            yield group, server.node_of(self.names[group[0]]) if server.is_cluster else _ONE_SERVER

    def calls(self) -> list[Call]:
        """The script calls of a batch on a cluster, one per group, each with the node that
        owns its slot (read before anything is sent, as in :meth:`groups`)."""
        server = self._core.server
        calls = []
        for group in server.slot_groups(self.names):
            names = [self.names[i] for i in group]
            calls.append(Call(group, names, self.args, server.node_for(names[0])))
        return calls

    def by_node(self, calls: list[Call]) -> tuple[list[tuple[Any, list[Call]]], list[Call]]:
        """``calls`` by node, each node's in order, for one round of pipelines; and the calls
        whose node the client does not know, to send on their own. The calls of a node found
        unreachable get the ``on_error`` answer here, unsent."""
        work: dict[Any, tuple[Any, list[Call]]] = {}
        alone = []
        for call in calls:
            if call.node_name is None:
                alone.append(call)
            elif call.node_name in self._unreachable:
                self.failed(call.group, None, self._unreachable[call.node_name])
            else:
                work.setdefault(call.node_name, (call.node, []))[1].append(call)
        return list(work.values()), alone

    def settle(
        self, work: list[tuple[Any, list[Call]]]
    ) -> tuple[list[Call], list[Call], list[Call]]:
        """The answers of a round of pipelines. Returns the calls for another round (those
        answered ``NOSCRIPT``, to send as ``EVAL``), the calls to send on their own through the
        client, and the calls to route again once those were sent (see :meth:`rerouted`).

        A call redirected (``MOVED``, ``ASK``, ``TRYAGAIN``) is sent on its own: the client
        follows the redirection and re-reads the cluster's layout. So is a call whose reply the
        client's reader failed to read in its own code (see :class:`ClientErrors`), with the
        same token. An error reply (``OOM``, ``BUSY``, ``CLUSTERDOWN``, a script's failure)
        is that call's ``on_error`` answer. A node whose connection failed is unreachable:
        after a timeout (a node stopped, or too slow) its calls get the ``on_error`` answer at
        once; after a refused or broken connection (a node gone, perhaps failed over) its first
        unanswered call is sent once more through the client, which re-reads the layout, and
        the others follow their slot if it has moved.

        A call sent again is decided after the calls of the round that were answered, so a slot
        of several calls (a key repeated past :data:`KEYS_PER_CALL`) whose earlier call is sent
        again and later one not (the script loaded, or the slot migrated, between the two) is
        decided out of turn: the same number of takes, at other positions."""
        server = self._core.server
        again: list[Call] = []
        alone: list[Call] = []
        reroute: list[Call] = []
        for _node, calls in work:
            lost = []
            for call in calls:
                result, call.result = call.result, None
                if not isinstance(result, BaseException):
                    self.answered(call.group, result)
                elif isinstance(result, server.no_script) and not call.source:
                    call.source = True
                    again.append(call)
                elif isinstance(result, (*server.redirected, *ClientErrors.faults)):
                    alone.append(call)  # the client follows, or (a fault) sends it anew
                elif isinstance(result, server.reply_error):
                    self.failed(call.group, call.node_name, result)
                elif isinstance(result, server.unavailable):
                    lost.append((call, result))
                else:
                    raise result
            if not lost:
                continue
            first, error = lost[0]
            self._unreachable[first.node_name] = error
            if isinstance(error, server.timed_out):
                for call, error in lost:
                    self.failed(call.group, call.node_name, error)
            else:
                alone.append(first)
                reroute.extend(call for call, _ in lost[1:])
        return again, alone, reroute

    def rerouted(self, calls: list[Call]) -> list[Call]:
        """The calls of a node found unreachable whose slot the client now says another node
        owns (after a failover, the promoted replica), for another round; the others get the
        ``on_error`` answer."""
        server = self._core.server
        again = []
        for call in calls:
            node = server.node_for(call.keys[0])
            name = getattr(node, "name", None)
            if name is None or name in self._unreachable:
                self.failed(call.group, None, self._unreachable[call.node_name])
            else:
                call.node, call.node_name = node, name
                again.append(call)
        return again

    def names_of(self, group: list[int], node: Any) -> list[bytes]:
        """The Redis keys of ``group``; raises the error of its node if that is unreachable."""
        if node is not None and node in self._unreachable:
            raise self._unreachable[node]
        return [self.names[i] for i in group]

    def answered(self, group: list[int], reply: Any) -> None:
        for i, answer in zip(group, allowed_digits(reply), strict=True):
            self.answers[i] = answer
            if answer:
                self.taken.append(self.names[i])

    def failed(self, group: list[int], node: Any, error: BaseException) -> None:
        """The on_error answer for the keys of ``group``. Under ``"raise"`` nothing is raised
        yet: the other groups are still asked, so that no answer whose tokens were taken is
        lost, and :meth:`finished` raises with them."""
        if node is not None:
            self._unreachable[node] = error
        if isinstance(self._core.on_error, str) and self._core.on_error == "raise":
            self._error = self._error or error
            for i in group:
                self.undecided.append(i)
            return
        local = not isinstance(self._core.on_error, str)
        for i in group:
            self.answers[i] = bool(
                self._core.unavailable(
                    error, "try_acquire", self.keys[i], self._n, self._now_ns, **self._planned
                )
            )
            if local and self.answers[i]:
                self.taken_locally.append(self.keys[i])

    async def give_back(self) -> None:
        """Give back every take of this batch so far: for an awaited batch whose caller was
        cancelled, and so never told (see :func:`_net_zero`)."""
        core = self._core
        refund = core.args(REFUND, self._n, self._now_ns)
        for name in self.taken:
            try:
                await core.server.run_async([name], refund)
            except Exception as error:  # its take stands, as any lost reply's
                _not_given_back(error, "the give-back of a cancelled batch's key failed")
        policy = core.on_error
        if isinstance(policy, KeyedRateLimiter):
            for key in self.taken_locally:
                policy.refund(key, self._n, self._now_ns, **self._planned)

    def finished(self) -> list[bool]:
        """The answers, once every group was asked; under ``"raise"``, a
        :class:`LimiterUnavailable` carrying the answers decided, if any group was not."""
        if self._error is None:
            return self.answers
        answers: list[bool | None] = list(self.answers)
        for i in self.undecided:
            answers[i] = None
        raise LimiterUnavailable(
            f"the rate limit cannot be decided for {len(self.undecided)} of {len(self.keys)} "
            f"keys: a Redis server could not answer ({type(self._error).__name__}: "
            f"{self._error}); the others were decided, and are in this error's answers",
            answers,
        ) from self._error


def _listed(plans: dict[str, Any]) -> str:
    """The plans' names, as an error lists them: ``'free', 'pro'``."""
    return ", ".join(f"'{plan}'" for plan in plans)


def _check_fallback_plans(on_error: Any, plans: dict[str, _Core]) -> None:
    """A local fallback of a limiter with plans must know every one of them, with the same
    bands, so that it can be asked what the server would have been."""
    if not isinstance(on_error, KeyedRateLimiter):
        return
    local = on_error.plans or {}
    for plan, core in plans.items():
        if plan not in local or _read_plans({plan: local[plan]})[1] != [core.validator.bands]:
            raise ValueError(
                f"on_error is a local KeyedRateLimiter without the plan {plan!r} of the same "
                "bands: give the fallback the same plans as this limiter"
            )


_P = ParamSpec("_P")
_R = TypeVar("_R")
_C = TypeVar("_C", bound=type)

#: What the examples in the constructors' errors show for an argument the call did not give.
_UNSAID = "..."


def _old_shapes_refused(cls: _C) -> _C:
    """``cls`` with its own ``__new__`` and ``__init__`` refusing a call that does not fit their
    signature with a ``TypeError`` that shows the call to write (see :func:`_misfit`), where
    Python's own would only say what is missing or unexpected. The signatures shown
    (``inspect.signature``, mypy, stubtest) stay the methods' own."""
    for method in ("__new__", "__init__"):
        if method in vars(cls):
            function = getattr(vars(cls)[method], "__func__", vars(cls)[method])
            checked = _constructor(function)
            setattr(cls, method, staticmethod(checked) if method == "__new__" else checked)
    return cls


def _constructor(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """``method`` (a ``__new__`` or ``__init__``), raising :func:`_misfit`'s error for a call
    that does not fit it."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def constructor(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            signature.bind(*args, **kwargs)
        except TypeError:
            misfit = _misfit(signature, args, kwargs)
            if misfit is not None:
                raise misfit from None
        return method(*args, **kwargs)  # a misfit of no old shape: Python's own error

    return constructor


def _misfit(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TypeError | None:
    """The error for a constructor call that does not fit ``signature``: ``args`` are the class
    (for ``__new__``) or the instance (for ``__init__``), then the call's own positional
    arguments. None for a misfit of no old shape (a misspelt keyword, no client), which
    Python's own error describes.

    The old signatures took a one-key limiter's key second, before the rate
    (``RedisRateLimiter(client, "global", 10)``), and a keyed limiter no identity at all. Each
    old shape is refused, never read as something else, with the new form shown.
    """
    if set(kwargs) - {"key"} - set(signature.parameters) or not args:
        return None
    cls = args[0] if isinstance(args[0], type) else type(args[0])
    name = cls.__name__
    keyed = issubclass(cls, _ManyKeys)
    given = list(args[2:]) if len(args) > 1 else []  # after the client
    if "rate" in kwargs:
        rate = repr(kwargs["rate"])
    elif given:
        rate = repr(given[0])
    else:
        rate = f"bands={kwargs['bands']!r}" if "bands" in kwargs else _UNSAID
    identity = repr(kwargs["name"]) if "name" in kwargs else _UNSAID

    def form(rate: str, identity: str, *more: str) -> str:
        return f"{name}(client, {', '.join((rate, *more))}, name={identity})"

    if "key" in kwargs:
        if keyed:
            return TypeError(
                f"{name}() takes no key=: the keys come with each call (try_acquire(key)), and "
                f"the limiter itself is known by its name: write {form(rate, identity)}"
            )
        return TypeError(
            f"{name}() takes name=, not key=: a limit is known by its name, write "
            f"{form(rate, identity if 'name' in kwargs else repr(kwargs['key']))}"
        )
    if len(given) >= 2 or (given and "rate" in kwargs):
        first = given[0]
        second = given[1] if len(given) >= 2 else kwargs["rate"]
        if len(given) >= 2:
            opening = (
                f"{name}() takes the rate alone by position (everything after it is a "
                f"keyword), and {len(given)} were given"
            )
        else:
            opening = f"{name}() got the rate twice: {first!r} by position and rate={second!r}"
        readings = []
        if not keyed and "name" not in kwargs:
            readings.append(
                f"the limit's name is a keyword now (it came before the rate): for a limit "
                f"named {first!r} of {second!r}, write {form(repr(second), repr(first))}"
            )
        if len(given) == 2 and "rate" not in kwargs:
            readings.append(
                f"for a burst of {second!r}, write "
                f"{form(repr(first), identity, f'burst={second!r}')}, or for {first!r} per "
                f"{second!r} seconds {form(repr(first), identity, f'per={second!r}')} (also "
                f'written as a quota, such as "100/minute")'
            )
        return TypeError(f"{opening}: {'; '.join(readings) or f'write {form(rate, identity)}'}")
    if "name" not in kwargs and (len(args) >= 2 or "client" in kwargs):
        what = (
            "limiters of different names never share a key's limit, even for the same key"
            if keyed
            else "limiters of the same name (and prefix) share one limit, and limiters of "
            "different names never do"
        )
        return TypeError(
            f"{name}() needs name=, the limit's identity on the server: {what}. Write "
            f"{form(rate, repr('login'))}"
        )
    return None


@_old_shapes_refused
class _OneKey:
    """What :class:`RedisRateLimiter` and :class:`AsyncRedisRateLimiter` share: everything but
    running the script."""

    def __init__(
        self,
        client: Any,
        rate: Any = None,
        *,
        name: str,
        burst: int | None = None,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        initial: int | None = None,
        on_error: OnError = "raise",
        min_ttl_ms: int = 0,
        prefix: str | bytes = "qos:",
    ) -> None:
        self._core = core = _Core(
            client,
            rate,
            name,
            burst,
            per,
            bands,
            initial,
            on_error,
            min_ttl_ms,
            prefix,
            RateLimiter,
        )
        self._keys = [redis_key(core.one_key_layout, name)]
        self._unavailable = core.server.unavailable

    @property
    def name(self) -> str:
        """The limit's identity: limiters of the same name (and prefix) share one limit."""
        return self._core.name

    @property
    def bands(self) -> tuple[Band, ...]:
        """The bands, each a :class:`Band` as it was written, as in-process."""
        return self._core.validator.bands

    @property
    def redis_key(self) -> bytes:
        """The hash on the server that holds this limit: ``prefix{name}:fingerprint``, the name
        escaped as a hash tag (see ``_keys.py``)."""
        return self._keys[0]

    async def _wait(
        self,
        n: Any,
        timeout: Any,
        asking: Callable[[Server], Callable[[list[bytes], Any], Awaitable[Any]]],
    ) -> bool:
        """``acquire`` awaited: the reservation asked through ``asking`` (the server's threads for a
        synchronous client, the client itself for an asyncio one)."""
        self._core.args(RESERVE, n, None)
        return await _awaited_acquire(
            self._core,
            self._keys,
            n,
            timeout,
            asking(self._core.server),
            lambda e: self._fall_back(e, "check", n, None),
        )

    def _fall_back(self, error: BaseException, method: str, n: Any, now_ns: Any) -> Any:
        """The ``on_error`` answer to ``method`` asked with these arguments."""
        args = (now_ns,) if method == "available" else (n, now_ns)
        return self._core.unavailable(error, method, *args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"


@_old_shapes_refused
class _ManyKeys:
    """What :class:`RedisKeyedRateLimiter` and :class:`AsyncRedisKeyedRateLimiter` share:
    everything but running the script."""

    def __init__(
        self,
        client: Any,
        rate: Any = None,
        *,
        name: str,
        burst: int | None = None,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        plans: dict[str, Any] | None = None,
        on_error: OnError = "raise",
        min_ttl_ms: int = 0,
        prefix: str | bytes = "qos:",
    ) -> None:
        #: Each plan's core, by name; None without plans.
        self._plans: dict[str, _Core] | None = None
        if plans is None:
            self._core = core = _Core(
                client,
                rate,
                name,
                burst,
                per,
                bands,
                None,
                on_error,
                min_ttl_ms,
                prefix,
                KeyedRateLimiter,
            )
        else:
            names, configurations = _read_plans(plans, rate, burst, per, bands)
            for index, configuration in enumerate(configurations):
                try:
                    _bands.parse(None, None, None, configuration, None)
                except ValueError as error:  # a band beyond the script's bound
                    said = next(plan for plan, at in names if at == index)
                    raise ValueError(f"plans[{said!r}]: {error}") from None
            cores = [
                _Core(
                    client,
                    None,
                    name,
                    None,
                    None,
                    configuration,
                    None,
                    on_error,
                    min_ttl_ms,
                    prefix,
                    KeyedRateLimiter,
                )
                for configuration in configurations
            ]
            # One server (its script loaded once) for every plan.
            for other in cores[1:]:
                other.server = cores[0].server
            self._plans = {plan: cores[index] for plan, index in names}
            self._core = core = cores[0]
            _check_fallback_plans(on_error, self._plans)
        if plans is None and isinstance(on_error, KeyedRateLimiter) and on_error.plans:
            raise TypeError(
                "on_error is a local KeyedRateLimiter with plans, but this limiter has none: "
                "give the fallback the same bands, or both the same plans"
            )
        self._unavailable = core.server.unavailable

    @property
    def name(self) -> str:
        """The limiter's identity: limiters of the same name (and prefix) share each key's
        limit, and limiters of different names never do, whatever the keys."""
        return self._core.name

    @property
    def bands(self) -> tuple[Band, ...]:
        """The bands, each a :class:`Band` as it was written, as in-process. A limiter with
        plans has no bands of its own: AttributeError, pointing to :attr:`plans`."""
        if self._plans is not None:
            raise AttributeError(
                f"a {type(self).__name__} with plans has no bands of its own: read .plans, "
                f"each plan's bands ({_listed(self._plans)})"
            )
        return self._core.validator.bands

    @property
    def plans(self) -> dict[str, tuple[Band, ...]] | None:
        """Each plan's bands, a dict of plan name to a tuple of :class:`Band`; None without
        plans."""
        if self._plans is None:
            return None
        return {plan: core.validator.bands for plan, core in self._plans.items()}

    def redis_key(self, key: str | bytes, *, plan: str | None = None) -> bytes:
        """The hash on the server that holds ``key``'s limit (under ``plan``):
        ``prefix{key}:fingerprint:name``, the key escaped as a hash tag (see ``_keys.py``), the
        fingerprint being that of the plan's bands."""
        return redis_key(self._core_of(plan).key_layout, key)

    def _core_of(self, plan: Any) -> _Core:
        """The core of ``plan``: the only one without plans (then ``plan`` must not be given),
        else the named plan's, which must be one of them (the native limiters' errors)."""
        plans = self._plans
        if plans is None:
            if plan is None:
                return self._core
            raise TypeError(
                f"plan={plan!r} was given, but this limiter has no plans: give it "
                "plans={name: rate or bands, ...} to limit each key by its plan"
            )
        if plan is None:
            raise TypeError(f"plan= is required: this limiter's plans are {_listed(plans)}")
        if not isinstance(plan, str):
            raise TypeError(
                f"plan must be a str naming one of this limiter's plans ({_listed(plans)}), "
                f"not {plan!r}"
            )
        core = plans.get(plan)
        if core is None:
            raise ValueError(f"unknown plan {plan!r}: this limiter's plans are {_listed(plans)}")
        return core

    async def _wait(
        self,
        key: Any,
        n: Any,
        timeout: Any,
        plan: Any,
        asking: Callable[[Server], Callable[[list[bytes], Any], Awaitable[Any]]],
    ) -> bool:
        """``acquire`` awaited for ``key``: see :meth:`_OneKey._wait`."""
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        core.args(RESERVE, n, None)
        return await _awaited_acquire(
            core,
            keys,
            n,
            timeout,
            asking(core.server),
            lambda e: self._fall_back(e, "check", key, n, None, plan, core),
        )

    def _fall_back(
        self,
        error: BaseException,
        method: str,
        key: Any,
        n: Any,
        now_ns: Any,
        plan: str | None = None,
        core: _Core | None = None,
    ) -> Any:
        """The ``on_error`` answer to ``method`` asked with these arguments."""
        args = (key, now_ns) if method == "available" else (key, n, now_ns)
        planned = {} if plan is None else {"plan": plan}
        return (core or self._core).unavailable(error, method, *args, **planned)

    def __repr__(self) -> str:
        if self._plans is not None:
            return f"{type(self).__name__}(name={self.name!r}, plans={self.plans!r})"
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"


@_old_shapes_refused
class RedisRateLimiter(_OneKey):
    """One limit shared by every process, on every host, that uses ``name`` on one Redis.

    ``RedisRateLimiter(client, 10, name="global")``: the rate alone by position, everything
    else by keyword. ``name`` (a non-empty ``str``) is the limit's identity: limiters of the
    same name, ``prefix`` and bands share one limit, kept in the hash ``prefix{name}:fingerprint``;
    limiters of different names never share anything, and a change of bands starts afresh (see
    the module's docs).

    Takes the arguments of :class:`~protocol_in_code.qos.limiter.RateLimiter` (read by it: the
    same rates, bursts and bands, the same errors) and answers its questions the same way:
    ``try_acquire``, ``check``, ``peek``, ``refund``, ``available``, ``acquire(timeout=)``,
    ``acquire_async``, the decorator and ``with``/``async with``. The differences:

    * Time is the server's ``TIME``, in whole microseconds; an explicit ``now_ns`` replaces it
      and must be a whole number of microseconds. A ``wait_ns`` is the in-process wait rounded
      up to the microsecond.
    * ``on_error`` decides what a call answers when the server cannot decide (unreachable, or
      answering with an error: OOM, BUSY, READONLY, NOREPLICAS, a failed script): ``"raise"``
      (:class:`LimiterUnavailable`), ``"allow"``, ``"deny"`` (a DENIED with a ``wait_ns`` of
      100 ms) or a local :class:`RateLimiter` that is asked instead.
    * ``min_ttl_ms`` keeps each written key at least that long (default 0: exactly until it is
      full again). Replays whose explicit times run slower than real time need it, since a
      key's TTL runs on the server's real clock.
    * ``initial`` is what a key that does not exist holds: at first, and again once it has
      refilled completely and expired.
    * ``acquire`` reserves on the server, as in-process: waiters are admitted in the order their
      reservations reach it, one script call each, and a waiter that gives up hands its turn
      back (forfeited if others queue behind it, so nobody is let in early). The bands of a key
      share one settlement point there, so a give-back on a key of several bands may give back
      a little less than in-process, never more.
    * There is no ``band_levels`` (a second round trip): :meth:`check_levels` answers ``check``
      and each band's level in one script call, as ``check`` then ``band_levels`` would.

    Given an asyncio client, construct :class:`AsyncRedisRateLimiter` instead (this class does
    it for you: ``RedisRateLimiter(asyncio_client, ...)`` returns one).
    """

    # What it declares to the layers that take any limiter (see _plugin.py).
    stacking, blocks = _plugin.STACKING, _plugin.BLOCKS

    def __new__(
        cls,
        client: Any,
        rate: Any = None,
        *,
        name: str,
        burst: int | None = None,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        initial: int | None = None,
        on_error: OnError = "raise",
        min_ttl_ms: int = 0,
        prefix: str | bytes = "qos:",
    ) -> RedisRateLimiter:
        if cls is RedisRateLimiter and Server(client).is_async:
            return AsyncRedisRateLimiter(  # type: ignore[return-value]
                client,
                rate,
                name=name,
                burst=burst,
                per=per,
                bands=bands,
                initial=initial,
                on_error=on_error,
                min_ttl_ms=min_ttl_ms,
                prefix=prefix,
            )
        return super().__new__(cls)

    def _ask(self, method: str, n: Any, now_ns: Any) -> Any:
        op, read = _QUESTIONS[method]
        args = self._core.args(op, n, now_ns)
        try:
            reply = self._core.server.run(self._keys, args)
        except self._unavailable as error:
            return self._fall_back(error, method, n, now_ns)
        return read(reply)

    def try_acquire(self, n: int = 1, now_ns: int | None = None) -> bool:
        """Take ``n`` tokens if every band holds them: True if taken."""
        core = self._core
        if type(n) is int and n == 1 and now_ns is None:
            args = core.take_one
        else:
            args = core.args(TAKE, n, now_ns)
        try:
            reply = core.server.run(self._keys, args)
        except self._unavailable as error:
            return bool(self._fall_back(error, "try_acquire", n, now_ns))
        return taken(reply, n)

    def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        """:meth:`try_acquire`, answering with the whole :class:`Decision`."""
        return self._ask("check", n, now_ns)  # type: ignore[no-any-return]

    def check_levels(self, n: int = 1, now_ns: int | None = None) -> tuple[Decision, Levels | None]:
        """:meth:`check`, and each band's level right after it, in the same script call: what
        ``check`` then ``band_levels`` say in-process, ``[(whole tokens, ns until one more),
        ...]`` in the order of :attr:`bands` (the ns rounded up to the microsecond). When the
        server cannot answer, ``on_error`` decides as for :meth:`check`, and the levels are a
        local fallback limiter's ``band_levels``, or None under ``"allow"`` and ``"deny"``."""
        core = self._core
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = core.server.run(self._keys, args)
        except self._unavailable as error:
            return core.unavailable_levels(error, n, now_ns)
        return leveled(reply)

    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        """What :meth:`check` would answer, taking nothing."""
        return self._ask("peek", n, now_ns)  # type: ignore[no-any-return]

    def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        """Give ``n`` tokens back to every band, each capped at its burst."""
        self._ask("refund", n, now_ns)

    def available(self, now_ns: int | None = None) -> int:
        """Whole tokens every band holds now."""
        return self._ask("available", 0, now_ns)  # type: ignore[no-any-return]

    def acquire(self, n: int = 1, timeout: float | None = None) -> bool:
        """Block until ``n`` tokens are taken (True); False at once if they would only be there
        after ``timeout`` seconds. Waiters are served in the order they reach the server: each
        reserves its tokens there at the moment they will be there, then sleeps until then, so
        a large request is never starved by small ones (one script call per admission). A
        waiter interrupted while it sleeps gives its reservation back."""
        self._core.args(RESERVE, n, None)
        return _blocking_acquire(
            self._core,
            self._keys,
            n,
            timeout,
            type(self).__name__,
            lambda e: self._fall_back(e, "check", n, None),
        )

    async def acquire_async(self, n: int = 1, timeout: float | None = None) -> bool:
        """:meth:`acquire` for asyncio; the round trip runs on threads of the server's own,
        never on the event loop's default executor (see ``_waits``). A waiter
        cancelled at any point gives back what it reserved."""
        return await self._wait(n, timeout, _in_thread)

    def __call__(self, function: _F) -> _F:
        """Decorate ``function`` (``def`` or ``async def``) to take one token per call."""
        return _conveniences.decorate(self, function)  # type: ignore[return-value]

    def __enter__(self) -> RedisRateLimiter:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> RedisRateLimiter:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


@_old_shapes_refused
class RedisKeyedRateLimiter(_ManyKeys):
    """One shared limit per key: :class:`RedisRateLimiter` for every key at once.

    ``RedisKeyedRateLimiter(client, 5, burst=10, name="login")``: the arguments and answers of
    :class:`~protocol_in_code.qos.keyed.KeyedRateLimiter`, with a ``key`` (``str`` or ``bytes``)
    first in every call, and a ``name`` that is the limiter's identity: a key's limit is the
    hash ``prefix{key}:fingerprint:name``, so limiters of different names (a login limit
    and an API limit, both keyed by client address) never share a key's limit, and none shares
    anything with a :class:`RedisRateLimiter`. Memory is the server's and bounded by expiry: a
    key lives exactly until it is full again, so there is no ``max_keys`` and nothing is ever
    refused. ``on_error`` may name a local :class:`KeyedRateLimiter`.
    ``plans={"free": ..., "pro": ...}`` in place of ``rate``/``bands`` limits each key by its
    plan (``plan=`` on every per-key call, required), as in-process: a plan's keys are those of
    its bands' fingerprint, so a call under a plan is still one script call.
    :meth:`try_acquire_many` decides many keys at once: one round trip per cluster node.

    Unlike the in-process table, each key has its own clock: a call at a time before a key's
    settlement point gains nothing on that key (the server's clock is one clock anyway).
    """

    # What it declares to the layers that take any limiter (see _plugin.py).
    stacking, blocks = _plugin.STACKING, _plugin.BLOCKS

    def key_refusal(self, key: object) -> str | None:
        return _plugin.key_refusal(key)

    def __new__(
        cls,
        client: Any,
        rate: Any = None,
        *,
        name: str,
        burst: int | None = None,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        plans: dict[str, Any] | None = None,
        on_error: OnError = "raise",
        min_ttl_ms: int = 0,
        prefix: str | bytes = "qos:",
    ) -> RedisKeyedRateLimiter:
        if cls is RedisKeyedRateLimiter and Server(client).is_async:
            return AsyncRedisKeyedRateLimiter(  # type: ignore[return-value]
                client,
                rate,
                name=name,
                burst=burst,
                per=per,
                bands=bands,
                plans=plans,
                on_error=on_error,
                min_ttl_ms=min_ttl_ms,
                prefix=prefix,
            )
        return super().__new__(cls)

    def _ask(self, method: str, key: Any, n: Any, now_ns: Any, plan: Any) -> Any:
        op, read = _QUESTIONS[method]
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        args = core.args(op, n, now_ns)
        try:
            reply = core.server.run(keys, args)
        except self._unavailable as error:
            return self._fall_back(error, method, key, n, now_ns, plan, core)
        return read(reply)

    def try_acquire(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> bool:
        """Take ``n`` tokens from ``key``'s bands if every one holds them: True if taken."""
        core = self._core if plan is None and self._plans is None else self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        if type(n) is int and n == 1 and now_ns is None:
            args = core.take_one
        else:
            args = core.args(TAKE, n, now_ns)
        try:
            reply = core.server.run(keys, args)
        except self._unavailable as error:
            return bool(self._fall_back(error, "try_acquire", key, n, now_ns, plan, core))
        return taken(reply, n)

    def check(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """:meth:`try_acquire`, answering with the whole :class:`Decision`."""
        return self._ask("check", key, n, now_ns, plan)  # type: ignore[no-any-return]

    def check_levels(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> tuple[Decision, Levels | None]:
        """:meth:`check`, and each band's level of ``key`` right after it, in the same script
        call (see :meth:`RedisRateLimiter.check_levels`; with plans, of ``plan``'s bands)."""
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = core.server.run(keys, args)
        except self._unavailable as error:
            planned = {} if plan is None else {"plan": plan}
            return core.unavailable_levels(error, key, n, now_ns, **planned)
        return leveled(reply)

    def peek(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """What :meth:`check` would answer, taking nothing."""
        return self._ask("peek", key, n, now_ns, plan)  # type: ignore[no-any-return]

    def refund(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> None:
        """Give ``n`` tokens back to every band of ``key``, each capped at its burst."""
        self._ask("refund", key, n, now_ns, plan)

    def available(
        self, key: str | bytes, now_ns: int | None = None, *, plan: str | None = None
    ) -> int:
        """Whole tokens every band of ``key`` holds now."""
        return self._ask("available", key, 0, now_ns, plan)  # type: ignore[no-any-return]

    def try_acquire_many(
        self,
        keys: Iterable[str | bytes],
        n: int = 1,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> list[bool]:
        """:meth:`try_acquire` for each key in turn: the same answers as one call per key, in
        the same order. One script call per hash slot and per 1,000 keys (so that none holds
        the server long); on a single server they are sent in turn (one in all for up to 1,000
        keys), and on a cluster the calls of all the slots one node owns go in one pipeline:
        one round trip per node, the nodes' in parallel. A node (or the single server) found
        unreachable is not asked again within the batch: its calls not sent yet go straight to
        ``on_error``, so a batch waits for at most one timeout per unreachable node, not one
        per slot or per 1,000 keys."""
        core = self._core_of(plan)
        batch = _Batch(core, keys, n, now_ns, None if plan is None else {"plan": plan})
        server = core.server
        if server.pipelined and batch.keys:
            calls = batch.calls()
            for _ in range(_Batch.ROUNDS):
                work, alone = batch.by_node(calls)
                server.pipelines(work)
                calls, resend, reroute = batch.settle(work)
                for call in [*alone, *resend]:
                    self._alone(batch, call)
                calls += batch.rerouted(reroute)
                if not calls:
                    break
            for call in calls:
                self._alone(batch, call)
            return batch.finished()
        for group, node in batch.groups():
            try:
                reply = server.run(batch.names_of(group, node), batch.args)
            except self._unavailable as error:
                batch.failed(group, node, error)
            else:
                batch.answered(group, reply)
        return batch.finished()

    def _alone(self, batch: _Batch, call: Call) -> None:
        """One call of a batch sent on its own through the client, its record unchanged."""
        try:
            reply = self._core.server.send(call.keys, call.args)
        except self._unavailable as error:
            batch.failed(call.group, None, error)
        else:
            batch.answered(call.group, reply)

    def acquire(
        self,
        key: str | bytes,
        n: int = 1,
        timeout: float | None = None,
        *,
        plan: str | None = None,
    ) -> bool:
        """Block until ``n`` tokens of ``key`` are taken (True); False at once if they would
        only be there after ``timeout`` seconds. The key's waiters are served in the order they
        reach the server (see :meth:`RedisRateLimiter.acquire`)."""
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        core.args(RESERVE, n, None)
        return _blocking_acquire(
            core,
            keys,
            n,
            timeout,
            type(self).__name__,
            lambda e: self._fall_back(e, "check", key, n, None, plan, core),
        )

    async def acquire_async(
        self,
        key: str | bytes,
        n: int = 1,
        timeout: float | None = None,
        *,
        plan: str | None = None,
    ) -> bool:
        """:meth:`acquire` for asyncio; the round trip runs on threads of the server's own,
        never on the event loop's default executor (see ``_waits``). A waiter
        cancelled at any point gives back what it reserved."""
        return await self._wait(key, n, timeout, plan, _in_thread)


class AsyncRedisRateLimiter(_OneKey):
    """:class:`RedisRateLimiter` on an asyncio client: every call is awaited, and none blocks
    the event loop. Same arguments, same answers; ``acquire`` and ``acquire_async`` are the
    same coroutine, and the decorator takes ``async def`` functions."""

    # What it declares to the layers that take any limiter (see _plugin.py).
    stacking, awaits = _plugin.STACKING, _plugin.AWAITS

    async def _ask(self, method: str, n: Any, now_ns: Any) -> Any:
        op, read = _QUESTIONS[method]
        args = self._core.args(op, n, now_ns)
        try:
            reply = await _net_zero_if_taking(self._core, self._keys, op, args, n, now_ns)
        except self._unavailable as error:
            return self._fall_back(error, method, n, now_ns)
        return read(reply)

    async def try_acquire(self, n: int = 1, now_ns: int | None = None) -> bool:
        answer = await self._ask("try_acquire", n, now_ns)
        return answer if isinstance(answer, bool) else allowed(answer, n)

    async def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        return await self._ask("check", n, now_ns)  # type: ignore[no-any-return]

    async def check_levels(
        self, n: int = 1, now_ns: int | None = None
    ) -> tuple[Decision, Levels | None]:
        """:meth:`RedisRateLimiter.check_levels`, awaited; net zero for a cancelled caller."""
        core = self._core
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = await _taken_with_levels(core, self._keys, args, n, now_ns)
        except self._unavailable as error:
            return core.unavailable_levels(error, n, now_ns)
        return leveled(reply)

    async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        return await self._ask("peek", n, now_ns)  # type: ignore[no-any-return]

    async def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        await self._ask("refund", n, now_ns)

    async def available(self, now_ns: int | None = None) -> int:
        return await self._ask("available", 0, now_ns)  # type: ignore[no-any-return]

    async def acquire(self, n: int = 1, timeout: float | None = None) -> bool:
        return await self._wait(n, timeout, _awaited)

    acquire_async = acquire

    def __call__(self, function: _F) -> _F:
        if not inspect.iscoroutinefunction(function):
            raise TypeError("a limiter on an asyncio client decorates async def functions only")
        return _conveniences.decorate(self, function)  # type: ignore[arg-type, return-value]

    async def __aenter__(self) -> AsyncRedisRateLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class AsyncRedisKeyedRateLimiter(_ManyKeys):
    """:class:`RedisKeyedRateLimiter` on an asyncio client: every call is awaited."""

    # What it declares to the layers that take any limiter (see _plugin.py).
    stacking, awaits = _plugin.STACKING, _plugin.AWAITS

    def key_refusal(self, key: object) -> str | None:
        return _plugin.key_refusal(key)

    async def _ask(self, method: str, key: Any, n: Any, now_ns: Any, plan: Any) -> Any:
        op, read = _QUESTIONS[method]
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        args = core.args(op, n, now_ns)
        try:
            reply = await _net_zero_if_taking(core, keys, op, args, n, now_ns)
        except self._unavailable as error:
            return self._fall_back(error, method, key, n, now_ns, plan, core)
        return read(reply)

    async def try_acquire(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> bool:
        answer = await self._ask("try_acquire", key, n, now_ns, plan)
        return answer if isinstance(answer, bool) else allowed(answer, n)

    async def check(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        return await self._ask("check", key, n, now_ns, plan)  # type: ignore[no-any-return]

    async def check_levels(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> tuple[Decision, Levels | None]:
        """:meth:`RedisKeyedRateLimiter.check_levels`, awaited; net zero for a cancelled
        caller."""
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = await _taken_with_levels(core, keys, args, n, now_ns)
        except self._unavailable as error:
            planned = {} if plan is None else {"plan": plan}
            return core.unavailable_levels(error, key, n, now_ns, **planned)
        return leveled(reply)

    async def peek(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        return await self._ask("peek", key, n, now_ns, plan)  # type: ignore[no-any-return]

    async def refund(
        self, key: str | bytes, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> None:
        await self._ask("refund", key, n, now_ns, plan)

    async def available(
        self, key: str | bytes, now_ns: int | None = None, *, plan: str | None = None
    ) -> int:
        return await self._ask("available", key, 0, now_ns, plan)  # type: ignore[no-any-return]

    async def try_acquire_many(
        self,
        keys: Iterable[str | bytes],
        n: int = 1,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> list[bool]:
        """On a cluster, one pipeline per node, the nodes' awaited together; on one server,
        one round trip per 1,000 keys, awaited in turn. A node (or the single server) found
        unreachable is not asked again within the batch. A caller cancelled meanwhile is net
        zero: what the batch took is given back."""
        core = self._core_of(plan)
        batch = _Batch(core, keys, n, now_ns, None if plan is None else {"plan": plan})
        server, refund = core.server, core.args(REFUND, n, now_ns)
        if server.pipelined and batch.keys:
            return await self._pipelined(batch, refund)
        try:
            for group, node in batch.groups():
                try:
                    names = batch.names_of(group, node)

                    async def give_back(reply: Any, names: list[bytes] = names) -> None:
                        for name, taken_here in zip(names, allowed_digits(reply), strict=True):
                            if taken_here:
                                await server.run_async([name], refund)

                    asked = server.run_async(names, batch.args)
                    reply = await _net_zero(asked, give_back)
                except self._unavailable as error:
                    batch.failed(group, node, error)
                else:
                    batch.answered(group, reply)
        except asyncio.CancelledError:
            # The groups decided so far took tokens nobody will be told of (the one under
            # way gives its own back): net zero, as for a single call.
            _in_background(batch.give_back())
            raise
        return batch.finished()

    async def _pipelined(self, batch: _Batch, refund: list[bytes]) -> list[bool]:
        """:meth:`try_acquire_many` on a cluster: :meth:`RedisKeyedRateLimiter.try_acquire_many`
        awaited, each round (and each call sent on its own) net zero if the caller is cancelled
        while it runs, and the rounds before given back."""
        server = self._core.server

        async def give_back(names: list[bytes], reply: Any) -> None:
            for name, taken_here in zip(names, allowed_digits(reply), strict=True):
                if taken_here:
                    await server.run_async([name], refund)

        async def round_(work: list[tuple[Any, list[Call]]]) -> list[tuple[Any, list[Call]]]:
            await server.pipelines_async(work)
            return work

        async def round_given_back(work: list[tuple[Any, list[Call]]]) -> None:
            for _node, calls in work:
                for call in calls:
                    if call.result is not None and not isinstance(call.result, BaseException):
                        await give_back(call.keys, call.result)

        async def alone(call: Call) -> None:
            try:
                asked = server.send_async(call.keys, call.args)
                reply = await _net_zero(asked, functools.partial(give_back, call.keys))
            except self._unavailable as error:
                batch.failed(call.group, None, error)
            else:
                batch.answered(call.group, reply)

        async def layout() -> None:
            """The client's layout of the cluster, read if it is not (at first, and after a
            connection failed: redis-py's asyncio client marks it to be read again then)."""
            initialize = getattr(server.client, "initialize", None)
            if initialize is not None:
                with contextlib.suppress(*self._unavailable):
                    await initialize()

        try:
            await layout()
            calls = batch.calls()
            for _ in range(_Batch.ROUNDS):
                work, alone_calls = batch.by_node(calls)
                await _net_zero(round_(work), round_given_back)
                calls, resend, reroute = batch.settle(work)
                for call in [*alone_calls, *resend]:
                    await alone(call)
                if reroute:
                    await layout()
                calls += batch.rerouted(reroute)
                if not calls:
                    break
            for call in calls:
                await alone(call)
        except asyncio.CancelledError:
            # The rounds settled so far took tokens nobody will be told of (the one under way
            # gives its own back): net zero, as for a single call.
            _in_background(batch.give_back())
            raise
        return batch.finished()

    async def acquire(
        self,
        key: str | bytes,
        n: int = 1,
        timeout: float | None = None,
        *,
        plan: str | None = None,
    ) -> bool:
        return await self._wait(key, n, timeout, plan, _awaited)

    acquire_async = acquire
