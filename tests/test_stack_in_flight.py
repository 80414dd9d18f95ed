"""In-flight limits in a stacked request (issue 35): seats and tokens, taken all or none.

An in-flight limiter is a part of ``check_together`` as a rate limiter is. The request is
allowed only if every rate part has its tokens and every in-flight part its seats; then the
answer holds the leases, given back by ``release()`` or by leaving ``with``. Otherwise nothing
stays taken: every ``in_flight`` and every rate balance is as before the call.

The contract is checked against a model (a count of tokens and seats per bucket, with no
clock: the rates refill one token an hour), in threads, under asyncio cancels at random
moments, and with in-flight limiters of one's own written against the interfaces only.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.stack")

from protocol_in_code.qos import (
    ConcurrencyLimiter,
    Decision,
    KeyedConcurrencyLimiter,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
)
from protocol_in_code.qos.interfaces import (
    AsyncInFlightLimiter,
    AsyncLease,
    InFlightLimiter,
    SeatLease,
)
from protocol_in_code.qos.stack import Part, check_together, check_together_async

HOUR = 3600
SECOND = 1_000_000_000


class OwnRate:
    """A rate limiter of one's own (asked part by part): ``left`` tokens, no refill."""

    def __init__(self, left: int) -> None:
        self.left = left

    def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        if n > self.left:
            return Decision(LimitOutcome.DENIED, SECOND, self.left)
        self.left -= n
        return Decision(LimitOutcome.ALLOWED, 0, self.left)

    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        allowed = n <= self.left
        return Decision(
            LimitOutcome.ALLOWED if allowed else LimitOutcome.DENIED,
            0 if allowed else SECOND,
            self.left,
        )

    def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        self.left += n


class AsyncOwnRate:
    """:class:`OwnRate` whose every call first waits ``delay`` (a round trip): a call cancelled
    during the wait does nothing."""

    def __init__(self, left: int, delay: float = 0.001) -> None:
        self.rate = OwnRate(left)
        self.delay = delay

    async def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
        await asyncio.sleep(self.delay)
        return self.rate.check(n)

    async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision:
        await asyncio.sleep(self.delay)
        return self.rate.peek(n)

    async def refund(self, n: int = 1, now_ns: int | None = None) -> None:
        await asyncio.sleep(self.delay)
        self.rate.refund(n)


class OwnSeats:
    """An in-flight limiter of one's own (the interfaces' ``InFlightLimiter``), one limit or
    one per key: its leases give nothing back unless released (as a lease on a server would
    not, dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: Counter[Any] = Counter()

    @property
    def in_flight(self) -> int:
        return sum(self.held.values())

    def try_acquire(self, *key_and_n: Any) -> OwnSeatLease | None:
        key, n = key_and_n if len(key_and_n) == 2 else (None, *key_and_n)
        if n < 1:
            raise ValueError(f"n must be at least 1, not {n}")
        if self.held[key] + n > self.limit:
            return None
        self.held[key] += n
        return OwnSeatLease(self, key, n)

    def acquire(self, *key_and_n: Any, timeout: float | None = None) -> OwnSeatLease | None:
        return self.try_acquire(*key_and_n)

    async def acquire_async(self, *key_and_n: Any, timeout: float | None = None) -> Any:
        return self.try_acquire(*key_and_n)


class OwnSeatLease:
    """:class:`OwnSeats`' lease (a ``SeatLease``): released once, twice harmlessly."""

    def __init__(self, seats: OwnSeats, key: Any, n: int) -> None:
        self.seats, self.key, self.n, self.token = seats, key, n, 0
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.seats.held[self.key] -= self.n

    def __enter__(self) -> OwnSeatLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class AsyncSeats:
    """An asyncio in-flight limiter of one's own (the interfaces' ``AsyncInFlightLimiter``):
    every call waits ``delay`` first, then seats or releases at once."""

    def __init__(self, limit: int, delay: float = 0.001) -> None:
        self.limit = limit
        self.held = 0
        self.delay = delay
        self.tokens = 0

    async def try_acquire(self, n: int = 1) -> AsyncSeatLease | None:
        await asyncio.sleep(self.delay)
        if self.held + n > self.limit:
            return None
        self.held += n
        self.tokens += 1
        return AsyncSeatLease(self, n, self.tokens)

    async def acquire(self, n: int = 1, timeout: float | None = None) -> AsyncSeatLease | None:
        return await self.try_acquire(n)


