"""One bucket shared by many threads; a number whose arithmetic reads its own bucket.

No "Already borrowed" RuntimeError, no deadlock, no lost update:

* token bucket: with ``rate_per_sec=0`` and capacity C, exactly C of 8 x 20,000
  ``try_consume(bucket, 1, now)`` calls are allowed, and the allowed calls see each balance
  C-1 ... 0 exactly once;
* leaky bucket: with ``leak_per_sec=0``, an empty level and capacity C, exactly C of 8 x 20,000
  ``offer(bucket, 1, now)`` calls are accepted, the accepted calls see each level 1 ... C exactly
  once, and the final level is C.

Timeouts here only detect hangs; nothing is asserted about speed.

The pure-Python reference is not thread-safe (``try_consume`` and ``offer`` are
read-modify-writes spread over many bytecodes), so with ``QOS_IMPL=reference`` the thread tests
drive the reference through a lock: that proves the harness itself, the guarantee is the native
build's.
"""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest
from qos_support import describe, switch_interval, watchdog

THREADS = 8
CALLS = 20_000
CAPACITY = 1000
HANG_SECONDS = 240  # generous: only a hang detector


def serialised(fn):
    lock = threading.Lock()

    def locked(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)

    return locked


def hammer(call, good, bad, bad_value, kind) -> list:
    """Run ``call()`` 8 x 20,000 times from 8 threads started together.

    Returns the sorted second fields of the ``good`` results; every other result must be
    ``bad`` with ``bad_value`` of type ``kind``. Fails on any exception or a hang.
    """
    barrier = threading.Barrier(THREADS)
    seen: list[list] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    odd: list = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            mine = seen[i]
            for _ in range(CALLS):
                result = call()
                outcome, value = result
                if outcome is good:
                    mine.append(value)
                elif outcome is not bad or value != bad_value or type(value) is not kind:
                    odd.append(result)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    with watchdog(HANG_SECONDS + 60), switch_interval(1e-6):
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG_SECONDS)
    assert not any(t.is_alive() for t in threads), "threads still running: deadlock?"
    assert errors == [], errors[:3]
    assert odd == [], odd[:3]
    return sorted(x for mine in seen for x in mine)


KINDS = pytest.mark.parametrize("kind", [int, float, Fraction], ids=lambda k: k.__name__)


@KINDS
def test_shared_bucket_many_threads(impl, kind):
    try_consume = serialised(impl.try_consume) if impl.name == "reference" else impl.try_consume
    bucket = impl.TokenBucket(
        capacity=kind(CAPACITY), tokens=kind(CAPACITY), rate_per_sec=kind(0), last_refill_at=kind(0)
    )
    now = kind(5)  # the first call takes the growth branch (adding 5 * 0), the rest elapsed == 0

    def consume():
        result = try_consume(bucket, 1, now)
        return result.outcome, result.tokens_remaining

    balances = hammer(consume, impl.ConsumeOutcome.ALLOWED, impl.ConsumeOutcome.THROTTLED, 0, kind)
    assert len(balances) == CAPACITY, f"{len(balances)} allowed, expected exactly {CAPACITY}"
    assert balances == list(range(CAPACITY)), "a balance was handed out twice: lost update"
    assert all(type(x) is kind for x in balances)
    assert bucket.tokens == 0 and type(bucket.tokens) is kind, describe(bucket.tokens)
    assert bucket.last_refill_at == now and type(bucket.last_refill_at) is kind
    assert bucket.capacity == CAPACITY and bucket.rate_per_sec == 0


