"""The shipped type stubs agree with the native module, as mypy's stubtest sees them."""

from __future__ import annotations

import subprocess
import sys


def test_stubs_match_the_runtime(tmp_path):
    # Run from an empty folder so that only the installed package is found.
    completed = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "protocol_in_code"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
