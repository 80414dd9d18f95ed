"""Why a per-client limiter must not forget a throttled client: a flood, two tables, one attacker.

A server allows each client 1 request per second, in bursts of up to 5, and can remember at most
1,000 clients. An attacker spends its burst, then hides behind a flood of requests from 20,000
fresh addresses (a botnet, or spoofed keys), and asks again at once. Two tables face the same
traffic (explicit times, so every run is the same):

* an LRU table, the usual bounded cache: when full, it evicts the client seen least recently;
* ``KeyedRateLimiter``: when full, it forgets only clients whose buckets are full again (they are
  indistinguishable from new ones), and otherwise refuses the new client.

The LRU table evicts the throttled attacker to make room for the flood, and so hands it a fresh,
full bucket: its 5 extra requests all pass. ``KeyedRateLimiter`` refuses most of the flood
(fail closed), keeps the attacker throttled, and remembers no more clients than the LRU table.
Once a second has passed, the flood's clients have refilled and can be forgotten, and new
clients are served again.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/keyed_flood.py
"""

from __future__ import annotations

from collections import OrderedDict
from fractions import Fraction

from protocol_in_code.qos.keyed import KeyedRateLimiter

RATE, BURST, MAX_KEYS = 1, 5, 1_000
FLOOD = 20_000
NS = 1_000_000_000


class LruTable:
    """The usual bounded table: one lazily refilled bucket per key, the oldest key evicted."""

    def __init__(self) -> None:
        self.buckets: OrderedDict[str, tuple[Fraction, int]] = OrderedDict()

    def try_acquire(self, key: str, now_ns: int) -> bool:
        tokens, last = self.buckets.pop(key, (Fraction(BURST), now_ns))
        tokens = min(Fraction(BURST), tokens + Fraction(RATE * (now_ns - last), NS))
        allowed = tokens >= 1
        self.buckets[key] = (tokens - 1 if allowed else tokens, now_ns)
        if len(self.buckets) > MAX_KEYS:
            self.buckets.popitem(last=False)  # evict the least recently used key
        return allowed

    def __len__(self) -> int:
        return len(self.buckets)


def attack(table: LruTable | KeyedRateLimiter) -> list[int]:
    """Requests passed at each step: attacker's burst, flood, attacker again, later clients."""
    passed = [sum(table.try_acquire("attacker", now_ns=0) for _ in range(BURST))]
    passed.append(sum(table.try_acquire(f"bot-{i}", now_ns=1) for i in range(FLOOD)))
    passed.append(sum(table.try_acquire("attacker", now_ns=2) for _ in range(BURST)))
    later = 2 * NS  # every bot's bucket is full again
    passed.append(sum(table.try_acquire(f"late-{i}", now_ns=later) for i in range(100)))
    return passed


def main() -> None:
    lru = LruTable()
    keyed = KeyedRateLimiter(RATE, burst=BURST, max_keys=MAX_KEYS, shards=1)
    rows = [
        "attacker spends its burst",
        f"flood from {FLOOD} new addresses",
        "attacker asks again at once",
        "100 new clients, 2 s later",
    ]
    results = {"LRU table": attack(lru), "KeyedRateLimiter": attack(keyed)}
    print(f"{'requests passed':34} {'LRU table':>10} {'Keyed':>10}")
    for i, row in enumerate(rows):
        print(f"{row:34} {results['LRU table'][i]:>10} {results['KeyedRateLimiter'][i]:>10}")
    print(f"{'clients remembered at the end':34} {len(lru):>10} {len(keyed):>10}")
    print()
    print(f"KeyedRateLimiter: {keyed.stats}")


if __name__ == "__main__":
    main()