@KINDS
def test_shared_leaky_bucket_many_threads(impl, kind):
    offer = serialised(impl.offer) if impl.name == "reference" else impl.offer
    bucket = impl.LeakyBucket(
        capacity=kind(CAPACITY), level=kind(0), leak_per_sec=kind(0), last_leak_at=kind(0)
    )
    now = kind(5)  # the first call drains (5 * 0, floored with max(level, 0)), the rest do not

    def add_one():
        result = offer(bucket, 1, now)
        return result.outcome, result.level

    levels = hammer(
        add_one, impl.OfferOutcome.ACCEPTED, impl.OfferOutcome.OVERFLOWED, CAPACITY, kind
    )
    assert len(levels) == CAPACITY, f"{len(levels)} accepted, expected exactly {CAPACITY}"
    assert levels == list(range(1, CAPACITY + 1)), "a level was handed out twice: lost update"
    assert all(type(x) is kind for x in levels)
    assert bucket.level == CAPACITY and type(bucket.level) is kind, describe(bucket.level)
    assert bucket.last_leak_at == now and type(bucket.last_leak_at) is kind
    assert bucket.capacity == CAPACITY and bucket.leak_per_sec == 0


def _value(x):
    return x.v if isinstance(x, Nosy) else x


class Nosy:
    """A number whose arithmetic and ordering read the object it is stored in.

    Every operation first calls ``box["peek"]`` (when set), which reads the fields of the bucket
    (or shaper) holding the number, its repr and ``obj == obj``, then does the arithmetic on the
    wrapped Fraction. An implementation that holds a lock on that object while running Python
    arithmetic would deadlock (or raise "Already borrowed") here.
    """

    def __init__(self, v, box: dict) -> None:
        self.v, self.box = v, box

    def __repr__(self) -> str:
        return f"Nosy({self.v!r})"

    def _peek(self) -> None:
        peek = self.box.get("peek")
        if peek is not None:
            self.box["peeks"] += 1
            peek()

    def _new(self, v) -> Nosy:
        return Nosy(v, self.box)

    def __eq__(self, other):  # no peek: obj == obj compares fields with ==
        return self.v == _value(other)

    def __hash__(self):
        return hash(self.v)

    def __add__(self, o):
        self._peek()
        return self._new(self.v + _value(o))

    def __radd__(self, o):
        self._peek()
        return self._new(_value(o) + self.v)

    def __sub__(self, o):
        self._peek()
        return self._new(self.v - _value(o))

    def __rsub__(self, o):
        self._peek()
        return self._new(_value(o) - self.v)

    def __mul__(self, o):
        self._peek()
        return self._new(self.v * _value(o))

    def __rmul__(self, o):
        self._peek()
        return self._new(_value(o) * self.v)

    def __lt__(self, o):
        self._peek()
        return self.v < _value(o)

    def __le__(self, o):
        self._peek()
        return self.v <= _value(o)

    def __gt__(self, o):
        self._peek()
        return self.v > _value(o)

    def __ge__(self, o):
        self._peek()
        return self.v >= _value(o)


def peeker(obj, fields):
    def peek() -> None:
        _ = [getattr(obj, f) for f in fields]
        repr(obj)
        _ = obj == obj

    return peek


TOKEN_FIELDS = ("capacity", "tokens", "rate_per_sec", "last_refill_at")
LEAKY_FIELDS = ("capacity", "level", "leak_per_sec", "last_leak_at")


def _nosy_token_bucket(qos):
    box: dict = {"peek": None, "peeks": 0}

    def n(v):
        return Nosy(Fraction(v), box)

    bucket = qos.TokenBucket(n(10), n(4), n(1), n(0))
    box["peek"] = peeker(bucket, TOKEN_FIELDS)
    results = [
        qos.try_consume(bucket, n(3), n(2)),  # refill to 6, take 3
        qos.try_consume(bucket, n(5), n(2)),  # throttled at 3
        qos.try_consume(bucket, 1, 100),  # capped at 10, take 1
        qos.try_consume(bucket, n(1), n(50)),  # clock went back: untouched, take 1
    ]
    summary = [(r.outcome.value, _value(r.tokens_remaining)) for r in results]
    fields = [_value(getattr(bucket, f)) for f in TOKEN_FIELDS]
    return summary, fields, box["peeks"]


