"""``examples/qos/meter_trace.py`` runs as a reader runs it, and its table is right.

The script runs from the repository root with ``PYTHONPATH=src`` and this interpreter, writing
its picture into a temporary directory: exit 0, the trace line, a colour table with one row per
meter whose packets and bytes add up to the trace. The numbers in the table are checked
against marking the same trace one packet at a time. With matplotlib installed the PNG must be
written; a second run with matplotlib hidden must print the one "skipped" line instead (so the
script never needs matplotlib).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from qos_support import REPO_ROOT, reference_mode, skip_native_only

if reference_mode():
    skip_native_only("protocol_in_code.qos.meter")

from protocol_in_code.qos.meter import COLORS

SCRIPT = REPO_ROOT / "examples" / "qos" / "meter_trace.py"
METER_ROWS = ("srTCM (RFC 2697)", "trTCM (RFC 2698)", "RFC 4115")
HIDE_MATPLOTLIB = (
    "import runpy, sys; sys.modules['matplotlib'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": "src"}
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def load_script() -> object:
    spec = importlib.util.spec_from_file_location("meter_trace_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_table(stdout: str) -> tuple[int, int, dict[str, list[tuple[int, int]]]]:
    """(packets, bytes, {meter: [(packets, bytes) per colour]}) from the printed output."""
    trace = re.search(r"^trace: ([\d,]+) packets, ([\d,]+) bytes", stdout, re.M)
    assert trace, stdout
    packets, nbytes = (int(group.replace(",", "")) for group in trace.groups())
    header = next(line for line in stdout.splitlines() if line.startswith("meter"))
    for colour in COLORS:
        assert f"{colour.value} pkts" in header and f"{colour.value} bytes" in header, header
    rows = {}
    for name in METER_ROWS:
        line = next((line for line in stdout.splitlines() if line.startswith(name)), None)
        assert line is not None, f"no row for {name}:\n{stdout}"
        cells = re.findall(r"([\d,]+)\s+([\d,]+) \(\s*[\d.]+%\)", line[len(name) :])
        assert len(cells) == 3, line
        rows[name] = [(int(p.replace(",", "")), int(b.replace(",", ""))) for p, b in cells]
    return packets, nbytes, rows


def check_table(stdout: str) -> None:
    packets, nbytes, rows = parse_table(stdout)
    example = load_script()
    sizes, times = example.bursty_trace()  # type: ignore[attr-defined]
    assert (packets, nbytes) == (len(sizes), sum(sizes))
    for (name, _, factory, _), row in zip(
        example.METERS,  # type: ignore[attr-defined]
        rows.values(),
        strict=True,
    ):
        assert sum(p for p, _ in row) == packets and sum(b for _, b in row) == nbytes, name
        meter = factory()
        expected = [[0, 0] for _ in COLORS]
        for size, now in zip(sizes, times, strict=True):
            cell = expected[COLORS.index(meter.mark(size, now))]
            cell[0] += 1
            cell[1] += size
        assert row == [tuple(cell) for cell in expected], name
    # Every meter gives each colour to some packet: the trace is meant to show all three.
    assert all(p > 0 for row in rows.values() for p, _ in row), rows


def test_the_example_prints_the_table_and_draws_when_it_can(tmp_path: Path) -> None:
    picture = tmp_path / "timeline" / "meter_trace.png"
    done = run(str(SCRIPT), str(picture))
    assert done.returncode == 0, done.stderr
    check_table(done.stdout)
    if importlib.util.find_spec("matplotlib") is None:
        assert "the picture" in done.stdout and "was skipped" in done.stdout
        assert not picture.exists()
    else:
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"picture: {picture}" in done.stdout


def test_the_example_needs_no_matplotlib(tmp_path: Path) -> None:
    picture = tmp_path / "meter_trace.png"
    done = run("-c", HIDE_MATPLOTLIB, str(SCRIPT), str(picture))
    assert done.returncode == 0, done.stderr
    check_table(done.stdout)
    skipped = [line for line in done.stdout.splitlines() if "was skipped" in line]
    assert skipped == [f"matplotlib is not installed: the picture ({picture}) was skipped"]
    assert not picture.exists()
