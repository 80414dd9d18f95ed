"""settle.lua against the cases the Rust core worked out: ``tests/vectors/settle.json``.

Each case is a key's bands, its hash before one call (or no key), the call, and what the script
must do: its reply, the hash after the call, and the TTL the call sets. ``cargo test --test
settle_vectors`` works every case out again through the core (``tests/settle_vectors.rs`` says
how, and how to add a case); here each runs through the script on a real redis-server, so a
script that settles otherwise than the core fails here, and a core that settles otherwise than
the file fails there.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.distributed import _bands
from protocol_in_code.qos.distributed._server import SOURCE

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

VECTORS = json.loads((Path(__file__).parent / "vectors" / "settle.json").read_text())["vectors"]
RESERVE, GIVE_BACK = 5, 6
KEY = b"qos-test:vector"
#: How much a TTL may have run down between the call that set it and the read of it, in the same
#: transaction (the script counts from its own start): far more than that takes, loaded or not.
TTL_SLACK_MS = 1000


def arguments(case: dict[str, Any]) -> list[bytes]:
    """The script's ARGV for the case: the request, and the bands' canonical encoding."""
    call = case["request"]
    bands = [(Fraction(p, q), burst) for p, q, burst in case["bands"]]
    _, config = _bands.parse(None, None, None, bands, None)
    initial = None if call["initial"] < 0 else call["initial"]
    request = _bands.request(call["op"], call["n"], call["now"])
    request += _bands.script_args(initial, call["least_ms"])
    if call["op"] in (RESERVE, GIVE_BACK):
        request += _bands.extra(call["extra"])
    return [request, config.encoding]


def plain(reply: Any) -> Any:
    """A reply as the file writes it: text for bytes, lists all the way down."""
    if isinstance(reply, bytes):
        return reply.decode()
    if isinstance(reply, list):
        return [plain(item) for item in reply]
    return reply


def run(redis_client: Any, source: str, case: dict[str, Any]) -> tuple[Any, dict[str, int], int]:
    """The case's call through ``source``: its reply, the key's hash after it, and its TTL
    (``PTTL``: -1 none, -2 no key), read in the call's transaction."""
    redis_client.delete(KEY)
    if case["before"] is not None:
        redis_client.hset(KEY, mapping=case["before"])
    call = redis_client.pipeline(transaction=True)
    call.eval(source, 1, KEY, *arguments(case))
    call.hgetall(KEY)
    call.pttl(KEY)
    reply, after, ttl_ms = call.execute()
    return plain(reply), {name.decode(): int(value) for name, value in after.items()}, ttl_ms


def ttl_as_set(case: dict[str, Any], ttl_ms: int) -> bool:
    """Whether a TTL read just after the call is the one the case says it sets."""
    if case["ttl_ms"] is None:
        # No TTL set: the key is absent, or as it was (written here without one).
        return ttl_ms == (-2 if case["after"] is None else -1)
    return bool(case["ttl_ms"] - TTL_SLACK_MS < ttl_ms <= case["ttl_ms"])


@pytest.mark.parametrize("case", VECTORS, ids=[case["name"] for case in VECTORS])
def test_the_script_settles_as_the_core(redis_client: Any, case: dict[str, Any]) -> None:
    reply, after, ttl_ms = run(redis_client, SOURCE, case)
    assert reply == case["reply"]
    assert after == (case["after"] or {})
    assert ttl_as_set(case, ttl_ms), (ttl_ms, case["ttl_ms"])


def test_the_script_reads_the_encoding_the_client_writes() -> None:
    """The configuration's header, as the script names it, is the canonical encoding's."""
    _, config = _bands.parse(1, 1, 1, None, None)
    version, per_band = config.encoding[:2]
    assert f"local CONFIG_VERSION, FIELDS_PER_BAND = {version}, {per_band}\n" in SOURCE


@pytest.mark.parametrize(
    ("constant", "changed"),
    [
        ("local MICROS_PER_SECOND = 1000000", "local MICROS_PER_SECOND = 999999"),
        ("local MICROS_PER_MS = 1000", "local MICROS_PER_MS = 1024"),
        ("local LAST = 4503599627370496", "local LAST = 4503599627370495"),
    ],
)
def test_the_vectors_catch_a_changed_constant(
    redis_client: Any, constant: str, changed: str
) -> None:
    """A script with one of its numbers changed disagrees with some of the core's cases."""
    assert SOURCE.count(constant) == 1
    source = SOURCE.replace(constant, changed)
    disagree = []
    for case in VECTORS:
        reply, after, ttl_ms = run(redis_client, source, case)
        if (reply, after) != (case["reply"], case["after"] or {}) or not ttl_as_set(case, ttl_ms):
            disagree.append(case["name"])
    assert disagree
