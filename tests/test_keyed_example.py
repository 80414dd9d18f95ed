"""``examples/qos/keyed_flood.py`` runs as a reader runs it, and tells the truth.

Run from the repository root with ``PYTHONPATH=src`` and this interpreter: the LRU table lets
the throttled attacker off after the flood and the keyed limiter does not; the keyed limiter
refuses the flood beyond its room, serves new clients once the flood's buckets are full again,
and never remembers more than ``max_keys`` clients.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from qos_support import REPO_ROOT, reference_mode, skip_native_only

if reference_mode():
    skip_native_only("protocol_in_code.qos.keyed")

SCRIPT = REPO_ROOT / "examples" / "qos" / "keyed_flood.py"


def test_the_flood_example_shows_lru_letting_the_attacker_off() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT.relative_to(REPO_ROOT))],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": "src"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = {
        match[1].strip(): (int(match[2]), int(match[3]))
        for match in re.finditer(r"^(.+?)\s+(\d+)\s+(\d+)$", result.stdout, re.MULTILINE)
    }
    assert rows["attacker spends its burst"] == (5, 5)
    assert rows["flood from 20000 new addresses"] == (20_000, 999)  # room for 999 beside it
    assert rows["attacker asks again at once"] == (5, 0)
    assert rows["100 new clients, 2 s later"] == (100, 100)
    lru_kept, keyed_kept = rows["clients remembered at the end"]
    assert lru_kept == 1000 and keyed_kept == 101  # the attacker and the 100 new clients
    assert "KeyedStats(allowed=1104, denied=5, refused=19001, forgotten=999)" in result.stdout
    imports = re.findall(r"^from (\S+) import", SCRIPT.read_text(), re.MULTILINE)
    assert set(imports) <= {"__future__", "collections", "fractions", "protocol_in_code.qos.keyed"}
