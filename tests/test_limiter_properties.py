"""Property tests of ``protocol_in_code.qos.limiter.RateLimiter`` against the Fraction model.

* Differential: random configurations (1-3 bands; rates as int, Fraction, Decimal, str and
  float; per; bursts; initial; start_ns or not) and random operation sequences with explicit
  ``now_ns`` (equal times, backwards times, jumps of up to 2**62 ns and to the ends of the 64-bit
  range, and times exactly at or one nanosecond around the last wait): every answer, and
  ``available`` after every step, equal the model's (``tests/limiter_model.py``).
* The exactness claims of issue 4, each its own property: a span split into any steps settles
  to what one step gives; after a DENIED with wait w, w - 1 ns later is denied (by exactly 1 ns)
  and w ns later is allowed; bands are all-or-nothing (against the model: after each request on
  several bands, every probe answers as the model's does); a backwards clock adds nothing and
  does not move the settlement point back.
* Pickle and copy keep configuration, state and subclass: the restored limiter answers every
  future operation as the original does.

A limiter's exact per-band state is observed through ``__reduce__()[2]`` (its pickle state),
compared only between two native limiters, never interpreted.
"""

from __future__ import annotations

import copy
import math
import pickle
from decimal import Decimal
from fractions import Fraction
from typing import Any

import qos_support
from hypothesis import assume, example, note
from hypothesis import given as hyp_given
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

import limiter_model as lm
from protocol_in_code.qos.limiter import Band, LimitOutcome, RateLimiter

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
U64_MAX = 2**64 - 1
MUTATING = ("try_acquire", "check", "refund", "settle")
OPS = (*MUTATING, "peek", "available")


class SubLimiter(RateLimiter):
    """A user's subclass: pickle and copy must keep the type."""


def clamp(t: int) -> int:
    return max(I64_MIN, min(I64_MAX, t))


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

mantissas = st.integers(1, 10**6)
exponents = st.integers(0, 6)

rates = st.one_of(
    st.integers(1, 10**6),
    st.builds(Fraction, st.integers(1, 10**6), st.integers(1, 10**4)),
    st.builds(lambda m, e: Decimal(m).scaleb(-e), mantissas, exponents),
    st.builds(lambda m, e: str(Decimal(m).scaleb(-e)), mantissas, exponents),
    st.builds(
        lambda count, unit: f"{count}/{unit}",
        st.integers(1, 10**6),
        st.sampled_from(["second", "minute", "hour", "day", "2 minutes", "5s"]),
    ),
    # floats whose shortest repr has at most 7 significant digits: exact as the repr says
    st.builds(lambda m, e: float(f"{m}e-{e}"), mantissas, exponents),
    st.sampled_from(
        [
            Fraction(1, 10**9),  # one token every ~32 years
            Fraction(1, 3),
            Fraction(7, 11),
            0.1,
            1 / 3,  # 0.3333333333333333 exactly as repr'd
            "1e-9",
            Decimal("0.000001"),
            10**12,
            Fraction(10**9 + 7, 3),
        ]
    ),
)
pers = st.one_of(
    st.none(),
    st.integers(1, 3600),
    st.sampled_from([Fraction(1, 2), 0.25, Decimal("1.5"), "60", Fraction(7, 3), "0.001"]),
)
bursts = st.one_of(st.none(), st.integers(1, 8), st.integers(1, 1000))


