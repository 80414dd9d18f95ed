"""Package layout: what ``protocol_in_code.qos`` exports, and the lesson's import-layout rule.

The refill layer never names a bucket: no ``TokenBucket`` in the refill module (Python) nor in
the Rust refill source, which also never imports pyo3 or the bucket module.
"""

from __future__ import annotations

import inspect
import pydoc
import re
import types
from pathlib import Path

import pytest
from qos_support import REPO_ROOT

EXPORTS = {
    "RefillResult",
    "compute_refill",
    "ConsumeOutcome",
    "ConsumeResult",
    "TokenBucket",
    "token_try_consume",
}


def test_star_import_gives_exactly_the_listed_names(impl):
    namespace: dict = {}
    exec(f"from {impl.qos.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == EXPORTS


def test_public_attributes_are_the_listed_names(impl):
    """Besides submodules, nothing public but the six names (``try_consume`` may stay bound
    where ``token_try_consume = try_consume`` was written in the package)."""
    public = {
        name
        for name, value in vars(impl.qos).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert EXPORTS <= public <= EXPORTS | {"try_consume"}
    if "try_consume" in public:
        assert impl.qos.try_consume is impl.token_bucket.try_consume
    if hasattr(impl.qos, "__all__"):
        assert sorted(impl.qos.__all__) == sorted(EXPORTS)


def test_exports_are_the_submodules_objects(impl):
    qos, refill, token_bucket = impl.qos, impl.refill, impl.token_bucket
    assert qos.token_try_consume is token_bucket.try_consume
    assert qos.compute_refill is refill.compute_refill
    assert qos.RefillResult is refill.RefillResult
    for name in ("ConsumeOutcome", "ConsumeResult", "TokenBucket"):
        assert getattr(qos, name) is getattr(token_bucket, name)
    assert refill.__name__ == "protocol_in_code.qos.refill"
    assert token_bucket.__name__ == "protocol_in_code.qos.token_bucket"


def test_function_names(impl):
    assert impl.compute_refill.__name__ == "compute_refill"
    assert impl.try_consume.__name__ == "try_consume"
    assert impl.qos.token_try_consume.__name__ == "try_consume"


def test_refill_module_knows_nothing_of_buckets(impl):
    refill = impl.refill
    assert not hasattr(refill, "TokenBucket")
    assert not hasattr(refill, "try_consume")
    assert not any(
        isinstance(v, types.ModuleType) and v.__name__.endswith("token_bucket")
        for v in vars(refill).values()
    )
    source = Path(refill.__file__)
    if source.suffix == ".py":
        assert "TokenBucket" not in source.read_text(encoding="utf-8"), source


def test_lesson_is_in_the_docstrings_and_help(impl):
    for module in (impl.refill, impl.token_bucket):
        assert module.__doc__ and module.__doc__.strip(), module.__name__
    for obj in (impl.compute_refill, impl.try_consume):
        assert obj.__doc__ and obj.__doc__.strip(), obj
        assert obj.__name__ in pydoc.render_doc(obj, renderer=pydoc.plaintext)
    assert "elapsed" in inspect.getdoc(impl.compute_refill)


def _code_lines(path: Path) -> list[str]:
    """Rust source without comments (doc comments may well explain what is *not* imported)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [line.split("//", 1)[0] for line in text.splitlines()]


def test_rust_refill_core_is_pure(impl):
    """Every ``refill.rs`` under src/ (core and glue alike) never names TokenBucket, and at least
    one of them, the core, is pure math: no pyo3 and no bucket module in its code."""
    sources = sorted(
        p
        for p in (REPO_ROOT / "src").rglob("*.rs")
        if p.stem == "refill" or p.parent.name == "refill"
    )
    if not sources:
        if impl.name == "reference":
            pytest.skip("no Rust refill source in src/ (testing the reference)")
        pytest.fail(
            "no src/**/refill.rs (or src/**/refill/*.rs): the issue asks for a refill module"
        )
    for path in sources:
        assert "TokenBucket" not in path.read_text(encoding="utf-8"), f"{path} names TokenBucket"

    def pure(path: Path) -> bool:
        code = "\n".join(_code_lines(path))
        return not re.search(r"\bpyo3\b|\btoken_bucket\b|\bbucket::", code)

    assert any(pure(p) for p in sources), f"no pure refill module among {sources}"
