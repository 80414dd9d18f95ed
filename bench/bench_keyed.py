"""The keyed limiter's hot calls against an empty Python function, the peers, and a loop.

Run from the repository root after installing the package::

    python3 bench/bench_keyed.py [--rounds 15] [--only TEXT]

Rows, in one run (medians of interleaved rounds; read the ratios, not the times):

* ``try_acquire(key)`` with a str key, against an empty ``def f(key)`` called the same way and
  against token-bucket's ``Limiter.consume(key)`` (optional: ``pip install '.[bench]'``);
* the same on a limiter of three plans, with ``plan="pro"`` (the third), against the row above:
  the cost of a plan, its keyword and its name looked up;
* the same over 10,000 distinct keys in turn (a table that really holds them);
* ``try_acquire_many`` over a trace of int keys, per decision, against ``try_acquire`` called
  for each item in a Python loop;
* the cost per new key of filling a table with 4,000 tuple keys ``(k * (2**61 - 1), 0)``, whose
  Python hashes all collide (CPython hashes an int as ``n mod 2**61 - 1``, and a tuple by its
  items' hashes, with no seed), against 4,000 tuple keys whose Python hashes differ. Keyed by
  Python's hash (a dict), each new colliding key is compared with every earlier one;
* the same for 20,000 int keys beyond 2**127 (``(2**130 + k) * (2**61 - 1)``, all of one Python
  hash, against ``... + k``, all different): the cost per new key of filling a table, then per
  call on a table that holds them all (``--only "beyond 2**127"`` times just these);
* ``try_acquire(key)`` with one 4 KiB str key, which the table keeps as its digest (every call
  hashes the whole key, as for any str key), against the 11-character one above.

Every limiter is configured so that no request is ever denied during a run.

Between two runs of one case the others run, and push its table out of the caches: read the
trace rows against ``cargo bench --bench keyed_floor``'s row with the caches emptied. With
``--only try_acquire_many`` (only the cases whose name holds that text) the trace is decided
back to back, with the table in the caches, as that bench's first row.
"""

from __future__ import annotations

import argparse
import array
import importlib
from collections.abc import Callable
from itertools import cycle

from protocol_in_code.qos.keyed import KeyedRateLimiter
from timing import median_ns

HUGE = 10**12  # tokens per second and burst: never denied during a run
TRACE = 100_000  # requests in the trace rows
CLIENTS = 10_000
MODULUS = 2**61 - 1  # CPython hashes an int n as n mod MODULUS
TUPLE_KEYS = 4_000
BIG_INT_KEYS = 20_000
BEYOND = 2**130  # beyond what an i128 holds


def empty(key: object) -> None:
    return None


def keyed() -> KeyedRateLimiter:
    return KeyedRateLimiter(HUGE, max_keys=2 * CLIENTS)


Case = Callable[[], tuple[str, dict[str, object], int]]


def native_one_key() -> tuple[str, dict[str, object], int]:
    return "limiter.try_acquire(key)", {"limiter": keyed(), "key": "client-42"}, 1


