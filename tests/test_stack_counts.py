"""A keyed table counts every request it decides, on every path (issue 32, item 11).

``stats`` of a :class:`KeyedRateLimiter` or a :class:`SharedKeyedRateLimiter` counts the
requests the table decided: ``allowed``, ``denied`` (a wait, or NEVER), ``refused`` (no room
for a new key), and ``forgotten`` keys. (The one-limit limiters and the Redis limiters keep no
counts.) A single call counts itself. In a stack the table counts the request once, as the
native call does: allowed if its tokens were taken; otherwise the key's own refusal, or DENIED
where the key would have allowed but the request was refused by another part.

Refusals decided through ``check_together_async``, or in a stack with parts of another store
(a Redis limiter, a limiter of one's own), used to be missing: the table was only asked
(``peek``), never told the request was refused. Here N allowed and M refused requests must show
up in ``stats`` exactly, through every path: a single call, a stack, an awaited stack, with
the other part in-process, of one's own, or on a real redis-server.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.stack")

from protocol_in_code.qos import (
    Decision,
    KeyedRateLimiter,
    KeyedStats,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
)
from protocol_in_code.qos.stack import Part, check_together, check_together_async

SECOND = 1_000_000_000
HOUR = 3600
PLENTY = 1_000
ALLOWED_N, DENIED_M, REFUSED_M = 3, 4, 2
NAMES = itertools.count()


class Counter:
    """A limiter of the caller's own: ``limit`` tokens, no refill."""

    def __init__(self, limit: int) -> None:
        self.left = limit

    def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        if n > self.left:
            return Decision(LimitOutcome.DENIED, SECOND, self.left)
        self.left -= n
        return Decision(LimitOutcome.ALLOWED, 0, self.left)

    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        allowed = n <= self.left
        outcome = LimitOutcome.ALLOWED if allowed else LimitOutcome.DENIED
        return Decision(outcome, 0 if allowed else SECOND, self.left)

    def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        self.left += n


class AsyncCounter(Counter):
    """:class:`Counter` as an asyncio limiter."""

    async def check(self, n: int = 1, now_ns: int | None = None) -> Decision:  # type: ignore[override]
        return Counter.check(self, n)

    async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:  # type: ignore[override]
        return Counter.peek(self, n)

    async def refund(self, n: int = 1, now_ns: int | None = None) -> None:  # type: ignore[override]
        Counter.refund(self, n)


def table_of(kind: str, folder: Path, burst: int) -> Any:
    """A table of ``kind`` with room for one key, ``burst`` tokens a key, nothing refilling."""
    if kind == "in-process":
        return KeyedRateLimiter(1, burst=burst, per=HOUR, max_keys=1)
    name = f"counts-{next(NAMES)}"
    return SharedKeyedRateLimiter(name, 1, burst=burst, per=HOUR, max_keys=1, path=folder)


def counts(table: Any) -> tuple[int, int, int, int]:
    """The table's ``stats``: (allowed, denied, refused, forgotten)."""
    stats: KeyedStats = table.stats
    return stats.allowed, stats.denied, stats.refused, stats.forgotten


class Others:
    """The other part of each stack, of the kind asked, made for the path that decides it
    (an asyncio one for an awaited stack); Redis limiters on the session's real server."""

    def __init__(self, kind: str, request: pytest.FixtureRequest, awaited: bool) -> None:
        self.kind, self.awaited = kind, awaited
        self.clients: list[Any] = []
        if kind == "Redis":
            server = request.getfixturevalue("redis_server")
            self.port = server.port

    def make(self, limit: int) -> Any:
        if self.kind == "in-process":
            return RateLimiter(1, burst=limit, per=HOUR)
        if self.kind == "of one's own":
            return AsyncCounter(limit) if self.awaited else Counter(limit)
        import redis
        import redis.asyncio
        from protocol_in_code.qos.distributed import AsyncRedisRateLimiter, RedisRateLimiter

        name = f"counts-{next(NAMES)}"
        if self.awaited:
            client: Any = redis.asyncio.Redis(host="127.0.0.1", port=self.port)
            self.clients.append(client)
            return AsyncRedisRateLimiter(client, 1, burst=limit, per=HOUR, name=name)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        self.clients.append(client)
        return RedisRateLimiter(client, 1, burst=limit, per=HOUR, name=name)

    async def close(self) -> None:
        for client in self.clients:
            closed = client.aclose() if self.awaited else client.close()
            if closed is not None:
                await closed


