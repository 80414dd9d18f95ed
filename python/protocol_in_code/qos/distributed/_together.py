"""Stacked limits: one request against several Redis limits at once, taken from all or from none.

A request may be subject to a global limit, a per-route one and a per-client one.
:func:`check_together` decides it against all of them: if every part is allowed, every part's
tokens are taken and each part is answered as its ``check`` would answer; otherwise nothing is
taken anywhere, and each part is answered as its ``peek`` would answer now (ALLOWED with what
it has left, DENIED with its wait, NEVER beyond a burst).

**One script call per group.** The parts are grouped by client and, on a cluster, by hash slot:
each group is one ``EVALSHA`` of the script's "together" op, which settles and decides every key
of the group on the server's clock and takes on all of them or on none, atomically (see
``settle.lua``). On a single server every part of one client is one group, so a stack is one
round trip. Each key is sent with its own limiter's configuration, ``n``, ``min_ttl_ms`` and
``initial``, and keeps its own Redis key (name and fingerprint): a stack reads and writes each
limit exactly as that limiter's own calls do.

**One key named twice.** Parts that name the same Redis key (one limiter and key, or two
limiters of the same prefix, name and bands) draw from that bucket together: the sum of their
``n`` is asked of it, and each of them is answered with the bucket's decision for the sum.

**Across groups** (several slots of a cluster, several clients), the groups are decided in
order, each atomically on its own. Once one refuses, the groups taken before are given back (a
refund of what each took), and the groups after it are only peeked (the "peek together" op,
one call per group), so that every part is answered. This is not atomic against other callers:
for the few round trips between a take and its give-back, the tokens are held, so a concurrent
request may be refused that would have been admitted; and a give-back is a refund, capped at
the burst only, so a key that would have been full meanwhile gets back the refill the taken
tokens made room for (it can then admit up to what this call took beyond its burst, once).

**When a server cannot answer**, each part of that group is answered by its own limiter's
``on_error``, as its ``check`` (or, once the stack is refused, its ``peek``) would be: "allow"
counts as allowed, "deny" as DENIED (100 ms), a local limiter is asked, and "raise" raises
:class:`LimiterUnavailable` after everything taken has been given back. A take given back to a
server that cannot be reached stands, as the take of any call whose reply was lost.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import struct
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from protocol_in_code._native import Decision, KeyedRateLimiter, LimitOutcome, RateLimiter
from protocol_in_code.qos._give_backs import in_background, run_to_the_end
from protocol_in_code.qos.distributed import _bands, _waits
from protocol_in_code.qos.distributed._core import Core
from protocol_in_code.qos.distributed._limits import Limits
from protocol_in_code.qos.distributed._net_zero import net_zero
from protocol_in_code.qos.distributed._replies import REFUND, TAKE, decision
from protocol_in_code.qos.distributed._server import LimiterUnavailable, Server
from protocol_in_code.qos.distributed.limiters import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)

#: The script's ops for a stack (see ``settle.lua``): take on every key or on none, and peek
#: every key.
TOGETHER, PEEK_TOGETHER = 7, 8

#: A further key's n, least TTL and initial tokens, after the first key's request.
_N = struct.Struct(">d")

SyncPart = tuple[RedisRateLimiter | RedisKeyedRateLimiter, str | bytes | None, int, str | None]
AsyncPart = tuple[
    AsyncRedisRateLimiter | AsyncRedisKeyedRateLimiter | RedisRateLimiter | RedisKeyedRateLimiter,
    str | bytes | None,
    int,
    str | None,
]


def check_together(parts: Sequence[SyncPart], *, now_ns: int | None = None) -> list[Decision]:
    """Decide one request against every limit in ``parts``: all taken, or none.

    Each part is ``(limiter, key, n, plan)``: a :class:`RedisRateLimiter` with ``key`` and
    ``plan`` None, or a :class:`RedisKeyedRateLimiter` with its ``key`` (``str`` or ``bytes``)
    and, for a limiter with plans, the ``plan``. Every part is checked as its ``check`` checks
    it, with the same errors, before anything is sent.

    Returns one :class:`Decision` per part, in order. If every part is allowed, every part's
    tokens are taken and each Decision is the one ``check`` would have answered; otherwise
    nothing is taken, and each Decision is the one ``peek`` would answer now. Parts naming one
    Redis key ask it for the sum of their ``n``, and are each answered with its decision for
    the sum. Parts of one client in one hash slot (on a single server: all of them) are decided
    in one script call, atomically, on the server's clock; several groups are decided in
    order, the ones taken given back when a later one refuses, which is not atomic against
    other callers (the guide's "Stacked limits" says what holds there, and what a server that
    cannot answer does). ``now_ns`` replaces the server's time, as in the single calls.
    """
    return _Stack(parts, now_ns, asynchronous=False).decide()


async def check_together_async(
    parts: Sequence[AsyncPart], *, now_ns: int | None = None
) -> list[Decision]:
    """:func:`check_together` for the asyncio limiters (:class:`AsyncRedisRateLimiter`,
    :class:`AsyncRedisKeyedRateLimiter`): awaited, never blocking the event loop. The
    synchronous limiters may be parts too: their script calls run on threads of their server's
    own, as their ``acquire_async`` does (never on the event loop's default executor). A caller
    cancelled meanwhile is net zero: the call under way is let finish, and everything the stack
    took is given back."""
    return await _Stack(parts, now_ns, asynchronous=True).decide_async()


class _Part:
    """One part of a stack, checked: its limiter's core (the plan's, for a limiter with
    plans), its Redis key, and how its ``on_error`` is asked."""

    __slots__ = ("core", "key", "keyed", "limiter", "n", "name", "plan")

    def __init__(
        self, limiter: Any, keyed: bool, key: Any, n: int, plan: Any, core: Core, name: bytes
    ) -> None:
        self.limiter, self.keyed, self.key, self.n, self.plan = limiter, keyed, key, n, plan
        self.core, self.name = core, name

    def fall_back(self, error: BaseException, method: str, now_ns: Any) -> Decision:
        """The ``on_error`` answer to ``method`` ("check" or "peek") for this part."""
        answer = self.limiter._fall_back(
            error, method, self.key, self.n, now_ns, self.plan, self.core
        )
        return answer  # type: ignore[no-any-return]

    def refund_locally(self, now_ns: Any) -> None:
        """Give back what a local ``on_error`` limiter took for this part."""
        policy = self.core.on_error
        if isinstance(policy, RateLimiter):
            policy.refund(self.n, now_ns)
        elif isinstance(policy, KeyedRateLimiter):
            planned = {} if self.plan is None else {"plan": self.plan}
            policy.refund(self.key, self.n, now_ns, **planned)


class _Bucket:
    """One Redis key of a stack: the parts that name it (their positions), and the sum of their
    ``n``, asked of it at once. Its limiter's ``min_ttl_ms`` and ``initial`` are its first
    part's."""

    __slots__ = ("core", "n", "name", "positions")

    def __init__(self, core: Core, name: bytes) -> None:
        self.core, self.name = core, name
        self.n = 0
        self.positions: list[int] = []

    def request(self) -> int:
        """``n`` as the script is sent it: above every burst is NEVER whatever its size, so it
        is the largest burst plus one (which keeps the script's products within its bound)."""
        return min(self.n, self.core.largest + 1)


