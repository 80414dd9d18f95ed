"""Stacked limits: a request under a global and a per-client limit, decided together, against
the same two limits asked one after the other.

Run from the repository root after installing the package::

    python3 bench/bench_stack.py [--rounds 15]

Rows, in one run (medians of interleaved rounds; read the ratios, not the times):

* ``check_together([Part(everyone), Part(per_client, key)])``, the public call;
* the native call it makes for in-process parts (``_check_together``), without the module's
  grouping;
* ``everyone.check()`` then ``per_client.check(key)``: the same two decisions, not together
  (a refusal by the second would leave the first's token spent);
* the middleware (ASGI, Starlette) with the two limits stacked, against one keyed limit alone.

Every limiter is configured so that no request is ever denied during a run.
"""

from __future__ import annotations

import argparse

from bench_web import HUGE, asgi_case, starlette_app
from protocol_in_code._native import _check_together
from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.asgi import RateLimitMiddleware, Route
from protocol_in_code.qos.stack import Part, check_together
from timing import median_ns


def limits() -> dict[str, object]:
    return {
        "everyone": RateLimiter(HUGE),
        "per_client": KeyedRateLimiter(HUGE),
        "key": "203.0.113.9",
        "Part": Part,
        "check_together": check_together,
        "native": _check_together,
    }


def stacked() -> tuple[str, dict[str, object]]:
    return "check_together([Part(everyone), Part(per_client, key)])", limits()


def native() -> tuple[str, dict[str, object]]:
    return "native([(everyone, None, 1, None), (per_client, key, 1, None)])", limits()


def one_after_the_other() -> tuple[str, dict[str, object]]:
    return "everyone.check(); per_client.check(key)", limits()


def middleware_one() -> tuple[str, dict[str, object], int]:
    return asgi_case(RateLimitMiddleware(starlette_app(), KeyedRateLimiter(HUGE)))


def middleware_stacked() -> tuple[str, dict[str, object], int]:
    app = RateLimitMiddleware(
        starlette_app(),
        RateLimiter(HUGE),
        name="global",
        routes=[Route("/", KeyedRateLimiter(HUGE), name="client")],
        stack=True,
    )
    return asgi_case(app)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    calls = median_ns(
        {
            "check_together, two parts": stacked,
            "_check_together (native), two parts": native,
            "check() then check(key), not together": one_after_the_other,
        },
        args.rounds,
        20_000,
    )
    base = calls["check() then check(key), not together"]
    print(f"| {'call':<40} | {'ns':>8} | {'ratio':>6} |")
    print(f"|{'-' * 42}|{'-' * 9}:|{'-' * 7}:|")
    for name, ns in calls.items():
        print(f"| {name:<40} | {ns:>8.0f} | {ns / base:>6.2f} |")
    web = median_ns(
        {
            "ASGI, one keyed limit": middleware_one,
            "ASGI, global + client stacked": middleware_stacked,
        },
        args.rounds,
        2_000,
    )
    base = web["ASGI, one keyed limit"]
    print(f"\n| {'middleware':<40} | {'µs/request':>10} | {'added':>8} |")
    print(f"|{'-' * 42}|{'-' * 11}:|{'-' * 9}:|")
    for name, ns in web.items():
        print(f"| {name:<40} | {ns / 1000:>10.1f} | {(ns - base) / 1000:>6.1f}µs |")


if __name__ == "__main__":
    main()
