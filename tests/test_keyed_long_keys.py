"""Long keys of a keyed limiter: ``max_keys`` bounds the table's bytes, not only its keys.

* Memory: in a fresh interpreter, 4,000 distinct keys of 60 KB each (``str``, ``bytes``, a tuple
  holding such a ``str``, an int of 60 KB) grow the resident memory by less than 40 MiB; kept
  whole they took 235 MiB. A key longer than 128 bytes (a str's UTF-8, bytes, an int's bytes, a
  tuple's items encoded) is stored as a 128-bit digest seeded per table.
* Equality is unchanged: a long key is one key with every key equal to it (a ``str`` subclass,
  a namedtuple, ``1.0`` for ``1`` in a tuple), and two with the same text as ``bytes``, with a
  key one character longer or different in its last character, and with a short key.
* What the table gives back: a key up to 128 bytes comes back from iteration as itself, a longer
  one as a ``KeyDigest(kind, digest)``, which every call takes for the key it stands for, in
  its table and that table's copies; in another table it is a key of its own.
* Pickling keeps long keys (the digest is saved, with the seed it was made under), and a state
  saved with a long key whole (as before digests) restores it as its digest.
"""

from __future__ import annotations

import collections
import copy
import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import protocol_in_code.qos.keyed as keyed
import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import KeyedRateLimiter, LimitOutcome

LONGEST_KEPT = 128  # bytes: a longer key is stored as its digest
KEY_BYTES = 60 * 1024
KEYS = 4_000
# Measured here: 0.6 MiB of growth for each kind (about 150 bytes per key, the table's entries
# and their slack); kept whole, the same keys took 235 MiB (61,700 bytes per key).
GROWTH_BOUND_MIB = 40

Point = collections.namedtuple("Point", "route client")


class Str(str):
    """A str subclass, equal to the plain str."""


def table(size: int = 100) -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=1, max_keys=size, shards=1)


def one_key_table(burst: int) -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=burst, max_keys=100, shards=1)


MEMORY_SCRIPT = textwrap.dedent(
    """
    import gc, json, os, sys
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    kind, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    def key(i):
        # Distinct from their first bytes on, so that no prefix is shared.
        head = i.to_bytes(8, "little")
        if kind == "str":
            return head.hex() + "k" * (size - 16)
        if kind == "bytes":
            return head + b"k" * (size - 8)
        if kind == "tuple":
            return ("route", head.hex() + "k" * (size - 16))
        return int.from_bytes(head + b"k" * (size - 8), "little")

    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    limiter = KeyedRateLimiter(1, burst=1, max_keys=count + 1)
    limiter.try_acquire(key(count), now_ns=0)  # the table and its code are in memory
    gc.collect()
    before = resident()
    for i in range(count):
        assert limiter.try_acquire(key(i), now_ns=0)
    gc.collect()
    after = resident()
    found = all(key(i) in limiter for i in range(0, count, 97))
    print(json.dumps({"growth": after - before, "len": len(limiter), "found": found,
                      "again": limiter.try_acquire(key(0), now_ns=0)}))
    """
)


@pytest.mark.parametrize("kind", ["str", "bytes", "tuple", "int"])
def test_distinct_long_keys_cost_what_short_keys_do(kind: str) -> None:
    # A subprocess, so that nothing else this process did is counted; tracemalloc would not
    # see the table's own allocations, which are Rust's.
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, kind, str(KEYS), str(KEY_BYTES)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parent,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    growth_mib = result["growth"] / 2**20
    print(
        f"\n{KEYS:,} distinct {kind} keys of {KEY_BYTES:,} bytes: resident memory grew by "
        f"{growth_mib:.1f} MiB ({result['growth'] / KEYS:.0f} bytes per key)"
    )
    assert result["len"] == KEYS + 1 and result["found"] and result["again"] is False, result
    assert growth_mib < GROWTH_BOUND_MIB, f"{growth_mib:.1f} MiB for {KEYS} keys"


LONG = "é" * 100  # 200 bytes of UTF-8
LONG_INT = int.from_bytes(b"\x01" * 300, "little")


@pytest.mark.parametrize(
    "group",
    [
        [LONG, Str(LONG), "é" * 50 + "é" * 50],
        [LONG.encode(), bytes(bytearray(LONG.encode()))],
        [("route", LONG), Point("route", Str(LONG)), ("route", "é" * 100)],
        [(1, b"x" * 200), (1.0, b"x" * 200), (True, b"x" * 200)],
        [LONG_INT, LONG_INT + 0, (LONG_INT * 2) // 2],
        [-LONG_INT, -(LONG_INT + 0)],
    ],
    ids=lambda group: f"{type(group[0]).__name__}",
)
def test_a_long_key_is_one_key_with_every_key_equal_to_it(group: list[Any]) -> None:
    qos_support.assert_one_key(group, one_key_table)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (LONG, LONG.encode()),  # text and bytes are two keys, long or short
        ("x" * 200, b"x" * 200),
        (LONG, LONG[:-1] + "e"),
        (LONG, LONG + "é"),
        ("x" * LONGEST_KEPT, "x" * (LONGEST_KEPT + 1)),
        (b"x" * LONGEST_KEPT, b"x" * (LONGEST_KEPT + 1)),
        (("x" * 200,), "x" * 200),
        ((b"x" * 200,), (b"x" * 200, b"")),
        (LONG_INT, -LONG_INT),
        (LONG_INT, LONG_INT + 1),
        (LONG_INT, LONG_INT.to_bytes(300, "little", signed=True)),  # the bytes it is kept as
    ],
    ids=lambda value: f"{type(value).__name__}",
)
def test_long_keys_are_different_keys_when_python_says_so(a: Any, b: Any) -> None:
    qos_support.assert_two_keys(a, b, table())


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("x" * (LONGEST_KEPT + 1), "str"),
        ("é" * 65, "str"),  # 65 characters, 130 bytes
        (b"x" * (LONGEST_KEPT + 1), "bytes"),
        (("route", "x" * 200), "tuple"),
        (tuple(range(20)), "tuple"),  # 20 items of 9 bytes each
        (LONG_INT, "int"),
    ],
    ids=["str", "str of 130 bytes", "bytes", "tuple holding a str", "tuple of 20 ints", "int"],
)
def test_a_key_longer_than_128_bytes_comes_back_as_its_digest(key: Any, kind: str) -> None:
    limiter = table()
    assert limiter.try_acquire(key, now_ns=0)
    (digest,) = list(limiter)
    assert type(digest) is keyed.KeyDigest
    assert digest.kind == kind and type(digest.digest) is bytes and len(digest.digest) == 16
    assert digest == keyed.KeyDigest(kind, digest.digest) and hash(digest) == hash(
        keyed.KeyDigest(kind, digest.digest)
    )
    # It stands for the key: the same bucket, whichever is asked.
    assert digest in limiter
    assert limiter.check(digest, now_ns=0).outcome is LimitOutcome.DENIED
    assert limiter.available(digest, now_ns=0) == limiter.available(key, now_ns=0) == 0
    limiter.refund(digest, now_ns=0)
    assert limiter.try_acquire(key, now_ns=0)
    assert len(limiter) == 1


