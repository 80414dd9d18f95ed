"""Package layout: what ``protocol_in_code.qos`` exports, and the lesson's import-layout rules.

The refill layer never names a bucket: no ``TokenBucket`` in the refill module (Python) nor in
the Rust refill source, which also never imports pyo3 or the bucket module. The leak math has
the same layering: ``src/core/leak.rs`` names neither bucket type, never imports pyo3 nor a
bucket module, and ``src/core/leaky_bucket.rs`` is what imports it. The class-tree passes are
core Rust too (``src/core/classes.rs``, no pyo3).
"""

from __future__ import annotations

import inspect
import pydoc
import re
import types
from pathlib import Path

import pytest
from qos_support import REPO_ROOT, SUBMODULES

EXPORTS = {
    "RefillResult",
    "compute_refill",
    "ConsumeOutcome",
    "ConsumeResult",
    "TokenBucket",
    "token_try_consume",
    "LeakyBucket",
    "OfferOutcome",
    "OfferResult",
    "leaky_leak",
    "leaky_offer",
    "ClassTree",
    "TrafficClass",
    "ValidationOutcome",
    "ValidationResult",
    "borrowable",
    "validate_class_tree",
    "EnqueueResult",
    "ToyShaper",
    "run_contention",
}
# Past the course: the limiters and meters, exported beside the course's names by the native
# package only (the course's package has none of them).
SERVICE_EXPORTS = {
    "Band": "limiter",
    "Decision": "limiter",
    "LimitOutcome": "limiter",
    "RateLimiter": "limiter",
    "KeyedRateLimiter": "keyed",
    "KeyedStats": "keyed",
    "KeyDigest": "keyed",
    "Color": "meter",
    "SingleRateMeter": "meter",
    "TwoRateMeter": "meter",
    "ExcessRateMeter": "meter",
    "SharedRateLimiter": "shared",
    "SharedKeyedRateLimiter": "shared",
    "SharedConcurrencyLimiter": "shared",
    "SharedKeyedConcurrencyLimiter": "shared",
    "SharedLease": "shared",
    "Part": "stack",
    "Stacked": "stack",
    "check_together": "stack",
    "check_together_async": "stack",
    "ConcurrencyLimiter": "concurrency",
    "KeyedConcurrencyLimiter": "concurrency",
    "Lease": "concurrency",
}


def exports(impl) -> set[str]:
    """What ``impl``'s package exports: the course's names, and the services' if native."""
    return EXPORTS if impl.name == "reference" else EXPORTS | set(SERVICE_EXPORTS)


# Exported under another name: package alias -> (module, the module's name for it).
ALIASES = {
    "token_try_consume": ("token_bucket", "try_consume"),
    "leaky_leak": ("leaky_bucket", "leak"),
    "leaky_offer": ("leaky_bucket", "offer"),
    "validate_class_tree": ("classes", "validate_tree"),
}
# What each module defines (and, for the course's sake, nothing of the other modules' math).
MODULE_NAMES = {
    "refill": {"RefillResult", "compute_refill"},
    "token_bucket": {"ConsumeOutcome", "ConsumeResult", "TokenBucket", "try_consume"},
    "leaky_bucket": {"LeakyBucket", "OfferOutcome", "OfferResult", "leak", "offer"},
    "classes": {
        "ClassTree", "TrafficClass", "ValidationOutcome", "ValidationResult", "borrowable",
        "validate_tree",
    },
    "shaper_loop": {"EnqueueResult", "ToyShaper", "run_contention"},
}  # fmt: skip