def planned_one_key() -> tuple[str, dict[str, object], int]:
    plans = {"free": HUGE // 2, "team": HUGE // 3, "pro": HUGE}
    limiter = KeyedRateLimiter(plans=plans, max_keys=2 * CLIENTS)
    return 'limiter.try_acquire(key, plan="pro")', {"limiter": limiter, "key": "client-42"}, 1


def empty_one_key() -> tuple[str, dict[str, object], int]:
    return "f(key)", {"f": empty, "key": "client-42"}, 1


def token_bucket_one_key() -> tuple[str, dict[str, object], int]:
    module = importlib.import_module("token_bucket")
    limiter = module.Limiter(HUGE, HUGE, module.MemoryStorage())
    return "limiter.consume(key)", {"limiter": limiter, "key": "client-42"}, 1


def names() -> cycle[str]:
    return cycle([f"client-{i}" for i in range(CLIENTS)])


def native_many_keys() -> tuple[str, dict[str, object], int]:
    return "limiter.try_acquire(next(keys))", {"limiter": keyed(), "keys": names()}, 1


def empty_many_keys() -> tuple[str, dict[str, object], int]:
    return "f(next(keys))", {"f": empty, "keys": names()}, 1


def token_bucket_many_keys() -> tuple[str, dict[str, object], int]:
    module = importlib.import_module("token_bucket")
    limiter = module.Limiter(HUGE, HUGE, module.MemoryStorage())
    return "limiter.consume(next(keys))", {"limiter": limiter, "keys": names()}, 1


def trace() -> tuple[array.array[int], array.array[int]]:
    keys = array.array("q", (i * 7919 % CLIENTS for i in range(TRACE)))
    times = array.array("q", range(0, TRACE * 1000, 1000))
    return keys, times


def trace_loop() -> tuple[str, dict[str, object], int]:
    keys, times = trace()
    stmt = "for k, t in zip(keys, times): limiter.try_acquire(k, now_ns=t)"
    return stmt, {"limiter": keyed(), "keys": keys.tolist(), "times": times.tolist()}, TRACE


def trace_many() -> tuple[str, dict[str, object], int]:
    keys, times = trace()
    return (
        "limiter.try_acquire_many(keys, times)",
        {
            "limiter": keyed(),
            "keys": keys,
            "times": times,
        },
        TRACE,
    )


def fill(keys: list[tuple[int, int]]) -> None:
    limiter = KeyedRateLimiter(HUGE, max_keys=len(keys) + 1)
    for key in keys:
        limiter.try_acquire(key)


def colliding_tuples() -> tuple[str, dict[str, object], int]:
    keys = [(k * MODULUS, 0) for k in range(1, TUPLE_KEYS + 1)]
    assert len({hash(key) for key in keys}) == 1
    return "fill(keys)", {"fill": fill, "keys": keys}, TUPLE_KEYS


def spread_tuples() -> tuple[str, dict[str, object], int]:
    keys = [(k * MODULUS + k, 0) for k in range(1, TUPLE_KEYS + 1)]
    return "fill(keys)", {"fill": fill, "keys": keys}, TUPLE_KEYS


def colliding_ints() -> list[int]:
    keys = [(BEYOND + k) * MODULUS for k in range(1, BIG_INT_KEYS + 1)]
    assert len({hash(key) for key in keys}) == 1
    return keys


def spread_ints() -> list[int]:
    return [(BEYOND + k) * MODULUS + k for k in range(1, BIG_INT_KEYS + 1)]


def new_big_ints(keys: list[int]) -> tuple[str, dict[str, object], int]:
    return "fill(keys)", {"fill": fill, "keys": keys}, len(keys)


def known_big_ints(keys: list[int]) -> tuple[str, dict[str, object], int]:
    limiter = KeyedRateLimiter(HUGE, max_keys=len(keys) + 1)
    for key in keys:
        limiter.try_acquire(key)
    stmt = "for key in keys: limiter.try_acquire(key)"
    return stmt, {"limiter": limiter, "keys": keys}, len(keys)


def long_str_key() -> tuple[str, dict[str, object], int]:
    return "limiter.try_acquire(key)", {"limiter": keyed(), "key": "client-42" * 455}, 1


CASES: dict[str, Case] = {
    "try_acquire(key), one str key (native)": native_one_key,
    'try_acquire(key, plan="pro"), of 3 plans': planned_one_key,
    "empty def f(key)": empty_one_key,
    "token-bucket consume(key)": token_bucket_one_key,
    "try_acquire(key), 10k str keys (native)": native_many_keys,
    "empty def f(next(keys))": empty_many_keys,
    "token-bucket consume, 10k keys": token_bucket_many_keys,
    "trace: try_acquire in a loop": trace_loop,
    "trace: try_acquire_many": trace_many,
    "4k new tuple keys, Python hashes collide": colliding_tuples,
    "4k new tuple keys, Python hashes spread": spread_tuples,
    "20k new ints beyond 2**127, Python hashes collide": lambda: new_big_ints(colliding_ints()),
    "20k new ints beyond 2**127, Python hashes spread": lambda: new_big_ints(spread_ints()),
    "20k known ints beyond 2**127, hashes collide": lambda: known_big_ints(colliding_ints()),
    "20k known ints beyond 2**127, hashes spread": lambda: known_big_ints(spread_ints()),
    "try_acquire(key), one 4 KiB str key": long_str_key,
}

RATIOS = [
    ("try_acquire(key), one str key (native)", "empty def f(key)"),
    ('try_acquire(key, plan="pro"), of 3 plans', "try_acquire(key), one str key (native)"),
    ("token-bucket consume(key)", "try_acquire(key), one str key (native)"),
    ("try_acquire(key), 10k str keys (native)", "empty def f(next(keys))"),
    ("token-bucket consume, 10k keys", "try_acquire(key), 10k str keys (native)"),
    ("trace: try_acquire in a loop", "trace: try_acquire_many"),
    ("4k new tuple keys, Python hashes collide", "4k new tuple keys, Python hashes spread"),
    (
        "20k new ints beyond 2**127, Python hashes collide",
        "20k new ints beyond 2**127, Python hashes spread",
    ),
    ("20k known ints beyond 2**127, hashes collide", "20k known ints beyond 2**127, hashes spread"),
    ("try_acquire(key), one 4 KiB str key", "try_acquire(key), one str key (native)"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--only", default="", help="time only the cases whose name holds this")
    options = parser.parse_args()

    cases = {name: case for name, case in CASES.items() if options.only in name}
    medians = median_ns(cases, options.rounds, options.number)
    print(f"median of {options.rounds} rounds, ns per call or per decision")
    for name, ns in medians.items():
        print(f"{name:50} {ns:9.1f}")
    print("ratios")
    for slow, fast in RATIOS:
        if slow in medians and fast in medians:
            print(f"{slow:50} / {fast}: {medians[slow] / medians[fast]:.2f}x")


if __name__ == "__main__":
    main()