class _Group:
    """The keys of a stack that one script call decides: one client's, in one hash slot."""

    __slots__ = ("buckets", "server")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buckets: list[_Bucket] = []

    @property
    def names(self) -> list[bytes]:
        return [bucket.name for bucket in self.buckets]

    def args(self, op: int, now_us: int | None) -> list[bytes]:
        """The script's arguments (see ``settle.lua``): the first key's request, then each
        further key's n, least TTL and initial tokens; then each key's configuration."""
        first = self.buckets[0]
        request = _bands.request(op, first.request(), now_us) + first.core.tail
        request += b"".join(
            _N.pack(bucket.request()) + bucket.core.tail for bucket in self.buckets[1:]
        )
        return [request, *(bucket.core.config for bucket in self.buckets)]


#: The one-key and the keyed limiter classes each form takes: the asyncio form takes the
#: synchronous limiters too (their calls run on threads of their server's own).
_ONE_KEY = {False: (RedisRateLimiter,), True: (AsyncRedisRateLimiter, RedisRateLimiter)}
_KEYED = {
    False: (RedisKeyedRateLimiter,),
    True: (AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter),
}


def _run_async(server: Server, keys: list[bytes], args: list[bytes]) -> Awaitable[Any]:
    """The script's reply, awaited: on an asyncio client, or on the server's own threads on a
    synchronous one (see ``_waits``)."""
    if server.is_async:
        return server.run_async(keys, args)
    return _waits.awaited(_waits.of(server, keys[0]), functools.partial(server.run, keys, args))


def _note(error: Exception, index: int) -> None:
    """Add a note naming the part ``error`` is about (Python 3.11 on): its message stays the
    one the part's own ``check`` raises."""
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(f"(in parts[{index}] of a stack)")


