"""The exact limiter's hot call against an empty Python function and the pure-Python peers.

Run from the repository root after installing the package::

    python3 bench/bench_limiter.py [--rounds 15]

The peers are optional (``pip install '.[bench]'``): each row that needs one is skipped when it
is not installed. Every limiter is configured so that the timed call is always allowed, with
its default clock. Interleaved rounds in one run; medians and ratios, not absolute times.

The baseline is an empty Python method called the same way (``limiter.try_acquire()``: an
attribute lookup and a call); a bare ``f()`` is shown beside it, since it skips the lookup.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

from protocol_in_code.qos.limiter import RateLimiter
from timing import median_ns

HUGE = 10**12  # tokens per second and burst: never denied during a run


def empty() -> None:
    return None


class Empty:
    """An object whose ``try_acquire`` does nothing: the limiter's call made the same way."""

    def try_acquire(self) -> None:
        return None


def native() -> tuple[str, dict[str, object]]:
    return "limiter.try_acquire()", {"limiter": RateLimiter(HUGE)}


def empty_def() -> tuple[str, dict[str, object]]:
    return "f()", {"f": empty}


def empty_method() -> tuple[str, dict[str, object]]:
    return "limiter.try_acquire()", {"limiter": Empty()}


def token_bucket() -> tuple[str, dict[str, object]]:
    module = importlib.import_module("token_bucket")
    limiter = module.Limiter(HUGE, HUGE, module.MemoryStorage())
    return 'limiter.consume(b"k")', {"limiter": limiter}


def limits() -> tuple[str, dict[str, object]]:
    module = importlib.import_module("limits")
    strategy = module.strategies.FixedWindowRateLimiter(module.storage.MemoryStorage())
    return 'strategy.hit(item, "k")', {"strategy": strategy, "item": module.parse(f"{HUGE}/second")}


def pyrate_limiter() -> tuple[str, dict[str, object]]:
    module = importlib.import_module("pyrate_limiter")
    limiter = module.Limiter(module.Rate(HUGE, module.Duration.SECOND))
    return 'limiter.try_acquire("k", blocking=False)', {"limiter": limiter}


def throttled() -> tuple[str, dict[str, object]]:
    module = importlib.import_module("throttled")
    quota = module.rate_limiter.per_sec(HUGE, burst=HUGE)
    limiter = module.Throttled(key="k", quota=quota, using="token_bucket")
    return 'limiter.limit("k")', {"limiter": limiter}


CASES: dict[str, Callable[[], tuple[str, dict[str, object]]]] = {
    "RateLimiter.try_acquire() (native)": native,
    "empty method, limiter.try_acquire()": empty_method,
    "empty def, f()": empty_def,
    "token-bucket Limiter.consume": token_bucket,
    "limits FixedWindowRateLimiter.hit": limits,
    "pyrate-limiter Limiter.try_acquire": pyrate_limiter,
    "throttled-py Throttled.limit": throttled,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    options = parser.parse_args()

    medians = median_ns(CASES, options.rounds, options.number)
    native_ns = medians["RateLimiter.try_acquire() (native)"]
    print(f"median of {options.rounds} rounds x {options.number} calls, ns per call")
    print(f"{'call':40} {'ns':>8} {'/ native':>9}")
    for name, ns in medians.items():
        print(f"{name:40} {ns:8.0f} {ns / native_ns:8.1f}x")
    for baseline in ("empty method, limiter.try_acquire()", "empty def, f()"):
        print(f"native / {baseline}: {native_ns / medians[baseline]:.2f}x")


if __name__ == "__main__":
    main()
