"""The shared in-flight limiters against the pure-Python model (``concurrency_model.py``).

One process, random sequences of calls: ``try_acquire``, ``acquire`` with a short timeout,
places taken in line (the place an ``acquire_async`` keeps), releases, leases dropped without
release, places looked at or given up, and resizes. After every call the shared limiter must
agree with the model: the same tokens (one limit), the same waiters seated or refused, and the
same counts. The keyed limiter is run with one model per key in a table small enough to be
full; its tokens come from one counter for the whole table, so they are checked to grow.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from concurrency_model import Model, Refused
from protocol_in_code.qos import (
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
    SharedLease,
)

LIMITS = st.integers(1, 6)
COUNTS = st.integers(0, 7)
PICKS = st.integers(0, 50)
OPERATIONS = st.one_of(
    st.tuples(st.just("try"), COUNTS),
    st.tuples(st.just("acquire"), COUNTS),
    st.tuples(st.just("ask"), COUNTS),
    st.tuples(st.just("release"), PICKS),
    st.tuples(st.just("drop"), PICKS),
    st.tuples(st.just("take"), PICKS),
    st.tuples(st.just("leave"), PICKS),
    st.tuples(st.just("resize"), st.integers(0, 7)),
)

NAMES = itertools.count()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seats")
    path.chmod(0o700)
    return path


def fresh_name() -> str:
    return f"model-{next(NAMES)}"


class Run:
    """One limit (or one key of a keyed limit) driven beside its model. With ``tokens`` the
    limiter's tokens are the model's; without, they only have to be given where the model
    gives one, never twice, and a lease seated at once has a token greater than every token
    granted before it (``seen``, shared by the keys of one table)."""

    def __init__(self, limit: int, key: tuple[Any, ...] = (), *, tokens: bool = True) -> None:
        self.model = Model(limit)
        self.key = key
        self.tokens = tokens
        self.seen: set[int] = set()
        self.leases: list[tuple[SharedLease, int]] = []
        self.waiters: list[tuple[Any, str]] = []
        self.names = 0

    def lease(
        self, lease: SharedLease | None, token: int | None, n: int, *, now: bool = True
    ) -> None:
        assert (lease is None) == (token is None)
        if lease is None:
            return
        if self.tokens:
            assert lease.token == token
        assert lease.token not in self.seen
        if now:
            assert lease.token > max(self.seen, default=0)
        self.seen.add(lease.token)
        assert lease.n == n and not lease.released
        self.leases.append((lease, n))

    def step(self, limiter: Any, operation: str, value: int) -> None:
        model = self.model
        if operation in ("try", "acquire", "ask"):
            if not 1 <= value <= model.limit:
                with pytest.raises(ValueError, match=f"n={value}|n must be"):
                    limiter.try_acquire(*self.key, value)
                with pytest.raises(Refused):
                    model.try_acquire(value)
            elif operation == "try":
                self.lease(limiter.try_acquire(*self.key, value), model.try_acquire(value), value)
            elif operation == "acquire":
                token = model.ask("acquire", value)
                if token is None:
                    assert model.leave("acquire") is None
                self.lease(limiter.acquire(*self.key, value, timeout=0.001), token, value)
            else:
                name = f"w{self.names}"
                self.names += 1
                asked = limiter._ask(*self.key, value)
                token = model.ask(name, value)
                if isinstance(asked, SharedLease):
                    self.lease(asked, token, value)
                else:
                    assert token is None and asked is not None
                    self.waiters.append((asked, name))
        elif operation in ("release", "drop") and self.leases:
            lease, n = self.leases.pop(value % len(self.leases))
            if operation == "release":
                lease.release()
                lease.release()  # harmless
                assert lease.released
            del lease  # the last reference: dropped here, giving its seats back if still held
            model.release(n)
        elif operation in ("take", "leave") and self.waiters:
            waiter, name = self.waiters[value % len(self.waiters)]
            if operation == "take" and model.decided.get(name) is None:
                assert waiter._take() is None
                return
            self.waiters.remove((waiter, name))
            expected = model.decided.pop(name) if operation == "take" else model.leave(name)
            call = waiter._take if operation == "take" else waiter._leave
            if expected == "refused":
                with pytest.raises(ValueError, match="more than the limit"):
                    call()
            else:
                got = call()  # seated when seats were given back, perhaps before later grants
                self.lease(got, expected, got.n if got is not None else 0, now=False)
        elif operation == "resize":
            if value < 1:
                with pytest.raises(ValueError, match="limit must be at least 1, not 0"):
                    limiter.resize(value)
            else:
                limiter.resize(value)
                model.resize(value)

    def in_use(self) -> bool:
        return bool(self.model.held or self.model.line)


@settings(max_examples=150, deadline=None)
@given(limit=LIMITS, operations=st.lists(OPERATIONS, max_size=40))
def test_one_shared_limit_follows_the_model(
    folder: Path, limit: int, operations: list[tuple[str, int]]
) -> None:
    limiter = SharedConcurrencyLimiter(fresh_name(), limit, path=folder)
    run = Run(limit)
    for operation, value in operations:
        run.step(limiter, operation, value)
        assert limiter.in_flight == run.model.held
        assert limiter.waiting == len(run.model.line)
        assert limiter.limit == run.model.limit
    run.leases.clear()
    run.waiters.clear()
    assert (limiter.in_flight, limiter.waiting) == (0, 0)
    limiter.remove()


KEYS = ("a", "b", 3)


@settings(max_examples=100, deadline=None)
@given(
    limit=LIMITS,
    max_keys=st.integers(1, 3),
    operations=st.lists(st.tuples(st.sampled_from(KEYS), OPERATIONS), max_size=40),
)
def test_shared_keyed_limits_follow_one_model_per_key_in_a_bounded_table(
    folder: Path, limit: int, max_keys: int, operations: list[tuple[Any, tuple[str, int]]]
) -> None:
    limiter = SharedKeyedConcurrencyLimiter(fresh_name(), limit, max_keys=max_keys, path=folder)
    runs = {key: Run(limit, (key,), tokens=False) for key in KEYS}
    seen: set[int] = set()  # one counter for the whole table: every key's tokens keep growing
    for run in runs.values():
        run.seen = seen
    for key, (operation, value) in operations:
        run = runs[key]
        in_use = {k for k, r in runs.items() if r.in_use()}
        if operation == "resize":  # every key's limit
            if value >= 1:
                limiter.resize(value)
                for each in runs.values():
                    each.model.resize(value)
            continue
        full = key not in in_use and len(in_use) >= max_keys
        if full and operation in ("try", "acquire", "ask") and 1 <= value <= run.model.limit:
            # A new key in a full table is refused, taking nothing; a task asks again later.
            assert limiter.try_acquire(key, value) is None
            assert limiter.acquire(key, value, timeout=0.001) is None
            assert limiter._ask(key, value) is None
            continue
        run.step(limiter, operation, value)
        assert len(limiter) == sum(r.in_use() for r in runs.values())
        assert limiter.in_flight == sum(r.model.held for r in runs.values())
        assert limiter.waiting == sum(len(r.model.line) for r in runs.values())
    for run in runs.values():
        run.leases.clear()
        run.waiters.clear()
    assert (limiter.in_flight, limiter.waiting, len(limiter)) == (0, 0, 0)
    limiter.remove()