def _nosy_leaky_bucket(qos):
    box: dict = {"peek": None, "peeks": 0}

    def n(v):
        return Nosy(Fraction(v), box)

    bucket = qos.LeakyBucket(n(10), n(4), n(1), n(0))
    box["peek"] = peeker(bucket, LEAKY_FIELDS)
    results = [
        qos.offer(bucket, n(3), n(2)),  # drained to 2, add 3
        qos.offer(bucket, n(6), n(2)),  # 5 + 6 overflows
        qos.offer(bucket, 1, 100),  # floored at int 0, add 1
        qos.offer(bucket, n(1), n(50)),  # clock went back: untouched, add 1
    ]
    qos.leak(bucket, n(101))  # 2 - 1 * 1
    summary = [(r.outcome.value, _value(r.level)) for r in results]
    fields = [_value(getattr(bucket, f)) for f in LEAKY_FIELDS]
    return summary, fields, box["peeks"]


def _nosy_shaper(qos):
    """The number also reads the shaper holding its bucket: its buckets, trace, clock, repr."""
    box: dict = {"peek": None, "peeks": 0}

    def n(v):
        return Nosy(Fraction(v), box)

    bucket = qos.TokenBucket(n(10), n(4), n(1), n(0))
    shaper = qos.ToyShaper(qos.ClassTree(), {"a": bucket}, n(2))
    shaper_peek = peeker(shaper, ("tree", "buckets", "clock", "trace"))
    bucket_peek = peeker(bucket, TOKEN_FIELDS)

    def peek() -> None:
        shaper_peek()
        bucket_peek()
        _ = list(shaper.trace), dict(shaper.buckets)

    box["peek"] = peek
    results = [shaper.enqueue("a", n(3), n(2))]  # refill to 6, take 3
    shaper.tick(n(2))  # clock 2 -> 4
    results += qos.run_contention(shaper, [("a", n(5)), ("a", 1)])  # refill 3 + 2, take 5; 0 < 1
    summary = [(r.class_name, r.outcome.value, _value(r.tokens_remaining)) for r in results]
    fields = [_value(getattr(bucket, f)) for f in TOKEN_FIELDS]
    return summary, [*fields, _value(shaper.clock), list(shaper.trace)], box["peeks"]


NOSY = {
    "token_bucket": (
        _nosy_token_bucket,
        [("Allowed", 3), ("Throttled", 3), ("Allowed", 9), ("Allowed", 8)],
        [10, 8, 1, 100],
    ),
    "leaky_bucket": (
        _nosy_leaky_bucket,
        [("Accepted", 5), ("Overflowed", 5), ("Accepted", 1), ("Accepted", 2)],
        [10, 1, 1, 101],
    ),
    "shaper": (
        _nosy_shaper,
        [("a", "Allowed", 3), ("a", "Allowed", 0), ("a", "Throttled", 0)],
        [
            10, 0, 1, 4, 4,
            [
                "enqueue a size=Nosy(Fraction(3, 1)) at t=Nosy(Fraction(2, 1)): Allowed "
                "(tokens_remaining=Nosy(Fraction(3, 1)))",
                "enqueue a size=Nosy(Fraction(5, 1)) at t=Nosy(Fraction(4, 1)): Allowed "
                "(tokens_remaining=Nosy(Fraction(0, 1)))",
                "enqueue a size=1 at t=Nosy(Fraction(4, 1)): Throttled "
                "(tokens_remaining=Nosy(Fraction(0, 1)))",
            ],
        ],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NOSY))
def test_number_reading_its_own_bucket_does_not_hang(impl, ref, name):
    scenario, want_summary, want_fields = NOSY[name]
    expected = scenario(ref)
    box: dict = {}

    def target() -> None:
        try:
            box["got"] = scenario(impl)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    with watchdog(HANG_SECONDS + 60):
        thread.start()
        thread.join(HANG_SECONDS)
    assert not thread.is_alive(), f"{name} hung on a number that reads its own bucket"
    assert "error" not in box, repr(box.get("error"))
    summary, fields, peeks = box["got"]
    assert summary == expected[0] == want_summary
    assert fields == expected[1] == want_fields
    assert peeks > 0