@pytest.mark.parametrize(
    "key",
    [
        "x" * LONGEST_KEPT,
        "é" * 64,  # 128 bytes
        b"x" * LONGEST_KEPT,
        ("x" * (LONGEST_KEPT - 9),),  # one item: its 9-byte header and 119 bytes
        2**1000,
        tuple(range(14)),  # 126 bytes
    ],
    ids=lambda key: f"{type(key).__name__}",
)
def test_a_key_of_at_most_128_bytes_comes_back_as_itself(key: Any) -> None:
    limiter = table()
    assert limiter.try_acquire(key, now_ns=0)
    assert list(limiter) == [key] and type(next(iter(limiter))) is type(key)


def test_a_digest_is_a_key_of_its_own_in_another_table() -> None:
    first, second = table(), table()
    first.try_acquire(LONG, now_ns=0)
    second.try_acquire(LONG, now_ns=0)
    (digest,) = list(first)
    (other,) = list(second)
    assert digest != other, "each table draws its own seed"
    assert digest not in second and other not in first
    assert second.try_acquire(digest, now_ns=0)
    assert len(second) == 2


@pytest.mark.parametrize(
    ("kind", "digest"),
    [
        ("str", b"\0" * 15),
        ("text", b"\0" * 16),
        (b"str", b"\0" * 16),
        ("str", memoryview(b"\0" * 16)),
    ],
    ids=repr,
)
def test_a_key_digest_no_table_could_give_is_a_key_like_any_object(kind: Any, digest: Any) -> None:
    record = keyed.KeyDigest(kind, digest)
    limiter = table()
    assert limiter.try_acquire(record, now_ns=0)
    assert record in limiter and limiter.try_acquire(record, now_ns=0) is False
    assert list(limiter) == [record]


def test_pickle_keeps_long_keys_and_their_digests() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=4)
    keys = [LONG, LONG.encode(), ("route", LONG), LONG_INT, "short", ("x" * 200, 1.5)]
    for key in keys:
        assert limiter.try_acquire(key, 2, now_ns=0)
    digests = {repr(key) for key in limiter}
    for restored in [pickle.loads(pickle.dumps(limiter)), copy.deepcopy(limiter)]:
        assert len(restored) == len(keys) and restored.stats == limiter.stats
        assert {repr(key) for key in restored} == digests
        for key in [*keys, *restored]:
            assert key in restored, key
            assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key
        assert "x" * 201 not in restored


def test_a_state_saved_with_a_long_key_whole_restores_it_as_its_digest() -> None:
    # Before long keys were digested, a saved entry held the whole key.
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=2)
    limiter.try_acquire("s", 2, now_ns=0)
    rebuild, args, (state, attributes) = limiter.__reduce__()
    seed, entries, latest, counts, origin = state
    ((_, _, balances),) = entries
    whole = [*entries, (LONG, None, balances), (("route", LONG), None, balances)]
    restored = rebuild(*args)
    restored.__setstate__(((seed, whole, latest, counts, origin), attributes))
    assert len(restored) == 3
    for key in [LONG, Str(LONG), ("route", LONG), "s"]:
        assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key
    kinds = sorted(key.kind for key in restored if type(key) is keyed.KeyDigest)
    assert kinds == ["str", "tuple"]
    # The whole key and its digest are one key: saved both, the state is refused.
    (digest,) = [key for key in restored if getattr(key, "kind", None) == "str"]
    fresh = rebuild(*args)
    twice = [*whole, (digest, None, balances)]
    with pytest.raises(ValueError, match="twice"):
        fresh.__setstate__(((seed, twice, latest, counts, origin), attributes))
    assert len(fresh) == 0


def test_long_keys_are_counted_as_any_key() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=3, shards=1)
    answers = [limiter.try_acquire(f"{i}" + "x" * 500, now_ns=0) for i in range(5)]
    answers.append(limiter.try_acquire("0" + "x" * 500, now_ns=0))
    assert answers == [True, True, True, False, False, False]
    stats = limiter.stats
    assert (stats.allowed, stats.denied, stats.refused) == (3, 1, 2)
    assert len(limiter) == 3