def test_star_import_gives_exactly_the_listed_names(impl):
    namespace: dict = {}
    exec(f"from {impl.qos.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == exports(impl)


def test_public_attributes_are_the_listed_names(impl):
    """Besides submodules, nothing public but the twenty names (the modules' own names of the
    aliased functions may stay bound where ``token_try_consume = try_consume`` was written)."""
    public = {
        name
        for name, value in vars(impl.qos).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    originals = {original: module for module, original in ALIASES.values()}
    assert exports(impl) <= public <= exports(impl) | set(originals)
    for name in public - exports(impl):
        assert getattr(impl.qos, name) is getattr(getattr(impl, originals[name]), name)


def test_dunder_all_is_exactly_the_listed_names(impl):
    assert isinstance(impl.qos.__all__, (list, tuple))
    assert sorted(impl.qos.__all__) == sorted(exports(impl))
    assert len(impl.qos.__all__) == len(exports(impl))


def test_the_services_are_the_submodules_objects_and_help_lists_them(impl, reference_mode):
    if reference_mode:
        pytest.skip("the course's package has no limiters")
    import importlib

    for name, module in SERVICE_EXPORTS.items():
        submodule = importlib.import_module(f"protocol_in_code.qos.{module}")
        assert getattr(impl.qos, name) is getattr(submodule, name), name
        assert name in pydoc.render_doc(impl.qos), f"help(protocol_in_code.qos) omits {name}"


def test_exports_are_the_submodules_objects(impl):
    for alias, (module, original) in ALIASES.items():
        assert getattr(impl.qos, alias) is getattr(getattr(impl, module), original), alias
    for module, names in MODULE_NAMES.items():
        mod = getattr(impl, module)
        assert mod.__name__ == f"protocol_in_code.qos.{module}"
        assert getattr(impl.qos, module) is mod
        for name in names:
            assert hasattr(mod, name), f"{mod.__name__} has no {name}"
            if name in EXPORTS:
                assert getattr(impl.qos, name) is getattr(mod, name), name
    assert set(MODULE_NAMES) == set(SUBMODULES)


@pytest.mark.parametrize("module", sorted(MODULE_NAMES))
def test_classes_live_in_their_course_module(impl, module):
    for name in MODULE_NAMES[module]:
        obj = getattr(getattr(impl, module), name)
        if isinstance(obj, type):
            assert obj.__module__ == f"protocol_in_code.qos.{module}", name
            assert obj.__name__ == name and obj.__qualname__ == name


def test_function_names(impl):
    assert impl.compute_refill.__name__ == "compute_refill"
    assert impl.try_consume.__name__ == "try_consume"
    for alias, (_, original) in ALIASES.items():
        assert getattr(impl.qos, alias).__name__ == original
    for name in ("leak", "offer", "validate_tree", "borrowable", "run_contention"):
        assert getattr(impl, name).__name__ == name


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
    for module in SUBMODULES:
        doc = getattr(impl, module).__doc__
        assert doc and doc.strip(), module
    for obj in (
        impl.compute_refill, impl.try_consume, impl.leak, impl.offer, impl.validate_tree,
        impl.borrowable, impl.run_contention, impl.ToyShaper.enqueue, impl.ToyShaper.tick,
    ):  # fmt: skip
        assert obj.__doc__ and obj.__doc__.strip(), obj
        assert obj.__name__ in pydoc.render_doc(obj, renderer=pydoc.plaintext)
    assert "elapsed" in inspect.getdoc(impl.compute_refill)
    # Each session's idea, in the words of its module docstring.
    assert "token" in impl.leaky_bucket.__doc__.lower()  # the leaky/token comparison
    assert "pass" in impl.classes.__doc__.lower()  # the three validation passes
    assert "bucket per class" in impl.shaper_loop.__doc__.lower()  # isolation


def test_leaky_module_knows_nothing_of_the_other_sessions(impl):
    """The leaky bucket stands on its own, like the token bucket: no refill, no token bucket."""
    names = set(vars(impl.leaky_bucket))
    assert not names & {"compute_refill", "TokenBucket", "try_consume", "ToyShaper"}


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


def _rust(path: str, impl) -> Path:
    source = REPO_ROOT / path
    if not source.exists():
        if impl.name == "reference":
            pytest.skip(f"no {path} (testing the reference)")
        pytest.fail(f"no {path}: the issue asks for this core module")
    return source


def test_rust_leak_core_is_pure(impl):
    """``src/core/leak.rs`` is the leak math alone: it never names ``LeakyBucket`` or
    ``TokenBucket`` (not even in comments: the lesson's grep rule), and its code imports
    neither pyo3 nor a bucket module."""
    path = _rust("src/core/leak.rs", impl)
    text = path.read_text(encoding="utf-8")
    for name in ("LeakyBucket", "TokenBucket"):
        assert name not in text, f"{path} names {name}"
    code = "\n".join(_code_lines(path))
    found = re.findall(r"\bpyo3\b|\bleaky_bucket\b|\btoken_bucket\b|\bbucket::", code)
    assert not found, f"{path} code mentions {found}"


def test_rust_leaky_bucket_imports_the_leak_math(impl):
    path = _rust("src/core/leaky_bucket.rs", impl)
    code = "\n".join(_code_lines(path))
    assert re.search(r"\buse\s+(crate::core::|super::|crate::)?leak::", code), (
        f"{path} does not import the leak module"
    )
    assert not re.search(r"\bpyo3\b", code), f"{path} imports pyo3"


def test_rust_class_tree_core_is_pure(impl):
    path = _rust("src/core/classes.rs", impl)
    assert not re.search(r"\bpyo3\b", "\n".join(_code_lines(path))), f"{path} imports pyo3"
