"""A pickled limiter restored after a reboot, or on another machine, waits no longer than its
balances need.

With the default clock, a limiter's settlement times are readings of the monotonic clock,
which mean something only on the boot of the machine they were read on. A pickle records that
boot (Linux's boot id); restored on another boot, the limiter's last settlement moves to the
restoring clock's now, and every other time with it, so its balances take up refilling where
they were. Restored on the same boot, or with a clock of the caller's, the times are kept.

Another machine is simulated by editing the pickle's state: another boot id, and times read on
a clock days ahead of (or behind) this one.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest
from limiter_model import FakeClock
from protocol_in_code.qos import KeyedRateLimiter, LimitOutcome, RateLimiter

SECOND = 10**9
DAYS = 86_400 * SECOND

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the boot id is read on Linux"
)


def moved(state: list[tuple[int, int | None]], by: int) -> list[tuple[int, int | None]]:
    return [(units, None if at is None else at + by) for units, at in state]


@pytest.mark.parametrize("other_clock", [+12 * DAYS, -12 * DAYS, +50 * 365 * DAYS])
def test_a_limiter_from_another_machine_waits_only_for_its_refill(other_clock: int) -> None:
    limiter = RateLimiter(1, burst=10)
    assert limiter.acquire(10)  # empty: ten seconds to full, one to the next token
    rebuild, args, (balances, attributes, origin, _clock) = limiter.__reduce__()
    assert isinstance(origin, str) and origin
    restored = rebuild(*args)
    restored.__setstate__((moved(balances, other_clock), attributes, "another-machine"))
    decision = restored.check()
    assert decision.outcome is LimitOutcome.DENIED
    assert 0 < decision.wait_ns <= SECOND, decision
    assert restored.available() == 0


def test_the_same_boot_keeps_the_times() -> None:
    limiter = RateLimiter(1, burst=10)
    assert limiter.acquire(10)
    restored = pickle.loads(pickle.dumps(limiter))
    assert restored.__reduce__()[2][0] == limiter.__reduce__()[2][0]


def test_an_older_pickle_without_an_origin_keeps_its_times() -> None:
    limiter = RateLimiter(1, burst=10, start_ns=0)
    limiter.check(10, now_ns=0)
    rebuild, args, (balances, attributes, _origin, _clock) = limiter.__reduce__()
    restored = rebuild(*args)
    restored.__setstate__((balances, attributes))
    assert restored.check(now_ns=0).wait_ns == SECOND


def test_a_clock_of_the_callers_keeps_its_times() -> None:
    limiter = RateLimiter(1, burst=10, clock=FakeClock(5 * SECOND))
    limiter.check(10)
    rebuild, args, (balances, attributes, origin, _clock) = limiter.__reduce__()
    assert origin is None
    restored = rebuild(*args)
    restored.__setstate__((balances, attributes, "another-machine"))
    assert restored.check(now_ns=5 * SECOND).wait_ns == SECOND


@pytest.mark.parametrize("other_clock", [+12 * DAYS, -12 * DAYS])
def test_a_keyed_table_from_another_machine_waits_only_for_its_refill(other_clock: int) -> None:
    table = KeyedRateLimiter(1, burst=10, max_keys=10)
    assert table.acquire("throttled", 10)
    rebuild, args, (state, attributes) = table.__reduce__()
    seed, entries, latest, counts, origin = state
    assert isinstance(origin, str) and origin
    entries: Any = [(key, number, moved(bands, other_clock)) for key, number, bands in entries]
    restored = rebuild(*args)
    restored.__setstate__(
        ((seed, entries, latest + other_clock, counts, "another-machine"), attributes)
    )
    decision = restored.check("throttled")
    assert decision.outcome is LimitOutcome.DENIED
    assert 0 < decision.wait_ns <= SECOND, decision
    assert restored.check("new client").outcome is LimitOutcome.ALLOWED
