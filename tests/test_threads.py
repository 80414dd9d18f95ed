"""One bucket shared by many threads; a number whose arithmetic reads its own bucket.

No "Already borrowed" RuntimeError, no deadlock, no lost update: with ``rate_per_sec=0`` and
capacity C, exactly C of 8 x 20,000 calls are allowed, and the allowed calls see each balance
C-1 ... 0 exactly once. Timeouts here only detect hangs; nothing is asserted about speed.

The pure-Python reference is not thread-safe (``try_consume`` is a read-modify-write spread
over many bytecodes), so with ``QOS_IMPL=reference`` the thread test drives the reference
through a lock: that proves the harness itself, the guarantee is the native build's.
"""

from __future__ import annotations

import faulthandler
import sys
import threading
from contextlib import contextmanager
from fractions import Fraction

import pytest
from qos_support import describe

THREADS = 8
CALLS = 20_000
CAPACITY = 1000
HANG_SECONDS = 240  # generous: only a hang detector


@contextmanager
def watchdog(seconds: float):
    """If the process wedges (e.g. a deadlock with the GIL held, where no Python code can run
    any more, not even a join timeout), dump every thread's traceback and exit."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextmanager
def switch_interval(seconds: float):
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def serialised(fn):
    lock = threading.Lock()

    def locked(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)

    return locked


@pytest.mark.parametrize("kind", [int, float, Fraction], ids=lambda k: k.__name__)
def test_shared_bucket_many_threads(impl, kind):
    try_consume = serialised(impl.try_consume) if impl.name == "reference" else impl.try_consume
    allowed, throttled = impl.ConsumeOutcome.ALLOWED, impl.ConsumeOutcome.THROTTLED
    bucket = impl.TokenBucket(
        capacity=kind(CAPACITY), tokens=kind(CAPACITY), rate_per_sec=kind(0), last_refill_at=kind(0)
    )
    now = kind(5)  # the first call takes the growth branch (adding 5 * 0), the rest elapsed == 0
    barrier = threading.Barrier(THREADS)
    seen: list[list] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []
    odd: list = []

    def worker(i: int) -> None:
        try:
            barrier.wait()
            mine = seen[i]
            for _ in range(CALLS):
                result = try_consume(bucket, 1, now)
                remaining = result.tokens_remaining
                if result.outcome is allowed:
                    mine.append(remaining)
                elif (
                    result.outcome is not throttled or remaining != 0 or type(remaining) is not kind
                ):
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
    balances = sorted(x for mine in seen for x in mine)
    assert len(balances) == CAPACITY, f"{len(balances)} allowed, expected exactly {CAPACITY}"
    assert balances == list(range(CAPACITY)), "a balance was handed out twice: lost update"
    assert all(type(x) is kind for x in balances)
    assert bucket.tokens == 0 and type(bucket.tokens) is kind, describe(bucket.tokens)
    assert bucket.last_refill_at == now and type(bucket.last_refill_at) is kind
    assert bucket.capacity == CAPACITY and bucket.rate_per_sec == 0


def _value(x):
    return x.v if isinstance(x, Nosy) else x


class Nosy:
    """A number whose arithmetic and ordering read the bucket it is stored in.

    Every operation reads the four fields, the bucket's repr and ``bucket == bucket`` before
    doing the arithmetic on the wrapped Fraction. An implementation that holds a lock on the
    bucket while running Python arithmetic would deadlock (or raise "Already borrowed") here.
    """

    def __init__(self, v, box: dict) -> None:
        self.v, self.box = v, box

    def __repr__(self) -> str:
        return f"Nosy({self.v!r})"

    def _peek(self) -> None:
        bucket = self.box.get("bucket")
        if bucket is not None:
            self.box["peeks"] += 1
            _ = (bucket.capacity, bucket.tokens, bucket.rate_per_sec, bucket.last_refill_at)
            repr(bucket)
            _ = bucket == bucket

    def _new(self, v) -> Nosy:
        return Nosy(v, self.box)

    def __eq__(self, other):  # no peek: bucket == bucket compares fields with ==
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


def _nosy_scenario(qos):
    box: dict = {"bucket": None, "peeks": 0}

    def n(v):
        return Nosy(Fraction(v), box)

    bucket = qos.TokenBucket(n(10), n(4), n(1), n(0))
    box["bucket"] = bucket
    results = [
        qos.try_consume(bucket, n(3), n(2)),  # refill to 6, take 3
        qos.try_consume(bucket, n(5), n(2)),  # throttled at 3
        qos.try_consume(bucket, 1, 100),  # capped at 10, take 1
        qos.try_consume(bucket, n(1), n(50)),  # clock went back: untouched, take 1
    ]
    summary = [(r.outcome.value, _value(r.tokens_remaining)) for r in results]
    fields = [
        _value(getattr(bucket, f)) for f in ("capacity", "tokens", "rate_per_sec", "last_refill_at")
    ]
    return summary, fields, box["peeks"]


def test_number_reading_its_own_bucket_does_not_hang(impl, ref):
    expected = _nosy_scenario(ref)
    box: dict = {}

    def target() -> None:
        try:
            box["got"] = _nosy_scenario(impl)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    with watchdog(HANG_SECONDS + 60):
        thread.start()
        thread.join(HANG_SECONDS)
    assert not thread.is_alive(), "try_consume hung on a number that reads its own bucket"
    assert "error" not in box, repr(box.get("error"))
    summary, fields, peeks = box["got"]
    assert (
        summary == expected[0] == [("Allowed", 3), ("Throttled", 3), ("Allowed", 9), ("Allowed", 8)]
    )
    assert fields == expected[1] == [10, 8, 1, 100]
    assert peeks > 0