@st.composite
def band_args(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    rate, burst, per = draw(rates), draw(bursts), draw(pers)
    if isinstance(rate, str) and "/" in rate:
        per = None  # the rate says its period
    # keep the default burst (ceil of the rate) small enough for requests to matter sometimes
    if burst is None and math.ceil(lm.exact(lm.quota(rate, None)[0])) > 10**6:
        burst = draw(st.integers(1, 1000))
    return rate, burst, per


@st.composite
def configs(draw: st.DrawFn, min_bands: int = 1) -> dict[str, Any]:
    """Keyword arguments for RateLimiter (and limiter_model.model_from)."""
    count = draw(st.integers(min_bands, 3))
    specs = [draw(band_args()) for _ in range(count)]
    # The limiter (and a Band, when made) refuses a rate whose tokens per second need more
    # than 64 bits (numerator or denominator): keep to rates it accepts (the refusal has its
    # own test).
    per_second = [lm.band_spec(*spec)[0] for spec in specs]
    assume(all(max(r.numerator, r.denominator) < 2**64 for r in per_second))
    kwargs: dict[str, Any] = {}
    if count == 1 and draw(st.booleans()):
        rate, burst, per = specs[0]
        kwargs["rate"] = rate
        if burst is not None:
            kwargs["burst"] = burst
        if per is not None:
            kwargs["per"] = per
    else:
        bands: list[Any] = []
        for rate, burst, per in specs:
            if draw(st.booleans()):
                bands.append(Band(rate, burst) if per is None else Band(rate, burst, per))
            elif per is None and draw(st.booleans()):
                bands.append((rate, burst))
            else:
                bands.append((rate, burst, per))  # per None: one per second
        kwargs["bands"] = bands
    smallest = min(lm.band_spec(*spec)[1] for spec in specs)
    if draw(st.booleans()):
        kwargs["initial"] = draw(st.integers(0, min(smallest, 10**6)))
    if draw(st.booleans()):
        kwargs["start_ns"] = draw(st.one_of(st.just(0), st.integers(-(2**62), 2**62)))
    return kwargs


def bursts_of(kwargs: dict[str, Any]) -> list[int]:
    return [burst for _, burst in lm.model_from(**kwargs).band_pairs()]


#: Steps that keep to one clock: however they add up over a scenario, no two times are ten
#: years apart (2**50 ns is 13 days), so no call is refused as read on another clock.
one_clock_steps = st.one_of(
    st.just(("delta", 0)),
    st.tuples(st.just("delta"), st.integers(-(10**6), 10**10)),
    st.tuples(st.just("delta"), st.integers(1, 10**9)),
    st.tuples(st.just("delta"), st.integers(-(2**50), 2**50)),
    st.tuples(st.just("wait"), st.sampled_from([-1, 0, 1])),  # around the last wait_ns
)
#: Any step: jumps of up to 2**62 ns and to the ends of the 64-bit range, most of which a
#: limiter refuses as read on another clock (the model says which).
time_steps = st.one_of(
    one_clock_steps,
    st.tuples(st.just("delta"), st.integers(-(2**62), 2**62)),
    st.tuples(st.just("abs"), st.sampled_from([I64_MIN, I64_MAX, 0, -1, 1])),
)


@st.composite
def scenarios(
    draw: st.DrawFn, min_bands: int = 1, max_ops: int = 25, one_clock: bool = True
) -> tuple[dict, int, list]:
    """A configuration, a first time, and operations ``(name, n, time_step)``: all on one
    clock, or (``one_clock=False``) with times that may be decades apart."""
    kwargs = draw(configs(min_bands))
    burst_list = bursts_of(kwargs)
    small = min(min(burst_list) + 1, 10**6)
    big = min(max(burst_list) + 1, 10**6)
    ns = st.one_of(
        st.integers(0, 3),
        st.integers(0, small),
        st.integers(0, big),
        st.sampled_from([min(burst_list), max(burst_list), max(burst_list) + 1, U64_MAX]),
    )
    start = kwargs.get("start_ns")
    near_start = [st.just(start), st.integers(start - 10**9, start + 10**10)] if start else []
    anywhere = [st.just(0), st.integers(-(2**62), 2**62)]
    if one_clock and start is not None:
        near_start = [st.just(start), st.integers(start - 10**9, start + 10**10)]
    t0 = draw(
        st.one_of(*near_start) if one_clock and near_start else st.one_of(*anywhere, *near_start)
    )
    steps = one_clock_steps if one_clock else time_steps
    ops = draw(st.lists(st.tuples(st.sampled_from(OPS), ns, steps), min_size=0, max_size=max_ops))
    return kwargs, clamp(t0), ops


def next_time(now: int, step: tuple[str, int], last_wait: int | None) -> int:
    kind, value = step
    if kind == "abs":
        return value
    if kind == "wait":  # a wait of decades is never taken up on one clock
        wait = last_wait if last_wait and last_wait <= 2**50 else 0
        return clamp(now + wait + value)
    return clamp(now + value)


def do(limiter: Any, name: str, n: int, now: int) -> Any:
    """One operation on a native limiter or the model, as comparable plain values.

    ``try_acquire`` of more than a band's burst raises ValueError, and so does any call at a
    time more than ten years from the limiter's clock: that is ``("ValueError", None, None)``.
    """
    try:
        return do_or_raise(limiter, name, n, now)
    except ValueError:
        return ("ValueError", None, None)


def costs(n: int) -> tuple[int, int]:
    """``settle``'s reserved and actual costs for a drawn ``n``: n reserved, and an actual cost
    that is the same (n = 0), more (n = 1, 2, 3, 4, 6) or less (n = 5, 7, 8, ...)."""
    return n, n * 7 % 11


def do_or_raise(limiter: Any, name: str, n: int, now: int) -> Any:
    if name == "settle":
        if isinstance(limiter, lm.ModelLimiter):
            return limiter.settle(*costs(n), now)
        return limiter.settle(*costs(n), now_ns=now)
    if isinstance(limiter, lm.ModelLimiter):
        if name == "available":
            return limiter.available(now)
        result = getattr(limiter, name)(n, now)
        if isinstance(result, lm.ModelDecision):
            return (result.outcome, result.wait_ns, result.remaining)
        return result
    if name == "available":
        return limiter.available(now_ns=now)
    result = getattr(limiter, name)(n, now_ns=now)
    if name in ("check", "peek"):
        assert type(result.outcome) is LimitOutcome
        assert result.wait_ns is None or type(result.wait_ns) is int
        assert type(result.remaining) is int
        assert result.allowed is (result.outcome is LimitOutcome.ALLOWED)
        assert bool(result) is result.allowed
        return (result.outcome.value, result.wait_ns, result.remaining)
    return result


def replay(
    kwargs: dict[str, Any], t0: int, ops: list, cls: type = RateLimiter, model: bool = True
) -> tuple:
    """Build a native limiter (and the model, unless ``model=False``) and run ``ops`` on them.

    Returns (native, model or None, last time, latest time seen, whether a mutating call ran).
    """
    limiter = cls(**kwargs)
    twin = lm.model_from(**kwargs) if model else None
    now, latest, mutated, last_wait = t0, t0, False, None
    for name, n, step in ops:
        now = next_time(now, step, last_wait)
        latest = max(latest, now)
        got = do(limiter, name, n, now)
        if twin is not None:
            do(twin, name, n, now)
        mutated = mutated or name in MUTATING
        if isinstance(got, tuple) and got[1]:
            last_wait = got[1]
    return limiter, twin, now, latest, mutated


BUG_ANCHOR = (
    " [the limiter had only been read (peek/available) so far: does a read anchor a new"
    " limiter? see test_limiter_api.py::test_a_first_peek_or_available_anchors_the_limiter]"
)
BUG_BEHIND = (
    " [now_ns was behind the settlement point: is wait_ns counted from now_ns, not from the"
    " settlement point? see"
    " test_limiter_api.py::test_wait_counts_from_now_when_the_clock_is_behind_the_settlement]"
)


def hints(kwargs: dict[str, Any], mutated: bool, model: lm.ModelLimiter, now: int) -> str:
    """Point a failure at a bug with its own test when the situation is the one it needs."""
    text = ""
    if "start_ns" not in kwargs and not mutated:
        text += BUG_ANCHOR
    if model.settled_at is not None and now < model.settled_at:
        text += BUG_BEHIND
    return text


def state(limiter: RateLimiter) -> Any:
    """The exact per-band balances and settlement times (the pickle state)."""
    return limiter.__reduce__()[2]


def answers(limiter: Any, now: int, ns: list[int]) -> list:
    return [do(limiter, "peek", n, now) for n in ns] + [do(limiter, "available", 0, now)]


# ---------------------------------------------------------------------------------------------
# Native against the model
# ---------------------------------------------------------------------------------------------


#: A debt held to the whole nanosecond, read before its point: a band of 1,000 tokens a
#: nanosecond holds its burst again 1 ns after a debt of 6 tokens, and a call at the debt's own
#: time is answered from there.
FAST_DEBT = (
    {"rate": 10**12, "burst": 1},
    0,
    [("settle", 1, ("delta", 0)), ("check", 1, ("delta", 0))],
)
#: A refund behind a debt's point that a clock of the limiter's had already passed: the tokens
#: are given at the band's point, and a call behind it is answered from there.
REFUND_BEHIND_A_DEBT = (
    {"bands": [Band(176, burst=176), (176, None, None)], "initial": 0},
    0,
    [
        ("try_acquire", 0, ("abs", 0)),
        ("settle", 0, ("abs", 34_090_910)),
        ("try_acquire", 0, ("abs", 34_090_909)),
        ("settle", 1, ("abs", 34_090_909)),
        ("refund", 1, ("abs", 34_090_909)),
        ("check", 1, ("abs", 34_090_909)),
    ],
)


@hyp_given(scenarios(one_clock=False))
@example(FAST_DEBT)
@example(REFUND_BEHIND_A_DEBT)
def test_native_limiter_matches_the_fraction_model(scenario: tuple) -> None:
    kwargs, now, ops = scenario
    limiter, model = RateLimiter(**kwargs), lm.model_from(**kwargs)
    assert qos_support.band_pairs(limiter) == model.band_pairs()
    for rate, _ in qos_support.band_pairs(limiter):  # an int when whole, else a Fraction
        assert type(rate) is (int if Fraction(rate).denominator == 1 else Fraction)
    mutated, last_wait = False, None
    for i, (name, n, step) in enumerate(ops):
        now = next_time(now, step, last_wait)
        hint = hints(kwargs, mutated, model, now)
        want = do(model, name, n, now)
        got = do(limiter, name, n, now)
        context = f"step {i}: {name}(n={n}, now_ns={now}) on {kwargs}"
        assert got == want, f"{context}: native {got!r}, model {want!r}{hint}"
        seen = do(limiter, "available", 0, now)
        assert seen == do(model, "available", 0, now), f"{context}: then available() = {seen}{hint}"
        mutated = mutated or name in MUTATING
        if isinstance(want, tuple) and want[1]:
            last_wait = want[1]


# ---------------------------------------------------------------------------------------------
# The exactness claims
# ---------------------------------------------------------------------------------------------

settle_ops = st.sampled_from(["check", "refund", "try_acquire"])  # with n=0: settle only


@hyp_given(
    scenarios(max_ops=8),
    st.lists(st.one_of(st.integers(1, 1000), st.integers(1, 10**10)), min_size=1, max_size=40),
    st.lists(settle_ops, min_size=40, max_size=40),
    st.lists(st.sampled_from(["peek", "available", "none"]), min_size=40, max_size=40),
)
def test_a_span_split_into_steps_settles_like_one_step(
    scenario: tuple, steps: list[int], settlers: list[str], readers: list[str]
) -> None:
    kwargs, t0, ops = scenario
    stepped, _, _, latest, _ = replay(kwargs, t0, ops, model=False)
    jumped, _, _, _, _ = replay(kwargs, t0, ops, model=False)
    start = latest
    stepped.check(0, now_ns=start)
    jumped.check(0, now_ns=start)
    end = clamp(start + sum(steps))
    t = start
    for step, settler, reader in zip(steps, settlers, readers, strict=False):
        t = clamp(t + step)
        getattr(stepped, settler)(0, now_ns=t)  # n = 0: settles, takes and gives nothing
        if reader == "peek":
            stepped.peek(1, now_ns=t)
        elif reader == "available":
            stepped.available(now_ns=t)
    assert t == end
    jumped.refund(0, now_ns=end)
    assert state(stepped) == state(jumped), f"{len(steps)} steps from {start} to {end}"
    ns = sorted({1, *range(1, min(bursts_of(kwargs)) + 1, max(1, min(bursts_of(kwargs)) // 7))})
    for later in (end, clamp(end + 1), clamp(end + 10**9 // 3)):
        assert answers(stepped, later, ns) == answers(jumped, later, ns)


@hyp_given(scenarios(max_ops=12), st.integers(1, 10**6), st.booleans())
def test_after_a_denial_one_ns_short_is_denied_and_the_wait_is_allowed(
    scenario: tuple, pick: int, via_peek: bool
) -> None:
    kwargs, t0, ops = scenario
    limiter, model, now, _, mutated = replay(kwargs, t0, ops)
    smallest = min(bursts_of(kwargs))
    if limiter.available(now_ns=now) >= smallest:  # full: empty the smallest band
        assert limiter.check(smallest, now_ns=now).allowed
        model.check(smallest, now)
        mutated = True
    held = limiter.available(now_ns=now)
    n = held + 1 + pick % (smallest - held)  # more than every band holds: must be denied
    first = limiter.peek(n, now_ns=now) if via_peek else limiter.check(n, now_ns=now)
    assert first.outcome is LimitOutcome.DENIED, f"{n} tokens when {held} are held: {first}"
    w = first.wait_ns
    assert isinstance(w, int) and w >= 1
    assume(w <= lm.MAX_CLOCK_GAP_NS)  # a wait of decades is never taken up on one clock
    note(f"n={n}, now={now}, wait={w}")
    hint = hints(kwargs, mutated or not via_peek, model, now)
    short = limiter.peek(n, now_ns=now + w - 1)
    assert short.outcome is LimitOutcome.DENIED, f"{n} allowed 1 ns before the wait {w}{hint}"
    assert short.wait_ns == 1, f"1 ns before the end of the wait, {short.wait_ns} ns left{hint}"
    assert limiter.check(n, now_ns=now + w - 1).outcome is LimitOutcome.DENIED
    on_time = limiter.check(n, now_ns=now + w)
    assert on_time.outcome is LimitOutcome.ALLOWED, (
        f"{'peek' if via_peek else 'check'}({n}) at {now} said wait {w} ns, but check({n}) "
        f"at {now + w} answered {on_time}{hint}"
    )


@hyp_given(scenarios(min_bands=2, max_ops=12), st.lists(st.integers(0, 10**6), max_size=6))
def test_bands_are_all_or_nothing(scenario: tuple, picks: list[int]) -> None:
    """Requests of every size on a limiter of several bands, after any history: each answer is
    the model's, and so is every probe after it (``peek`` of 1 token and of each band's burst,
    and ``available``, now and later). In the model a denied request takes nothing from any
    band and an allowed one takes ``n`` from every band: a limiter that took from the bands
    that held ``n`` while another said wait, or from only some bands of an allowed request,
    would hold other balances, and some probe would show it."""
    kwargs, t0, ops = scenario
    limiter, model, now, _, _ = replay(kwargs, t0, ops)
    assert model is not None
    burst_list = bursts_of(kwargs)
    probe = sorted({1, *burst_list})
    ns = [1 + p % max(burst_list) for p in picks] + [min(burst_list), max(burst_list) + 1]
    for n in ns:
        got, want = do(limiter, "check", n, now), do(model, "check", n, now)
        assert got == want, f"check({n}) at {now}: native {got!r}, model {want!r}"
        for later in (now, clamp(now + 1), clamp(now + 10**9)):
            seen, expected = answers(limiter, later, probe), answers(model, later, probe)
            assert seen == expected, (
                f"after check({n}) at {now} -> {got!r}, probes {probe} at {later}: "
                f"native {seen}, model {expected}"
            )


@hyp_given(
    scenarios(max_ops=12),
    st.integers(0, 10**10),
    st.one_of(st.integers(1, 10**9), st.integers(1, 2**50)),
    st.one_of(st.integers(1, 10**9), st.integers(1, 2**50)),
    st.sampled_from(["check", "try_acquire", "refund", "peek", "available"]),
    st.integers(0, 5),
)
def test_a_backwards_clock_adds_nothing_and_does_not_rewind(
    scenario: tuple, ahead: int, back: int, forward: int, op: str, n: int
) -> None:
    kwargs, t0, ops = scenario
    went_back, _, _, latest, _ = replay(kwargs, t0, ops, model=False)
    stayed, _, _, _, _ = replay(kwargs, t0, ops, model=False)
    top = clamp(latest + ahead)
    for limiter in (went_back, stayed):
        limiter.check(0, now_ns=top)  # settled at the latest time seen
    past = clamp(top - back)
    assume(past < top)
    # Before the settlement point the balance is what it is at the settlement point: no tokens
    # added (nor lost), and the operation answers as it would at the settlement point.
    assert went_back.available(now_ns=past) == stayed.available(now_ns=top)
    got, want = do(went_back, op, n, past), do(stayed, op, n, top)
    if isinstance(got, tuple):  # outcome and remaining (the wait counts from now: see below)
        got, want = (got[0], got[2]), (want[0], want[2])
    assert got == want, f"{op}({n}) at {past}, behind the settlement point {top}"
    assert state(went_back) == state(stayed), "going back changed the state"
    future = clamp(top + forward)
    assume(future > top)
    went_back.check(0, now_ns=future)
    stayed.check(0, now_ns=future)
    assert state(went_back) == state(stayed), "the settlement point moved back"
    probe = [1, *bursts_of(kwargs)]
    assert answers(went_back, future, probe) == answers(stayed, future, probe)


# ---------------------------------------------------------------------------------------------
# Pickle and copy
# ---------------------------------------------------------------------------------------------


@hyp_given(
    scenarios(max_ops=10),
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 12), time_steps), max_size=15),
    st.sampled_from(["pickle", "copy", "deepcopy"]),
    st.sampled_from([RateLimiter, SubLimiter]),
)
def test_pickle_and_copy_keep_configuration_state_and_type(
    scenario: tuple, future: list, how: str, cls: type
) -> None:
    kwargs, t0, ops = scenario
    original, _, _, now, _ = replay(kwargs, t0, ops, cls, model=False)
    if how == "pickle":
        restored = pickle.loads(pickle.dumps(original))
    else:
        restored = getattr(copy, how)(original)
    assert type(restored) is cls
    assert restored is not original
    assert restored.bands == original.bands
    assert repr(restored) == repr(original)
    assert state(restored) == state(original)
    # The first call after a restore is at the latest time seen (or start_ns): one earlier
    # than the saved settlement would re-anchor the restored limiter (see
    # test_limiter_restores.py).
    now = max(now, kwargs.get("start_ns", now))
    assert do(restored, "check", 0, now) == do(original, "check", 0, now)
    last_wait = None
    for name, n, step in future:
        now = next_time(now, step, last_wait)
        got, want = do(restored, name, n, now), do(original, name, n, now)
        assert got == want, f"{name}({n}, now_ns={now}) after {how}"
        if isinstance(want, tuple) and want[1]:
            last_wait = want[1]
    assert state(restored) == state(original)