class _Stack:
    """One stacked decision: the parts checked and grouped, then decided group by group."""

    def __init__(self, parts: Iterable[Any], now_ns: Any, asynchronous: bool) -> None:
        if isinstance(parts, (str, bytes)) or not isinstance(parts, Iterable):
            raise TypeError(
                f"parts must be a sequence of (limiter, key, n, plan) tuples, not "
                f"{type(parts).__name__}"
            )
        self.parts = [
            self._checked(index, part, now_ns, asynchronous) for index, part in enumerate(parts)
        ]
        self.now_ns = now_ns
        self.now_us = None if now_ns is None else Core.now_us(now_ns)
        self.answers: list[Decision | None] = [None] * len(self.parts)
        buckets: dict[tuple[int, bytes], _Bucket] = {}
        groups: dict[tuple[int, int], _Group] = {}
        self.groups: list[_Group] = []
        for position, part in enumerate(self.parts):
            server = part.core.server
            client = id(server.client)
            bucket = buckets.get((client, part.name))
            if bucket is None:
                bucket = buckets[(client, part.name)] = _Bucket(part.core, part.name)
                slot = server.client.keyslot(part.name) if server.is_cluster else 0
                group = groups.get((client, slot))
                if group is None:
                    group = groups[(client, slot)] = _Group(server)
                    self.groups.append(group)
                group.buckets.append(bucket)
            bucket.n += part.n
            bucket.positions.append(position)
        #: Whether a group has refused: nothing more is taken, the rest is peeked.
        self.refused = False
        #: The groups the servers took from (to give back if the stack is refused).
        self.taken: list[_Group] = []
        #: The parts a local ``on_error`` limiter took for.
        self.taken_locally: list[int] = []

    @staticmethod
    def _checked(index: int, part: Any, now_ns: Any, asynchronous: bool) -> _Part:
        """A part checked as its limiter's ``check`` checks its arguments (the same errors, in
        the same order: the plan, the key, then ``n`` and ``now_ns``)."""
        one, keyed = _ONE_KEY[asynchronous], _KEYED[asynchronous]
        try:
            limiter, key, n, plan = part
        except (TypeError, ValueError):
            raise TypeError(
                f"parts[{index}] must be a (limiter, key, n, plan) tuple, not {part!r}"
            ) from None
        if not asynchronous and isinstance(
            limiter, (AsyncRedisRateLimiter, AsyncRedisKeyedRateLimiter)
        ):
            raise TypeError(
                f"parts[{index}] is a {type(limiter).__name__}, whose calls are awaited: use "
                "check_together_async()"
            )
        if not isinstance(limiter, (*one, *keyed)):
            raise TypeError(
                f"parts[{index}]: the limiter must be one of "
                f"{', '.join(c.__name__ for c in (*one, *keyed))}, not {type(limiter).__name__}"
            )
        if isinstance(limiter, one) and (key is not None or plan is not None):
            raise TypeError(
                f"parts[{index}]: a {type(limiter).__name__} is one limit, asked with no key "
                f"and no plan: write ({type(limiter).__name__}, None, n, None), not key={key!r}, "
                f"plan={plan!r}"
            )
        try:
            assert isinstance(limiter, Limits)
            core, (name,) = limiter._target(key, plan)
            core.args(TAKE, n, now_ns)  # n and now_ns, checked as check checks them
        except (TypeError, ValueError) as error:
            _note(error, index)
            raise
        return _Part(limiter, isinstance(limiter, keyed), key, operator.index(n), plan, core, name)

    # -- what a group's reply (or failure) says -----------------------------------------------

    def answered(self, group: _Group, reply: Any, op: int) -> None:
        """A group's script reply: each key's Decision, for each part that named it; a group
        that took is held, one that refused refuses the stack."""
        if not isinstance(reply, list) or len(reply) != len(group.buckets):
            raise LimiterUnavailable(
                f"the script answered a stack of {len(group.buckets)} keys with {reply!r}"
            )
        allowed = True
        for bucket, one in zip(group.buckets, reply, strict=True):
            answer = decision(one)
            allowed = allowed and answer.outcome is LimitOutcome.ALLOWED
            for position in bucket.positions:
                self.answers[position] = answer
        if op == TOGETHER:
            if allowed:
                self.taken.append(group)
            else:
                self.refused = True

    def failed(self, group: _Group, error: BaseException) -> None:
        """The ``on_error`` answers for a group whose server could not decide: each part's own
        limiter's, as ``check`` while the stack may still take (all of them, if every one is
        allowed), else as ``peek``. A ``"raise"`` raises (the caller gives back first)."""
        positions = [position for bucket in group.buckets for position in bucket.positions]
        for position in positions:
            policy = self.parts[position].core.on_error
            if isinstance(policy, str) and policy == "raise":
                raise LimiterUnavailable(
                    f"the stacked limit cannot be decided: the Redis server of parts"
                    f"[{position}] could not answer ({type(error).__name__}: {error}); what the "
                    "stack had taken is given back"
                ) from error
        peeks = [
            self.parts[position].fall_back(error, "peek", self.now_ns) for position in positions
        ]
        for position, answer in zip(positions, peeks, strict=True):
            self.answers[position] = answer
        if self.refused:
            return
        if not all(answer.outcome is LimitOutcome.ALLOWED for answer in peeks):
            self.refused = True
            return
        local = [p for p in positions if not isinstance(self.parts[p].core.on_error, str)]
        checks = [self.parts[p].fall_back(error, "check", self.now_ns) for p in local]
        took = [p for p, answer in zip(local, checks, strict=True) if answer.allowed]
        self.taken_locally.extend(took)
        if len(took) < len(local):  # another thread took first, between peek and check
            self.refused = True
            return
        for position, answer in zip(local, checks, strict=True):
            self.answers[position] = answer

    def given_back(self) -> tuple[list[_Group], list[int]]:
        """What this stack took, to give back, now answered as ``peek`` would have answered
        before it: a key's remaining plus what it took (a take of ``n`` from every band lowers
        the whole tokens left by exactly ``n``), a local limiter asked ``peek`` once refunded."""
        groups, self.taken = self.taken, []
        local, self.taken_locally = self.taken_locally, []
        for group in groups:
            for bucket in group.buckets:
                for position in bucket.positions:
                    answer = self.answers[position]
                    assert answer is not None
                    self.answers[position] = Decision(
                        LimitOutcome.ALLOWED, 0, answer.remaining + bucket.n
                    )
        return groups, local

    def refunded_locally(self, local: list[int]) -> None:
        for position in local:
            part = self.parts[position]
            part.refund_locally(self.now_ns)
            self.answers[position] = part.fall_back(_NO_ERROR, "peek", self.now_ns)

    def refund_args(self, bucket: _Bucket) -> list[bytes]:
        return bucket.core.args(REFUND, bucket.n, self.now_ns)

    def finished(self) -> list[Decision]:
        answers = self.answers
        assert all(answer is not None for answer in answers)
        return answers  # type: ignore[return-value]

    # -- blocking -----------------------------------------------------------------------------

    def decide(self) -> list[Decision]:
        try:
            for group in self.groups:
                op = PEEK_TOGETHER if self.refused else TOGETHER
                try:
                    reply = group.server.run(group.names, group.args(op, self.now_us))
                except group.server.unavailable as error:
                    self.failed(group, error)
                else:
                    self.answered(group, reply, op)
        except BaseException:
            self.give_back()
            raise
        if self.refused:
            self.give_back()
        return self.finished()

    def give_back(self) -> None:
        """Give back everything this stack took; a server that cannot be reached keeps what it
        took, as the take of any call whose reply was lost."""
        groups, local = self.given_back()
        for group in groups:
            for bucket in group.buckets:
                try:
                    group.server.run([bucket.name], self.refund_args(bucket))
                except group.server.unavailable:
                    pass
        self.refunded_locally(local)

    # -- asyncio ------------------------------------------------------------------------------

    async def decide_async(self) -> list[Decision]:
        try:
            for group in self.groups:
                op = PEEK_TOGETHER if self.refused else TOGETHER
                asked = _run_async(group.server, group.names, group.args(op, self.now_us))
                try:
                    if op == TOGETHER:
                        reply = await net_zero(asked, self._undo(group))
                    else:
                        reply = await asked
                except group.server.unavailable as error:
                    self.failed(group, error)
                else:
                    self.answered(group, reply, op)
        except asyncio.CancelledError:
            # The groups taken so far took tokens nobody will be told of (the one under way
            # gives its own back): net zero, as for a single call.
            in_background(self.give_back_async())
            raise
        except BaseException:
            await run_to_the_end(self.give_back_async())
            raise
        if self.refused:
            # A cancel while this runs must not leave the later groups' keys taken.
            await run_to_the_end(self.give_back_async())
        return self.finished()

    def _undo(self, group: _Group) -> Callable[[Any], Awaitable[None] | None]:
        """What gives back a group's take whose caller was cancelled while it ran."""

        def undo(reply: Any) -> Awaitable[None] | None:
            if not isinstance(reply, list) or not all(
                decision(one).outcome is LimitOutcome.ALLOWED for one in reply
            ):
                return None
            return self._refund_async(group)

        return undo

    async def _refund_async(self, group: _Group) -> None:
        for bucket in group.buckets:
            try:
                await _run_async(group.server, [bucket.name], self.refund_args(bucket))
            except group.server.unavailable:
                pass

    async def give_back_async(self) -> None:
        groups, local = self.given_back()
        for group in groups:
            await self._refund_async(group)
        self.refunded_locally(local)


class _NoError(Exception):
    """Stands for the error a local ``on_error`` limiter is asked after (it ignores it)."""


_NO_ERROR = _NoError()
