"""Exact totals across processes: eight processes of threads and one asyncio process hammer one
key, and exactly the burst is admitted, every run; also with two bands, with client clocks
hours apart, and on a three-master cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
# A negligible rate: one token per 10^6 seconds refills nothing during a test.
SLOW = [1, 1000, 10**6]
ATTEMPTS = 50  # per thread: 8 processes x 4 threads x 50 + 4 tasks x 50 = 1800 > 1000


def hammer(port: int, key: str, bands: list[list[int]], skews: list[float], cluster: bool) -> int:
    """Run eight threaded workers and one asyncio worker at once; the total they admitted."""
    tail = ["cluster"] if cluster else []
    worker = [sys.executable, str(WORKER), str(port), key, json.dumps(bands)]
    commands = [
        [*worker, "sync", "4", str(ATTEMPTS), str(skews[i % len(skews)]), *tail] for i in range(8)
    ]
    commands.append([*worker, "async", "4", str(ATTEMPTS), str(skews[-1]), *tail])
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE) for command in commands]
    total = 0
    for process in processes:
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 0
        total += int(out)
    return total


CASES = {
    "one band": ([SLOW], [0.0]),
    "two bands": ([SLOW, [1, 1500, 10**6]], [0.0]),
    "clocks hours apart": ([SLOW], [0.0, 3 * 3600.0, -5 * 3600.0, 86400.0 * 365]),
}


@pytest.mark.parametrize("case", CASES)
def test_exactly_the_burst_is_admitted_across_processes(redis_server: Any, case: str) -> None:
    bands, skews = CASES[case]
    client = redis_server.client()
    client.flushall()
    assert hammer(redis_server.port, "shared", bands, skews, cluster=False) == 1000
    client.close()


@pytest.mark.parametrize("case", ["one band", "two bands", "clocks hours apart"])
def test_exactly_the_burst_is_admitted_on_a_cluster(redis_cluster: Any, case: str) -> None:
    bands, skews = CASES[case]
    key = f"cluster-{case}"
    assert hammer(redis_cluster.nodes[0].port, key, bands, skews, cluster=True) == 1000