class AsyncSeatLease:
    """:class:`AsyncSeats`' lease: released by awaiting (a round trip), twice harmlessly."""

    def __init__(self, seats: AsyncSeats, n: int, token: int) -> None:
        self.seats, self.n, self.token = seats, n, token
        self.released = False

    async def release(self) -> None:
        await asyncio.sleep(self.seats.delay)
        if not self.released:
            self.released = True
            self.seats.held -= self.n

    async def __aenter__(self) -> AsyncSeatLease:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


def test_the_test_limiters_fit_the_interfaces() -> None:
    own = OwnSeats(1)
    assert isinstance(own, InFlightLimiter)
    assert isinstance(OwnSeatLease(own, None, 1), SeatLease)
    seats = AsyncSeats(1)
    assert isinstance(seats, AsyncInFlightLimiter)
    assert isinstance(AsyncSeatLease(seats, 1, 1), AsyncLease)


# ---------------------------------------------------------------------------------------------
# The answer and its leases
# ---------------------------------------------------------------------------------------------


def test_an_allowed_stack_holds_its_seats_until_released() -> None:
    rate = RateLimiter(1, burst=10, per=HOUR)
    seats, per_client = ConcurrencyLimiter(2), KeyedConcurrencyLimiter(1)
    stacked = check_together([Part(rate), Part(seats, n=2), Part(per_client, "client-7")])
    assert stacked
    assert [lease.n for lease in stacked.leases] == [2, 1]
    assert (seats.in_flight, per_client.in_flight, rate.available()) == (2, 1, 9)
    stacked.release()
    assert (seats.in_flight, per_client.in_flight) == (0, 0)
    stacked.release()  # twice is harmless
    assert (seats.in_flight, per_client.in_flight, rate.available()) == (0, 0, 9)


def test_a_stack_is_a_context_manager_that_gives_its_seats_back() -> None:
    seats = ConcurrencyLimiter(1)
    with check_together([Part(RateLimiter(1, burst=10, per=HOUR)), Part(seats)]) as stacked:
        assert stacked and seats.in_flight == 1
    assert seats.in_flight == 0
    with pytest.raises(KeyError), check_together([Part(seats)]):
        raise KeyError("the block failed")
    assert seats.in_flight == 0


def test_a_stack_of_rate_parts_only_holds_no_lease() -> None:
    stacked = check_together([Part(RateLimiter(1, burst=10, per=HOUR))])
    assert stacked and stacked.leases == ()
    with stacked:
        pass


def test_a_rate_refusal_holds_no_seat() -> None:
    rate = RateLimiter(1, burst=1, per=HOUR)
    seats = ConcurrencyLimiter(3)
    first = check_together([Part(rate), Part(seats)])  # the only token, and one seat
    assert first
    refused = check_together([Part(rate), Part(seats)])
    assert not refused and refused.leases == ()
    assert seats.in_flight == 1
    assert [d.outcome for d in refused.parts] == [LimitOutcome.DENIED, LimitOutcome.ALLOWED]
    assert refused.parts[1].remaining == 2  # the seats left free, as far as it can say


def test_a_seat_refusal_gives_the_rate_tokens_back() -> None:
    native = RateLimiter(1, burst=5, per=HOUR)
    mine = OwnRate(5)  # asked part by part: taken, then given back
    seats = ConcurrencyLimiter(1)
    held = seats.try_acquire()
    refused = check_together([Part(native), Part(mine), Part(seats)])
    assert not refused and refused.leases == ()
    assert refused.decision.outcome is LimitOutcome.REFUSED
    assert refused.parts[2] == Decision(LimitOutcome.REFUSED, 0, 0)
    assert (native.available(), mine.left, seats.in_flight) == (5, 5, 1)
    assert held is not None
    held.release()
    assert check_together([Part(native), Part(mine), Part(seats)])


