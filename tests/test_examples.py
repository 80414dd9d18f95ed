"""The course walkthroughs run unchanged and print exactly what the pure-Python package prints.

Each ``examples/qos/session_0N_walkthrough.py`` runs as a learner runs it (repo root as cwd,
``PYTHONPATH=src``, this interpreter): exit 0, every non-blank line starts with ``[OK]``. It then
runs against a copy of the reference installed as ``protocol_in_code.qos`` and must print
byte-identical output. With ``QOS_IMPL=reference`` the first run uses a reference copy too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from qos_support import REPO_ROOT, install_reference_copy, reference_mode

EXAMPLES = REPO_ROOT / "examples" / "qos"
# A line each walkthrough must print (with its [OK] prefix).
SCRIPTS = {
    "session_01_walkthrough.py": (
        "TokenBucket(capacity=5, tokens=4, rate_per_sec=1, last_refill_at=100)"
    ),
    "session_02_walkthrough.py": "RefillResult(tokens=10, last_refill_at=5)",
    "session_03_walkthrough.py": (
        "LeakyBucket(capacity=10, level=0, leak_per_sec=2, last_leak_at=100)"
    ),
    "session_04_walkthrough.py": "detail='default: children claim 120 > guaranteed 100'",
    "session_05_walkthrough.py": ("'enqueue video size=2 at t=0: Throttled (tokens_remaining=1)'"),
}
# Every walkthrough on disk is run; the five of the track must be there.
NAMES = sorted(set(SCRIPTS) | {p.name for p in EXAMPLES.glob("session_*_walkthrough.py")})
PROBE = (
    "import importlib, types\n"
    "for module, names in {\n"
    "    'refill': ['compute_refill'], 'token_bucket': ['try_consume'],\n"
    "    'leaky_bucket': ['leak', 'offer'], 'classes': ['validate_tree', 'borrowable'],\n"
    "    'shaper_loop': ['run_contention'],\n"
    "}.items():\n"
    "    m = importlib.import_module('protocol_in_code.qos.' + module)\n"
    "    for name in names:\n"
    "        assert not isinstance(getattr(m, name), types.FunctionType), m.__file__\n"
)

# Mutations of the reference copy that each walkthrough's checks must catch: (file, old, new).
FLOAT_REFILL = (
    "refill.py",
    "    capped = min(grown, capacity)\n    return",
    "    capped = float(min(grown, capacity))\n    return",
)
MUTATIONS = {
    "session_01_walkthrough.py": [FLOAT_REFILL],
    "session_02_walkthrough.py": [FLOAT_REFILL],
    "session_03_walkthrough.py": [
        FLOAT_REFILL,
        ("leaky_bucket.py", "max(bucket.level", "float(bucket.level) + 0 * max(bucket.level"),
        (
            "leaky_bucket.py",
            "bucket.level + n > bucket.capacity",
            "bucket.level + n >= bucket.capacity",
        ),
        ("leaky_bucket.py", "    bucket.last_leak_at = now\n", "\n"),
    ],
    "session_04_walkthrough.py": [
        ("classes.py", "total += max(", "total += float() + max("),
        ("classes.py", '"cycle reached at {name}"', '"cycle at {name}"'),
        (
            "classes.py",
            "if claimed > parent.guaranteed_rate",
            "if claimed >= parent.guaranteed_rate",
        ),
        ("classes.py", "ValidationOutcome.UNKNOWN_PARENT, f", "ValidationOutcome.CYCLE, f"),
    ],
    "session_05_walkthrough.py": [
        FLOAT_REFILL,
        ("shaper_loop.py", "size={size} at", "size {size} at"),
        ("shaper_loop.py", "self.clock += seconds", "self.clock = seconds"),
        ("shaper_loop.py", "bucket = self.buckets[class_name]", "bucket = self.buckets['video']"),
    ],
}


def run_python(args: list[str], pythonpath: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, timeout=300
    )


def explain(proc: subprocess.CompletedProcess) -> str:
    return (
        f"exit status {proc.returncode}\n--- stdout ---\n{proc.stdout.decode(errors='replace')}"
        f"--- stderr ---\n{proc.stderr.decode(errors='replace')}"
    )


@pytest.fixture(scope="session")
def under_test_pythonpath(tmp_path_factory) -> str:
    """PYTHONPATH for the run under test: ``src`` (native) or a reference copy."""
    if reference_mode():
        return str(install_reference_copy(tmp_path_factory.mktemp("under_test")))
    probe = run_python(["-c", PROBE], "src")
    if probe.returncode != 0:
        pytest.fail(
            "the native package protocol_in_code.qos cannot be imported by "
            f"`PYTHONPATH=src {sys.executable}` from the repository root (or is not the native "
            "build); install it first (e.g. `pip install .`), or set QOS_IMPL=reference.\n"
            + explain(probe),
            pytrace=False,
        )
    return "src"


@pytest.fixture(scope="session")
def reference_pythonpath(tmp_path_factory) -> str:
    return str(install_reference_copy(tmp_path_factory.mktemp("reference")))


@pytest.mark.parametrize("name", NAMES)
def test_walkthrough_prints_only_ok_lines_and_matches_the_reference(
    name, under_test_pythonpath, reference_pythonpath
):
    script = str(EXAMPLES / name)
    got = run_python([script], under_test_pythonpath)
    assert got.returncode == 0, explain(got)
    text = got.stdout.decode()
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) >= 5, explain(got)
    bad = [line for line in lines if not line.startswith("[OK] ")]
    assert not bad and "[NG]" not in text, explain(got)
    assert SCRIPTS.get(name, "") in text

    expected = run_python([script], reference_pythonpath)
    assert expected.returncode == 0, explain(expected)
    assert got.stdout == expected.stdout, (
        "output differs from the pure-Python package:\n"
        f"--- native ---\n{text}--- reference ---\n{expected.stdout.decode()}"
    )


@pytest.mark.parametrize(
    ("name", "mutation"),
    [(name, m) for name in NAMES for m in MUTATIONS.get(name, [FLOAT_REFILL])],
    ids=[f"{name}-{i}" for name in NAMES for i in range(len(MUTATIONS.get(name, [1])))],
)
def test_walkthrough_reports_a_wrong_implementation(name, mutation, tmp_path):
    """The checks have teeth: a subtly wrong course module gives [NG] and exit 1 (e.g. a refill
    that turns ints into floats, a leak that forgets its time, a cycle detail reworded)."""
    root = install_reference_copy(tmp_path)
    file, old, new = mutation
    path = root / "protocol_in_code" / "qos" / file
    source = path.read_text()
    assert source.count(old) == 1, f"{old!r} not found once in {file}"
    path.write_text(source.replace(old, new))
    proc = run_python([str(EXAMPLES / name)], str(root))
    assert proc.returncode == 1, explain(proc)
    assert "[NG] " in proc.stdout.decode(), explain(proc)


@pytest.mark.parametrize("name", NAMES)
def test_walkthrough_imports_only_the_course_package(name):
    tree = ast.parse((EXAMPLES / name).read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), "a walkthrough starts with a docstring saying what it teaches"
    assert f"python3 examples/qos/{name}" in ast.get_docstring(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            assert module.startswith("protocol_in_code.qos") or (
                top in sys.stdlib_module_names and top != "protocol_in_code"
            ), f"{name} imports {module}"


def test_tmp_copy_layout(tmp_path):
    root = install_reference_copy(tmp_path)
    assert (root / "protocol_in_code" / "__init__.py").read_text() == ""
    assert sorted(p.name for p in (root / "protocol_in_code" / "qos").iterdir()) == [
        "__init__.py",
        "classes.py",
        "leaky_bucket.py",
        "refill.py",
        "shaper_loop.py",
        "token_bucket.py",
    ]


def test_all_five_sessions_have_a_walkthrough():
    assert set(SCRIPTS) <= set(NAMES) and len(SCRIPTS) == 5
    assert set(MUTATIONS) == set(SCRIPTS)