class Writer:
    """A number whose subtraction and addition store a fresh number into the object it sits in
    (up to ``box["limit"]`` times), before returning the result.

    The course's code does each operation once and then overwrites what was written. An
    implementation that notices the write and starts the operation over runs the caller's
    arithmetic again (and, for a number that always writes, would never finish); the limit keeps
    such a run short so the test can report it.
    """

    def __init__(self, v, box: dict) -> None:
        self.v, self.box = v, box

    def __repr__(self) -> str:
        return f"Writer({self.v!r})"

    def _write(self) -> None:
        self.box["ops"] += 1
        if self.box["ops"] <= self.box["limit"]:
            setattr(self.box["obj"], self.box["field"], Writer(100, self.box))

    def _other(self, o):
        return o.v if isinstance(o, Writer) else o

    def __sub__(self, o):
        self._write()
        return Writer(self.v - self._other(o), self.box)

    def __add__(self, o):
        self._write()
        return Writer(self.v + self._other(o), self.box)

    def __rsub__(self, o):
        return Writer(self._other(o) - self.v, self.box)

    def __radd__(self, o):
        return Writer(self._other(o) + self.v, self.box)

    def __mul__(self, o):
        return Writer(self.v * self._other(o), self.box)

    __rmul__ = __mul__

    def __lt__(self, o):
        return self.v < self._other(o)

    def __le__(self, o):
        return self.v <= self._other(o)

    def __gt__(self, o):
        return self.v > self._other(o)

    def __ge__(self, o):
        return self.v >= self._other(o)


def _writer_scenario(qos, what):
    box: dict = {"ops": 0, "limit": 50}

    def w(v):
        return Writer(v, box)

    if what == "try_consume":  # tokens -= n writes capacity
        obj = qos.TokenBucket(10, w(4), 1, 0)
        box.update(obj=obj, field="capacity")
        result = qos.try_consume(obj, 1, 0)
    elif what == "offer":  # level - drained, then level + n, write capacity
        obj = qos.LeakyBucket(10, w(4), 1, 0)
        box.update(obj=obj, field="capacity")
        result = qos.offer(obj, 1, 2)
    elif what == "leak":  # level - drained writes leak_per_sec
        obj = qos.LeakyBucket(10, w(4), 1, 0)
        box.update(obj=obj, field="leak_per_sec")
        result = qos.leak(obj, 2)
    else:  # tick: clock + seconds writes the clock itself
        obj = qos.ToyShaper(qos.ClassTree(), clock=w(1))
        box.update(obj=obj, field="clock")
        result = obj.tick(2)
    return box["ops"], repr(result), repr(obj)


@pytest.mark.parametrize("what", ["try_consume", "offer", "leak", "tick"])
def test_number_writing_its_own_bucket_runs_like_the_reference(impl, ref, what):
    """Single-threaded, the course's code runs each operation once, then stores its answer over
    whatever the number wrote meanwhile; the native code must do the same (a store made by the
    updating thread itself does not restart the update; see src/python/record/mutable.rs)."""
    expected = _writer_scenario(ref, what)
    box: dict = {}

    def target() -> None:
        try:
            box["got"] = _writer_scenario(impl, what)
        except BaseException as exc:
            box["error"] = exc

    # Whatever the order of its effects, the operation must end, without an error...
    thread = threading.Thread(target=target, daemon=True)
    with watchdog(HANG_SECONDS + 60):
        thread.start()
        thread.join(HANG_SECONDS)
    assert not thread.is_alive(), f"{what} hung on a number that writes its own bucket"
    assert "error" not in box, repr(box.get("error"))
    # ...and end as the course's code ends.
    ops, result, state = box["got"]
    assert (result, state) == expected[1:]
    assert ops == expected[0], (
        f"{what}: the number's arithmetic ran {ops} times, the course's code runs it "
        f"{expected[0]} times"
    )