def test_the_seats_free_are_never_read_from_a_limiter_behind_a_server() -> None:
    """A limiter that declares ``blocks`` (its calls are round trips) is asked once per part,
    with ``try_acquire``: its ``in_flight`` is not read to say what remains."""

    class BehindAServer(OwnSeats):
        reads = 0
        blocks = ("an in-flight limiter behind a server", "use its asyncio form")

        @property
        def in_flight(self) -> int:
            BehindAServer.reads += 1
            return super().in_flight

    seats = BehindAServer(1)
    with check_together([Part(seats)]) as stacked:
        assert stacked.parts[0] == Decision(LimitOutcome.ALLOWED, 0, 0)
        refused = check_together([Part(OwnRate(0)), Part(seats)])
        assert not refused
    assert BehindAServer.reads == 0


def test_seats_are_taken_before_the_rate_parts_of_other_stores() -> None:
    """A seat comes back exactly, a token given back late only up to the burst: a refused seat
    must find the other stores' rate parts not yet taken (only asked, with ``peek``)."""
    calls: list[str] = []

    class Recorded(OwnRate):
        def check(self, n: int = 1, now_ns: int | None = None) -> Decision:
            calls.append("check")
            return super().check(n, now_ns)

        def refund(self, n: int = 1, now_ns: int | None = None) -> None:
            calls.append("refund")
            super().refund(n, now_ns)

    seats = ConcurrencyLimiter(1)
    held = seats.try_acquire()
    assert not check_together([Part(Recorded(5)), Part(seats)])
    assert calls == []
    assert held is not None
    held.release()
    with check_together([Part(Recorded(5)), Part(seats)]):
        assert calls == ["check"]


def test_a_later_rate_refusal_gives_the_seats_back() -> None:
    seats, per_client = ConcurrencyLimiter(2), KeyedConcurrencyLimiter(2)
    refused = check_together([Part(seats), Part(per_client, "k"), Part(OwnRate(0))])
    assert not refused and refused.leases == ()
    assert (seats.in_flight, per_client.in_flight) == (0, 0)
    # Seats were taken and given back: they say what they answered when taken.
    assert [d.outcome for d in refused.parts[:2]] == [LimitOutcome.ALLOWED] * 2


def test_more_seats_than_the_limit_is_never() -> None:
    seats = ConcurrencyLimiter(2)
    refused = check_together([Part(RateLimiter(1, burst=5, per=HOUR)), Part(seats, n=3)])
    assert refused.decision.outcome is LimitOutcome.NEVER
    assert refused.parts[1].wait_ns is None
    seats.resize(3)
    assert check_together([Part(seats, n=3)])


def test_two_parts_of_one_limit_need_their_seats_together() -> None:
    seats = ConcurrencyLimiter(3)
    assert not check_together([Part(seats, n=2), Part(seats, n=2)])
    assert seats.in_flight == 0
    with check_together([Part(seats, n=2), Part(seats)]):
        assert seats.in_flight == 3


def test_an_in_flight_part_takes_no_plan() -> None:
    seats = ConcurrencyLimiter(1)
    with pytest.raises(TypeError, match=r"parts\[0\]: an in-flight limiter has no plans"):
        check_together([Part(seats, None, 1, "gold")])
    assert seats.in_flight == 0


def test_a_bad_seat_part_raises_before_anything_is_taken() -> None:
    rate, seats = OwnRate(5), OwnSeats(2)
    with pytest.raises(ValueError, match=r"parts\[2\]: n must be at least 1, not 0"):
        check_together([Part(rate), Part(seats, "k"), Part(seats, "k", 0)])
    with pytest.raises(TypeError, match=r"parts\[1\]: n must be an int, not 1.5"):
        check_together([Part(rate), Part(seats, "k", 1.5)])
    assert (rate.left, seats.in_flight) == (5, 0)


class Down:
    """An in-flight limiter whose store is down: every take raises."""

    limit = 10

    def try_acquire(self, n: int = 1) -> Any:
        raise ConnectionError("the store is down")


@pytest.mark.parametrize("seats", [ConcurrencyLimiter(2), OwnSeats(2)], ids=type)
def test_a_seat_part_that_raises_leaves_nothing_held(seats: Any) -> None:
    rate = OwnRate(5)
    with pytest.raises(ConnectionError):
        check_together([Part(rate), Part(seats), Part(Down())])
    assert (rate.left, seats.in_flight) == (5, 0)

    async def main() -> None:
        with pytest.raises(ConnectionError):
            await check_together_async([Part(rate), Part(seats), Part(Down())])

    asyncio.run(main())
    assert (rate.left, seats.in_flight) == (5, 0)


