"""The native in-flight limiters against the pure-Python model (``concurrency_model.py``).

Random sequences of calls on one thread: ``try_acquire``, ``acquire`` with a short timeout,
waiters that stand in line (the place an ``acquire_async`` takes, told through a callable),
releases, leases dropped without release, waiters that give up, and resizes. After every call
the limiter must agree with the model: the same tokens, the same waiters seated or refused, and
the same counts. The keyed limiter is run the same way, one model per key, with a table small
enough to be full.
"""

from __future__ import annotations

from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.concurrency")

from concurrency_model import Model, Refused
from protocol_in_code.qos import ConcurrencyLimiter, KeyedConcurrencyLimiter, Lease

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


class Run:
    """One limit (or one key of a keyed limit) driven beside its model."""

    def __init__(self, limit: int, key: tuple[Any, ...] = ()) -> None:
        self.model = Model(limit)
        self.key = key
        self.leases: list[tuple[Lease, int]] = []
        self.waiters: list[tuple[Any, str]] = []
        self.woken: set[str] = set()
        self.names = 0

    def lease(self, lease: Lease | None, token: int | None, n: int) -> None:
        assert (None if lease is None else lease.token) == token
        if lease is not None:
            assert lease.n == n and not lease.released
            self.leases.append((lease, n))

    def step(self, limiter: Any, operation: str, value: int) -> None:
        model = self.model
        if operation in ("try", "acquire", "ask"):
            raises = not 1 <= value <= model.limit
            if raises:
                with pytest.raises(ValueError, match=f"n={value}|n must be"):
                    limiter.try_acquire(*self.key, value)
                with pytest.raises(Refused):
                    model.try_acquire(value)
            elif operation == "try":
                self.lease(limiter.try_acquire(*self.key, value), model.try_acquire(value), value)
            elif operation == "acquire":
                # Alone on this thread, a waiter can only give up: in line, then out again.
                token = model.ask("acquire", value)
                if token is None:
                    assert model.leave("acquire") is None
                self.lease(limiter.acquire(*self.key, value, timeout=0.001), token, value)
            else:
                name = f"w{self.names}"
                self.names += 1
                asked = limiter._ask(*self.key, value, lambda name=name: self.woken.add(name))
                token = model.ask(name, value)
                if isinstance(asked, Lease):
                    self.lease(asked, token, value)
                else:
                    assert token is None
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
            decided = model.decided.get(name)
            if operation == "take" and decided is None:
                assert waiter._take() is None
                return
            self.waiters.remove((waiter, name))
            expected = model.decided.pop(name) if operation == "take" else model.leave(name)
            call = waiter._take if operation == "take" else waiter._leave
            if expected == "refused":
                with pytest.raises(ValueError, match="more than the limit"):
                    call()
            else:
                got = call()
                self.lease(got, expected, got.n if got is not None else 0)  # type: ignore[arg-type]
        elif operation == "resize":
            if value < 1:
                with pytest.raises(ValueError, match="limit must be at least 1, not 0"):
                    limiter.resize(value)
            else:
                limiter.resize(value)
                model.resize(value)
        # Told: every waiter the model decided for, and none still in line.
        assert set(model.decided) <= self.woken
        assert not {name for name, _ in model.line} & self.woken

    def in_use(self) -> bool:
        return bool(self.model.held or self.waiters)


@settings(max_examples=200, deadline=None)
@given(limit=LIMITS, operations=st.lists(OPERATIONS, max_size=40))
def test_one_limit_follows_the_model(limit: int, operations: list[tuple[str, int]]) -> None:
    limiter = ConcurrencyLimiter(limit)
    run = Run(limit)
    for operation, value in operations:
        run.step(limiter, operation, value)
        assert limiter.in_flight == run.model.held
        assert limiter.waiting == len(run.model.line)
        assert limiter.limit == run.model.limit
    # Everyone gone: nothing held, nobody waiting.
    run.leases.clear()
    run.waiters.clear()
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


KEYS = ("a", "b", 3)


@settings(max_examples=150, deadline=None)
@given(
    limit=LIMITS,
    max_keys=st.integers(1, 3),
    operations=st.lists(st.tuples(st.sampled_from(KEYS), OPERATIONS), max_size=40),
)
def test_keyed_limits_follow_one_model_per_key_in_a_bounded_table(
    limit: int, max_keys: int, operations: list[tuple[Any, tuple[str, int]]]
) -> None:
    limiter = KeyedConcurrencyLimiter(limit, max_keys=max_keys)
    runs = {key: Run(limit, (key,)) for key in KEYS}
    tokens_from = 1  # a key made again goes on past every forgotten key's tokens
    for key, (operation, value) in operations:
        run = runs[key]
        in_use = {k for k, r in runs.items() if r.in_use()}
        if key not in in_use:
            run.model.next_token = tokens_from
        if operation == "resize":  # every key's limit
            if value >= 1:
                limiter.resize(value)
                for each in runs.values():
                    each.model.resize(value)
            continue
        if key not in in_use and len(in_use) >= max_keys and operation in ("try", "acquire"):
            # A new key in a full table is refused, taking nothing (acquire waits for room).
            if 1 <= value <= run.model.limit:
                assert limiter.try_acquire(key, value) is None
                assert limiter.acquire(key, value, timeout=0.001) is None
            continue
        if key not in in_use and len(in_use) >= max_keys and operation == "ask":
            continue
        run.step(limiter, operation, value)
        if not run.in_use():
            tokens_from = max(tokens_from, run.model.next_token)
        assert len(limiter) == sum(r.in_use() for r in runs.values())
        assert limiter.in_flight == sum(r.model.held for r in runs.values())
        assert limiter.waiting == sum(len(r.model.line) for r in runs.values())
    for run in runs.values():
        run.leases.clear()
        run.waiters.clear()
    assert (limiter.in_flight, limiter.waiting, len(limiter)) == (0, 0, 0)