def decide(path: str, requests: list[list[Part]], others: Others | None) -> list[bool]:
    """Whether each request was allowed, decided through ``path``."""
    if path == "a single call":
        return [bool(part.limiter.check(part.key)) for (part,) in requests]
    if path == "a stack":
        return [bool(check_together(parts)) for parts in requests]

    async def main() -> list[bool]:
        try:
            return [bool(await check_together_async(parts)) for parts in requests]
        finally:
            if others is not None:
                await others.close()

    return asyncio.run(main())


PATHS = ["a single call", "a stack", "an awaited stack"]
OTHERS = [None, "in-process", "of one's own", "Redis"]
TABLES = ["in-process", "shared"]


def combinations(refused_elsewhere: bool) -> Iterator[Any]:
    for path, other in itertools.product(PATHS, OTHERS):
        if path == "a single call" and other is not None:
            continue  # a single call has no other part
        if refused_elsewhere and other is None:
            continue
        for table in TABLES:
            yield pytest.param(path, other, table, id=f"{path}-{other or 'alone'}-{table}")


@pytest.mark.parametrize(("path", "other", "table_kind"), list(combinations(False)))
def test_the_tables_own_allowances_and_refusals_are_counted(
    path: str, other: str | None, table_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The table decides: N requests of a key allowed, M denied (its burst spent), and M'
    refused (a new key, no room). The other part, if any, always allows."""
    table = table_of(table_kind, tmp_path, ALLOWED_N)
    others = None if other is None else Others(other, request, path == "an awaited stack")
    plenty = None if others is None else others.make(PLENTY)

    def parts(key: str) -> list[Part]:
        return [Part(table, key)] + ([] if plenty is None else [Part(plenty)])

    requests = [parts("k") for _ in range(ALLOWED_N + DENIED_M)]
    requests += [parts(f"new-{i}") for i in range(REFUSED_M)]
    allowed = decide(path, requests, others)
    assert allowed == [True] * ALLOWED_N + [False] * (DENIED_M + REFUSED_M)
    assert counts(table) == (ALLOWED_N, DENIED_M, REFUSED_M, 0)


@pytest.mark.parametrize(("path", "other", "table_kind"), list(combinations(True)))
def test_a_request_another_part_refused_is_counted_denied(
    path: str, other: str, table_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The other part allows N requests and refuses the next M; the table, which would have
    allowed them all, counts N allowed and M denied, as the native call counts a request
    refused by another of its parts."""
    table = table_of(table_kind, tmp_path, PLENTY)
    others = Others(other, request, path == "an awaited stack")
    short = others.make(ALLOWED_N)
    requests = [[Part(table, "k"), Part(short)] for _ in range(ALLOWED_N + DENIED_M)]
    allowed = decide(path, requests, others)
    assert allowed == [True] * ALLOWED_N + [False] * DENIED_M
    assert counts(table) == (ALLOWED_N, DENIED_M, 0, 0)


def test_a_request_refused_by_two_tables_is_counted_once_in_each(tmp_path: Path) -> None:
    """Both tables of a mixed stack refuse: each counts its own refusal, once."""
    first, second = table_of("in-process", tmp_path, 1), table_of("shared", tmp_path, 1)
    stack = [Part(first, "k"), Part(second, "k"), Part(Counter(PLENTY))]
    assert [bool(check_together(stack)) for _ in range(3)] == [True, False, False]
    assert counts(first) == counts(second) == (1, 2, 0, 0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_worker_counts_refusals_without_a_warning() -> None:
    """Counting a refusal leaves nothing made before a fork for a worker to inherit (a limiter
    used after a fork warns): in the child, a table of its own counts, and nothing warns."""
    assert not check_together([Part(KeyedRateLimiter(1), "k"), Part(Counter(0))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads running
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            signal.alarm(20)  # never outlive the test
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                table = KeyedRateLimiter(1, burst=1)
                assert not check_together([Part(table, "k"), Part(Counter(0))])
                code = 0 if counts(table) == (0, 1, 0, 0) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "1: a warning or an error, 2: not counted"