def test_an_asyncio_in_flight_part_must_be_awaited() -> None:
    seats = AsyncSeats(1)
    with pytest.raises(TypeError, match="use check_together_async"):
        check_together([Part(seats)])
    assert seats.held == 0


def test_leases_released_by_awaiting_need_release_async() -> None:
    async def main() -> None:
        seats, native = AsyncSeats(2), ConcurrencyLimiter(1)
        stacked = await check_together_async([Part(seats), Part(native)])
        assert stacked and (seats.held, native.in_flight) == (1, 1)
        with pytest.raises(TypeError, match="release_async"):
            stacked.release()
        assert (seats.held, native.in_flight) == (1, 1)  # nothing released by the refusal
        await stacked.release_async()
        assert (seats.held, native.in_flight) == (0, 0)
        async with await check_together_async([Part(seats, n=2), Part(native)]) as held:
            assert held and (seats.held, native.in_flight) == (2, 1)
        assert (seats.held, native.in_flight) == (0, 0)

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# All or none, against a model
# ---------------------------------------------------------------------------------------------

LIMIT = 3  # seats of every in-flight limit (per key for a keyed one)
BURST = 6  # tokens of every rate limit
KEYS = ("a", "b")


class World:
    """Every limiter a step may name, and the model: tokens left and seats held per bucket."""

    def __init__(self) -> None:
        self.rates: list[Any] = [
            RateLimiter(1, burst=BURST, per=HOUR),
            KeyedRateLimiter(1, burst=BURST, per=HOUR),
            OwnRate(BURST),
        ]
        self.seats: list[Any] = [
            ConcurrencyLimiter(LIMIT),
            KeyedConcurrencyLimiter(LIMIT),
            OwnSeats(LIMIT),  # keyed: its leases give nothing back unless released
        ]
        self.tokens: Counter[tuple[int, str | None]] = Counter()  # taken, by bucket
        self.held: Counter[tuple[int, str | None]] = Counter()  # seats held, by bucket

    def part(self, spec: tuple[bool, int, str, int]) -> tuple[Part, tuple[int, str | None]]:
        seat, which, key, n = spec
        limiters = self.seats if seat else self.rates
        index = which % len(limiters)
        limiter = limiters[index]
        keyed = isinstance(limiter, (KeyedRateLimiter, KeyedConcurrencyLimiter, OwnSeats))
        bucket = (index + (100 if seat else 0), key if keyed else None)
        return Part(limiter, key if keyed else None, n), bucket

    def balances(self) -> tuple[list[int], list[int]]:
        """Every rate bucket's tokens left and every in-flight limiter's seats held, read."""
        native, keyed, mine = self.rates
        tokens = [native.available(), *(keyed.available(k) for k in KEYS), mine.left]
        return tokens, [limiter.in_flight for limiter in self.seats]

    def modelled(self) -> tuple[list[int], list[int]]:
        left = [BURST - self.tokens[(0, None)]]
        left += [BURST - self.tokens[(1, k)] for k in KEYS] + [BURST - self.tokens[(2, None)]]
        held = [self.held[(100, None)]]
        held += [sum(self.held[(index, k)] for k in KEYS) for index in (101, 102)]
        return left, held


