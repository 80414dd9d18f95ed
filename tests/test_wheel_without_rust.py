"""The package installs and runs from a wheel where no Rust toolchain exists (issue 14).

A wheel of this source is found or built, installed into a fresh virtual environment with no
package index and a ``PATH`` on which neither ``cargo`` nor ``rustc`` can be found, and the
lazy-refill walkthrough runs there: every line ``[OK]``, from the package in that environment.

The wheel ``pip install .`` has just built is reused when it is newer than every file it is
built from (maturin leaves it in ``target/wheels``); otherwise one is built with
``pip wheel``, which after that install recompiles nothing. Either way the test adds a few
seconds to the suite, most of them making the virtual environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from qos_support import REPO_ROOT, reference_mode

pytestmark = pytest.mark.packaging

if reference_mode():
    pytest.skip("the wheel holds the native package", allow_module_level=True)

#: The files a wheel is built from: one newer than the wheel makes it stale.
SOURCES = ("src", "python", "Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md")
#: Generous bounds, so that a hung step fails the test instead of the suite.
BUILD_TIMEOUT_S = 1200
STEP_TIMEOUT_S = 300


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in SOURCES:
        path = REPO_ROOT / name
        files = path.rglob("*") if path.is_dir() else [path]
        newest = max([newest, *(f.stat().st_mtime for f in files if f.is_file())])
    return newest


def _wheel_tag() -> str:
    """The interpreter part of this Python's wheel names, such as ``cp311-cp311``."""
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{version}-{version}"


def _fresh_wheel() -> Path | None:
    """The wheel ``pip install .`` left in ``target/wheels``, if it is for this Python and
    newer than every source file."""
    pattern = f"protocol_in_code_qos-*-{_wheel_tag()}-*.whl"
    wheels = sorted((REPO_ROOT / "target" / "wheels").glob(pattern), key=os.path.getmtime)
    if wheels and wheels[-1].stat().st_mtime > _newest_source_mtime():
        return wheels[-1]
    return None


def _build_wheel(into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(into)],
        cwd=REPO_ROOT,
        check=True,
        timeout=BUILD_TIMEOUT_S,
    )
    (wheel,) = into.glob("protocol_in_code_qos-*.whl")
    return wheel


def _path_without_rust(venv_bin: Path) -> str:
    """The environment's ``bin`` first, then every directory of ``PATH`` with no ``cargo`` and
    no ``rustc`` in it."""
    kept = [
        directory
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory and not any((Path(directory) / tool).exists() for tool in ("cargo", "rustc"))
    ]
    return os.pathsep.join([str(venv_bin), *kept])


def test_a_wheel_installs_and_runs_the_walkthrough_without_rust(tmp_path: Path) -> None:
    wheel = _fresh_wheel() or _build_wheel(tmp_path / "dist")

    venv = tmp_path / "no-rust"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=STEP_TIMEOUT_S)
    bin_dir = Path(sysconfig.get_path("scripts", vars={"base": str(venv)}))
    python = bin_dir / "python"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("CARGO", "RUSTUP", "RUSTC", "MATURIN", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = _path_without_rust(bin_dir)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    assert shutil.which("cargo", path=env["PATH"]) is None
    assert shutil.which("rustc", path=env["PATH"]) is None

    # No index: everything comes from the wheel, and pip builds nothing.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        env=env,
        cwd=tmp_path,
        check=True,
        timeout=STEP_TIMEOUT_S,
    )

    # As the course runs it, PYTHONPATH=src, from a directory outside the repository.
    env["PYTHONPATH"] = str(REPO_ROOT / "src")
    walkthrough = REPO_ROOT / "examples" / "qos" / "session_02_walkthrough.py"
    run = subprocess.run(
        [str(python), str(walkthrough)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert lines, "the walkthrough printed nothing"
    assert all(line.startswith("[OK]") for line in lines), run.stdout
    assert "RefillResult(tokens=10, last_refill_at=5)" in run.stdout

    where = subprocess.run(
        [
            str(python),
            "-c",
            "import protocol_in_code.qos.refill as r, protocol_in_code._native as n;"
            "print(n.__file__); print(type(r.compute_refill).__name__)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=STEP_TIMEOUT_S,
    )
    native_file, kind = where.stdout.split()
    assert Path(native_file).is_relative_to(venv), native_file
    assert kind == "builtin_function_or_method", "compute_refill is the native one"
