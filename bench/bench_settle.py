"""``settle`` against ``refund`` in one run: the one-key and the keyed limiter.

Run from the repository root after installing the package::

    python3 bench/bench_settle.py [--rounds 15]

``settle(2, 1)`` gives one token back, as ``refund(1)`` does, through the same rule;
``settle(1, 2)`` owes one more. The limiters are configured so that no call is ever forfeited
or in debt for long during a run (a huge rate and burst), with their default clock.
Interleaved rounds in one run; medians and ratios, not absolute times.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
from timing import median_ns

HUGE = 10**12  # tokens per second and burst: never denied during a run


def one_key(method: str, args: str) -> Callable[[], tuple[str, dict[str, object]]]:
    return lambda: (f"limiter.{method}({args})", {"limiter": RateLimiter(HUGE)})


def keyed(method: str, args: str) -> Callable[[], tuple[str, dict[str, object]]]:
    def case() -> tuple[str, dict[str, object]]:
        limiter = KeyedRateLimiter(HUGE)
        limiter.try_acquire("k", 10**9)  # the key is held, as a settled request's is
        return f'limiter.{method}("k", {args})', {"limiter": limiter}

    return case


#: Each row, and the refund row it is read against.
CASES: dict[str, Callable[[], tuple[str, dict[str, object]]]] = {
    "RateLimiter.refund(1)": one_key("refund", "1"),
    "RateLimiter.settle(2, 1)": one_key("settle", "2, 1"),
    "RateLimiter.settle(1, 2)": one_key("settle", "1, 2"),
    "KeyedRateLimiter.refund(k, 1)": keyed("refund", "1"),
    "KeyedRateLimiter.settle(k, 2, 1)": keyed("settle", "2, 1"),
    "KeyedRateLimiter.settle(k, 1, 2)": keyed("settle", "1, 2"),
}
REFUND_OF = {name: "RateLimiter.refund(1)" for name in list(CASES)[:3]} | {
    name: "KeyedRateLimiter.refund(k, 1)" for name in list(CASES)[3:]
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    options = parser.parse_args()

    medians = median_ns(CASES, options.rounds, options.number)
    print(f"median of {options.rounds} rounds x {options.number} calls, ns per call")
    print(f"{'call':36} {'ns':>8} {'/ refund':>9}")
    for name, ns in medians.items():
        print(f"{name:36} {ns:8.0f} {ns / medians[REFUND_OF[name]]:8.2f}x")


if __name__ == "__main__":
    main()