part_specs = st.tuples(st.booleans(), st.integers(0, 2), st.sampled_from(KEYS), st.integers(1, 4))
steps = st.lists(
    st.one_of(st.lists(part_specs, min_size=1, max_size=4), st.integers(0, 7)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_a_stack_with_in_flight_parts_is_all_or_none_as_the_model_says(
    plan: list[Any],
) -> None:
    world = World()
    holding: list[tuple[Any, Counter[tuple[int, str | None]]]] = []
    for step in plan:
        if isinstance(step, int):  # release a held stack, if any
            if holding:
                stacked, seats = holding.pop(step % len(holding))
                with stacked:
                    pass
                world.held -= seats
        else:
            parts, buckets = zip(*(world.part(spec) for spec in step), strict=True)
            need: Counter[tuple[int, str | None]] = Counter()
            for part, bucket in zip(parts, buckets, strict=True):
                need[bucket] += part.n
            before = world.balances()
            fits = all(
                world.tokens[b] + n <= BURST if b[0] < 100 else world.held[b] + n <= LIMIT
                for b, n in need.items()
            )
            stacked = check_together(list(parts))
            assert bool(stacked) == fits, (step, stacked)
            if stacked:
                seats = Counter({b: n for b, n in need.items() if b[0] >= 100})
                world.tokens += Counter({b: n for b, n in need.items() if b[0] < 100})
                world.held += seats
                holding.append((stacked, seats))
                assert len(stacked.leases) == sum(1 for b in buckets if b[0] >= 100)
            else:
                assert stacked.leases == ()
                assert world.balances() == before, "a refused stack left something taken"
        assert world.balances() == world.modelled()
    for stacked, _ in holding:
        stacked.release()
    assert world.balances()[1] == [0, 0, 0]


# ---------------------------------------------------------------------------------------------
# Threads, and asyncio cancels
# ---------------------------------------------------------------------------------------------


def test_threads_stacking_seats_never_hold_more_than_the_limit() -> None:
    threads, rounds, limit = 8, 300, 3
    rate = RateLimiter(1, burst=threads * rounds, per=HOUR)
    seats, per_client = ConcurrencyLimiter(limit), KeyedConcurrencyLimiter(2)
    mine = OwnRate(threads * rounds // 2)  # refuses half way: seats taken, then given back
    lock = threading.Lock()
    holding, most, allowed = 0, 0, 0

    def work(seed: int) -> None:
        nonlocal holding, most, allowed
        rng = random.Random(seed)
        for _ in range(rounds):
            parts = [Part(rate), Part(seats), Part(per_client, rng.choice(KEYS)), Part(mine)]
            with check_together(parts) as stacked:
                if stacked:
                    with lock:
                        holding += 1
                        most = max(most, holding)
                        allowed += 1
                    time.sleep(0)
                    with lock:
                        holding -= 1

    with qos_support.watchdog(120), qos_support.switch_interval(1e-6):
        pool = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    assert 0 < allowed <= threads * rounds // 2
    assert most <= limit
    assert (seats.in_flight, per_client.in_flight) == (0, 0)
    assert rate.available() == threads * rounds - allowed
    assert mine.left == threads * rounds // 2 - allowed


def test_cancelled_asyncio_stacks_hold_nothing() -> None:
    """Stacks cancelled at random moments: before anything is taken, while seats are held and
    a rate part is awaited, inside a give-back, or while the request holds its leases. Once
    the give-backs left running have landed, no seat is held and every token taken belongs to
    a stack that was allowed."""
    stacks, wave, burst = 300, 10, 10_000

    async def main() -> tuple[int, int, list[int]]:
        rng = random.Random(35)
        native = RateLimiter(1, burst=burst, per=HOUR)
        mine = AsyncOwnRate(stacks // 3)  # runs out: later stacks give their seats back
        # The asyncio seats are taken first, then the in-process ones refuse some: the asyncio
        # lease is given back, awaited, while the cancels land.
        seats, local = AsyncSeats(6), ConcurrencyLimiter(4)
        parts = [Part(native), Part(seats), Part(local), Part(mine)]
        allowed = cancelled = 0

        async def request() -> None:
            nonlocal allowed
            stacked = await check_together_async(parts)
            if stacked:
                allowed += 1
                async with stacked:
                    await asyncio.sleep(0.001)

        started = time.monotonic()
        await asyncio.gather(*(request() for _ in range(wave)))
        lasts = time.monotonic() - started

        async def one() -> None:
            nonlocal cancelled
            try:
                await asyncio.wait_for(request(), rng.uniform(0, lasts))
            except asyncio.TimeoutError:
                cancelled += 1

        for _ in range(stacks // wave):
            await asyncio.gather(*(one() for _ in range(wave)))
        deadline = time.monotonic() + 10  # a bound on a hang, not a speed

        def levels() -> list[int]:
            return [seats.held, local.in_flight, burst - native.available() - allowed]

        while levels() != [0, 0, 0] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return allowed, cancelled, [*levels(), stacks // 3 - mine.rate.left - allowed]

    with qos_support.watchdog(120):
        allowed, cancelled, levels = asyncio.run(main())
    assert cancelled > 30, "the cancels must land all along the stacks"
    assert allowed > 0
    assert levels == [0, 0, 0, 0], "seats held, or tokens spent, for requests that never ran"
