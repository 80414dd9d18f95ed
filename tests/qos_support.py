"""Shared helpers for the QoS tests: loading the implementation, comparing values, number zoo.

The implementation under test is the installed native ``protocol_in_code.qos`` unless the
environment variable ``QOS_IMPL=reference`` is set, in which case the pure-Python reference in
``tests/reference_qos`` is loaded *as* ``protocol_in_code.qos`` (so ``__module__``, pickle paths
and reprs read the same as for the real package). The reference itself is always importable as
``reference_qos``.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import os
import re
import shutil
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
REFERENCE_DIR = TESTS_DIR / "reference_qos"
PACKAGE = "protocol_in_code"
QOS = "protocol_in_code.qos"
# The course's modules, in session order of what they build on.
SUBMODULES = ("refill", "token_bucket", "leaky_bucket", "classes", "shaper_loop")
# What each module must provide as native code, not as a Python function (names of functions,
# or "Class.method").
NATIVE_CALLABLES = {
    "refill": ("compute_refill",),
    "token_bucket": ("try_consume",),
    "leaky_bucket": ("leak", "offer"),
    "classes": ("validate_tree", "borrowable"),
    "shaper_loop": ("run_contention", "ToyShaper.enqueue", "ToyShaper.tick"),
}

# ---------------------------------------------------------------------------------------------
# Which implementation is under test
# ---------------------------------------------------------------------------------------------


def mypy_strict(source: str, folder: Path) -> None:
    """Type-check ``source`` with ``mypy --strict`` in ``folder``, and fail with its report.

    ``--strict`` reports an ``ignore`` comment that is not needed, so a line marked
    ``# type: ignore[...]`` is checked to be refused, and every other line to be accepted."""
    import subprocess

    path = folder / "checked.py"
    path.write_text(source)
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def band_pairs(limiter: Any) -> tuple[tuple[Any, int], ...]:
    """A limiter's bands as ``(tokens per second, burst)`` pairs: what the models compare."""
    return tuple((band.per_second, band.burst) for band in limiter.bands)


def reference_mode() -> bool:
    """True when ``QOS_IMPL=reference``; ``QOS_IMPL`` unset, empty or ``native`` means native."""
    value = os.environ.get("QOS_IMPL", "").strip().lower()
    if value in ("", "native"):
        return False
    if value == "reference":
        return True
    raise RuntimeError(f"QOS_IMPL must be 'native' or 'reference', not {value!r}")


def skip_native_only(module: str) -> None:
    """Skip the calling test module, whose subject ``module`` has no pure-Python counterpart in
    ``tests/reference_qos``: call it when :func:`reference_mode` is on.
    """
    pytest.skip(
        f"{module} has no pure-Python reference in tests/reference_qos; "
        "its tests run against the native build only",
        allow_module_level=True,
    )


@dataclass(frozen=True)
class Impl:
    """The package and the five course modules of one implementation of ``protocol_in_code.qos``."""

    name: str
    qos: types.ModuleType
    refill: types.ModuleType
    token_bucket: types.ModuleType
    leaky_bucket: types.ModuleType
    classes: types.ModuleType
    shaper_loop: types.ModuleType

    # Shortcuts so tests can write impl.compute_refill, impl.TokenBucket, impl.offer, ...
    def __getattr__(self, attr: str) -> Any:
        for module in (*(getattr(self, m) for m in SUBMODULES), self.qos):
            if attr in vars(module):
                return vars(module)[attr]
        raise AttributeError(attr)


class NativeUnavailable(RuntimeError):
    """The native package could not be imported (or is not the native build)."""


_cache: dict[str, Any] = {}


def _load_reference_as_package() -> Impl:
    """Load tests/reference_qos as ``protocol_in_code.qos`` (with a bare parent package)."""
    parent = types.ModuleType(PACKAGE)
    parent.__path__ = []  # a namespace-like parent with nothing else in it
    sys.modules[PACKAGE] = parent
    spec = importlib.util.spec_from_file_location(
        QOS, REFERENCE_DIR / "__init__.py", submodule_search_locations=[str(REFERENCE_DIR)]
    )
    assert spec is not None and spec.loader is not None
    qos = importlib.util.module_from_spec(spec)
    sys.modules[QOS] = qos
    spec.loader.exec_module(qos)
    parent.qos = qos  # type: ignore[attr-defined]
    return Impl("reference", qos, *(sys.modules[f"{QOS}.{m}"] for m in SUBMODULES))


def _load_native() -> Impl:
    try:
        qos = importlib.import_module(QOS)
        modules = [importlib.import_module(f"{QOS}.{m}") for m in SUBMODULES]
    except ImportError as exc:
        raise NativeUnavailable(
            f"cannot import the native package {QOS!r}: {exc!r}.\n"
            "Build and install it first (e.g. `pip install .` from the repository root), "
            "or run the tests against the pure-Python reference with QOS_IMPL=reference."
        ) from exc
    for module in modules:
        for dotted in NATIVE_CALLABLES[module.__name__.rsplit(".", 1)[1]]:
            fn: Any = module
            for part in dotted.split("."):
                fn = getattr(fn, part, None)
            if fn is None or isinstance(fn, types.FunctionType):
                what = "missing" if fn is None else f"a pure-Python function ({fn!r})"
                raise NativeUnavailable(
                    f"{module.__name__}.{dotted} is {what} (module file "
                    f"{getattr(module, '__file__', '?')}); the tests expect the native build's "
                    "object. Set QOS_IMPL=reference to test the reference on purpose."
                )
    return Impl("native", qos, *modules)


def load_impl() -> Impl:
    """The implementation under test (cached); raises NativeUnavailable with a clear message."""
    if "impl" not in _cache:
        try:
            _cache["impl"] = _load_reference_as_package() if reference_mode() else _load_native()
        except NativeUnavailable as exc:
            _cache["impl"] = exc
    value = _cache["impl"]
    if isinstance(value, Exception):
        raise value
    return value


def load_reference() -> Impl:
    """The pure-Python reference, imported as its own package ``reference_qos``."""
    if "reference" not in _cache:
        if str(TESTS_DIR) not in sys.path:
            sys.path.insert(0, str(TESTS_DIR))
        qos = importlib.import_module("reference_qos")
        _cache["reference"] = Impl(
            "reference_qos",
            qos,
            *(importlib.import_module(f"reference_qos.{m}") for m in SUBMODULES),
        )
    return _cache["reference"]


def install_reference_copy(root: Path) -> Path:
    """Copy the reference to ``root/protocol_in_code/qos`` (empty parent ``__init__``)."""
    package = root / PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(
        REFERENCE_DIR, package / "qos", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    return root


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """If the process wedges (e.g. a deadlock or an endless loop with the GIL held, where no
    Python code can run any more, not even a join timeout), dump every thread's traceback and
    exit."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """Make the interpreter switch threads every ``seconds`` (restored after), so that races
    inside a call have every chance to show."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


# ---------------------------------------------------------------------------------------------
# Comparing values the way a course script could tell them apart
# ---------------------------------------------------------------------------------------------


def same_value(a: Any, b: Any) -> bool:
    """Same Python type and the same value, identity-insensitive, NaN equal to NaN.

    Floats and Decimals compare by ``repr`` (so nan == nan, but -0.0 != 0.0 and
    Decimal('1.0') != Decimal('1.00'): a script printing them would see the difference).
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, Traced):
        return a.label == b.label and same_value(a.v, b.v)
    if isinstance(a, (float, complex, Decimal)):
        return repr(a) == repr(b)
    if a is b:
        return True
    try:
        # NaN-like values of other types (e.g. numpy.float32) are equal to each other too.
        return bool(a == b) or bool(a != a and b != b)
    except Exception:
        return repr(a) == repr(b)


def describe(value: Any) -> str:
    return f"{value!r} ({type(value).__qualname__})"


@dataclass
class Outcome:
    """What a call did: returned ``value`` or raised ``exc``."""

    value: Any = None
    exc: BaseException | None = None

    @property
    def raised(self) -> bool:
        return self.exc is not None


def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Outcome:
    """Call ``fn(*args, **kwargs)`` and record whether it returned or raised."""
    try:
        return Outcome(value=fn(*args, **kwargs))
    except Exception as exc:
        return Outcome(exc=exc)


def assert_same_exception(ref: Outcome, got: Outcome, context: str = "") -> None:
    assert ref.raised == got.raised, (
        f"{context}reference {'raised ' + repr(ref.exc) if ref.raised else 'returned'}"
        f"{'' if ref.raised else ' ' + repr(ref.value)}, implementation "
        f"{'raised ' + repr(got.exc) if got.raised else 'returned ' + repr(got.value)}"
    )
    if ref.raised:
        assert type(got.exc) is type(ref.exc), (
            f"{context}reference raised {type(ref.exc).__qualname__}: {ref.exc}, "
            f"implementation raised {type(got.exc).__qualname__}: {got.exc}"
        )


def assert_same_fields(
    got: Any, want: Any, fields: tuple[str, ...], context: str = "", what: str = ""
) -> None:
    """Each field of ``got`` is ``same_value`` as the reference object's, and the reprs agree."""
    for field in fields:
        have, expected = getattr(got, field), getattr(want, field)
        assert same_value(have, expected), (
            f"{context}{what}.{field}: got {describe(have)}, reference {describe(expected)}"
        )
    assert repr(got) == repr(want), f"{context}{what}: repr {got!r} != reference {want!r}"


def call(fn: Callable[..., Any], names: tuple[str, ...], values: list[Any], style: Any) -> Any:
    """Call ``fn``: the first ``npos`` arguments positional, the rest by keyword in ``order``."""
    npos, order = style
    kwargs = {names[npos + i]: values[npos + i] for i in order}
    return fn(*values[:npos], **kwargs)


def call_styles(nargs: int) -> st.SearchStrategy[Any]:
    """(number of positional arguments, order of the keyword ones)."""
    return st.integers(0, nargs).flatmap(
        lambda npos: st.tuples(st.just(npos), st.permutations(list(range(nargs - npos))))
    )


# ---------------------------------------------------------------------------------------------
# The number zoo
# ---------------------------------------------------------------------------------------------


class BoomError(Exception):
    """Raised by the test numbers on purpose; the implementation must let it through as is."""


class Boom:
    """An object whose every arithmetic or ordering operation raises BoomError."""

    def __repr__(self) -> str:
        return "Boom()"

    def _boom(self, *args: Any) -> Any:
        raise BoomError("boom")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _boom
    __lt__ = __le__ = __gt__ = __ge__ = __isub__ = __iadd__ = _boom


class TaggedInt(int):
    """An int subclass whose arithmetic returns TaggedInt (so a fast path must not take it)."""

    def __repr__(self) -> str:
        return f"TaggedInt({int(self)})"

    def __add__(self, o: Any) -> Any:
        r = int.__add__(self, o)
        return r if r is NotImplemented else TaggedInt(r)

    def __radd__(self, o: Any) -> Any:
        r = int.__radd__(self, o)
        return r if r is NotImplemented else TaggedInt(r)

    def __sub__(self, o: Any) -> Any:
        r = int.__sub__(self, o)
        return r if r is NotImplemented else TaggedInt(r)

    def __rsub__(self, o: Any) -> Any:
        r = int.__rsub__(self, o)
        return r if r is NotImplemented else TaggedInt(r)

    def __mul__(self, o: Any) -> Any:
        r = int.__mul__(self, o)
        return r if r is NotImplemented else TaggedInt(r)

    def __rmul__(self, o: Any) -> Any:
        r = int.__rmul__(self, o)
        return r if r is NotImplemented else TaggedInt(r)


class TaggedFloat(float):
    """A float subclass with its own repr; arithmetic inherited (returns plain float)."""

    def __repr__(self) -> str:
        return f"TaggedFloat({float(self)!r})"


OPS = ("add", "radd", "sub", "rsub", "mul", "rmul", "lt", "le", "gt", "ge", "isub", "iadd")


def _label(x: Any) -> str:
    return x.label if isinstance(x, Traced) else repr(x)


class Traced:
    """A number that records every operation done on it in ``log`` and fails on request.

    Arithmetic returns a new Traced whose label spells the expression, so results show where
    they came from; comparisons return plain bools. Ops named in ``fail_on`` raise BoomError
    (after logging). Two runs doing the same Python operations in the same order produce
    equal logs.
    """

    __slots__ = ("fail_on", "label", "log", "v")

    def __init__(self, v: Any, label: str, log: list, fail_on: frozenset = frozenset()) -> None:
        self.v, self.label, self.log, self.fail_on = v, label, log, fail_on

    def __repr__(self) -> str:
        return f"Traced({self.v!r}, {self.label!r})"

    def _enter(self, op: str, other: Any) -> Any:
        self.log.append((op, self.label, _label(other)))
        if op in self.fail_on:
            raise BoomError(op)
        return other.v if isinstance(other, Traced) else other

    def _new(self, v: Any, label: str) -> Traced:
        return Traced(v, label, self.log, self.fail_on)

    def __add__(self, o: Any) -> Any:
        return self._new(self.v + self._enter("add", o), f"({self.label}+{_label(o)})")

    def __radd__(self, o: Any) -> Any:
        return self._new(self._enter("radd", o) + self.v, f"({_label(o)}+{self.label})")

    def __sub__(self, o: Any) -> Any:
        return self._new(self.v - self._enter("sub", o), f"({self.label}-{_label(o)})")

    def __rsub__(self, o: Any) -> Any:
        return self._new(self._enter("rsub", o) - self.v, f"({_label(o)}-{self.label})")

    def __mul__(self, o: Any) -> Any:
        return self._new(self.v * self._enter("mul", o), f"({self.label}*{_label(o)})")

    def __rmul__(self, o: Any) -> Any:
        return self._new(self._enter("rmul", o) * self.v, f"({_label(o)}*{self.label})")

    def __lt__(self, o: Any) -> Any:
        return self.v < self._enter("lt", o)

    def __le__(self, o: Any) -> Any:
        return self.v <= self._enter("le", o)

    def __gt__(self, o: Any) -> Any:
        return self.v > self._enter("gt", o)

    def __ge__(self, o: Any) -> Any:
        return self.v >= self._enter("ge", o)


class TracedInplace(Traced):
    """A Traced that also has ``__isub__`` and ``__iadd__`` (mutating itself), to tell ``-=``
    from ``- then =`` and ``+=`` from ``+ then =``."""

    __slots__ = ()

    def _new(self, v: Any, label: str) -> Traced:
        return TracedInplace(v, label, self.log, self.fail_on)

    def __isub__(self, o: Any) -> Any:
        ov = self._enter("isub", o)
        self.v = self.v - ov
        self.label = f"({self.label}-={_label(o)})"
        return self

    def __iadd__(self, o: Any) -> Any:
        ov = self._enter("iadd", o)
        self.v = self.v + ov
        self.label = f"({self.label}+={_label(o)})"
        return self


@dataclass(frozen=True)
class Fresh:
    """A recipe for a stateful number, made anew for each side of a differential test."""

    cls: type
    v: Any
    label: str
    fail_on: frozenset = frozenset()

    def make(self, log: list) -> Any:
        return self.cls(self.v, self.label, log, self.fail_on)

    def __repr__(self) -> str:
        fail = f", fail_on={sorted(self.fail_on)}" if self.fail_on else ""
        return f"{self.cls.__name__}({self.v!r}, {self.label!r}{fail})"


def materialize(x: Any, log: list) -> Any:
    """The object for one side of a comparison: recipes are made fresh, the rest is shared."""
    return x.make(log) if isinstance(x, Fresh) else x


BOOM = Boom()
OPAQUE = object()
NAN = float("nan")
INF = float("inf")

BOUNDARY_INTS = [
    0, 1, -1, 2, 5, 10, 2**31, 2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, 2**63 - 1,
    2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, -(2**64), 10**30, -(10**30), 10**400,
    -(10**400),
]  # fmt: skip
SPECIAL_FLOATS = [
    0.0, -0.0, NAN, -NAN, INF, -INF, 0.5, 1.0, -1.0, 2.0**53, 2.0**53 + 2, 2.0**63, 2.0**64,
    1e308, -1e308, 5e-324, 0.1,
]  # fmt: skip
SPECIAL_DECIMALS = [
    Decimal(0), Decimal("-0"), Decimal("0.00"), Decimal(1), Decimal("1.50"), Decimal(10),
    Decimal("NaN"), Decimal("-NaN"), Decimal("sNaN"), Decimal("Infinity"), Decimal("-Infinity"),
    Decimal("1E+400"), Decimal(2**64),
]  # fmt: skip

ints = st.one_of(
    st.integers(-10, 30),
    st.sampled_from(BOUNDARY_INTS),
    st.integers(),
    st.integers(-(2**200), 2**200),
)
floats = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(), st.floats(-10, 30))
bools = st.booleans()
fractions = st.one_of(
    st.fractions(-10, 30, max_denominator=12), st.fractions(), st.integers(-3, 30).map(Fraction)
)
decimals = st.one_of(
    st.sampled_from(SPECIAL_DECIMALS),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.decimals(-10, 30, places=2),
)


def traced(cls: type = Traced, small: bool = True) -> st.SearchStrategy[Fresh]:
    values = st.integers(-3, 30) if small else st.one_of(ints, fractions, floats)
    return st.builds(
        Fresh,
        cls=st.just(cls),
        v=values,
        label=st.sampled_from("abcdefgh"),
        fail_on=st.one_of(
            st.just(frozenset()), st.frozensets(st.sampled_from(OPS), min_size=1, max_size=2)
        ),
    )


exotic = st.one_of(
    st.sampled_from([BOOM, OPAQUE, None, TaggedFloat(2.5), TaggedFloat(NAN)]),
    st.integers(-5, 2**70).map(TaggedInt),
    st.floats(-5, 30).map(TaggedFloat),
    traced(Traced, small=False),
    traced(TracedInplace),
)

# Any value at all, each argument drawn independently (types freely mixed). Sequences (str,
# list) are left out here: ``elapsed * "x"`` with a huge elapsed would allocate gigabytes.
anything = st.one_of(ints, floats, bools, fractions, decimals, exotic)

# One kind of number for a whole scenario, with small values so both branches are reached.
KINDS: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-3, 30),
    "bigint": st.one_of(st.integers(2**62, 2**66), st.integers(-3, 30).map(lambda i: i * 2**64)),
    "float": st.one_of(st.floats(-3, 30), st.sampled_from(SPECIAL_FLOATS)),
    "bool": bools,
    "fraction": st.fractions(-3, 30, max_denominator=6),
    "decimal": st.one_of(st.decimals(-3, 30, places=1), st.sampled_from(SPECIAL_DECIMALS)),
    "int+float": st.one_of(st.integers(-3, 30), st.floats(-3, 30), st.sampled_from([2**53 + 1])),
    "int+fraction": st.one_of(st.integers(-3, 30), st.fractions(-3, 30, max_denominator=6)),
    "taggedint": st.integers(-3, 30).map(TaggedInt),
    "traced": st.one_of(st.integers(-3, 30), traced(Traced), traced(TracedInplace)),
}

kind_values = st.sampled_from(sorted(KINDS)).map(KINDS.__getitem__)


def assert_one_key(group: list[Any], make: Callable[[int], Any]) -> None:
    """Every value of ``group`` is one client of a keyed limiter, as they are one dict key.

    ``make(burst)`` builds an empty keyed limiter with one shard and rate 1 per second; each
    value of the group takes a token of the first one's bucket, whichever came first.
    """
    assert len(dict.fromkeys(group)) == 1
    for first in group:
        limiter = make(len(group) + 1)
        assert limiter.try_acquire(first, now_ns=0)
        for other in group:
            assert other in limiter, f"{other!r} is not the same key as {first!r}"
            assert limiter.try_acquire(other, now_ns=0), (first, other)
        assert len(limiter) == 1, list(limiter)
        assert limiter.try_acquire(first, now_ns=0) is False, "the one bucket is empty now"


def assert_two_keys(a: Any, b: Any, limiter: Any) -> None:
    """``a`` and ``b`` are two clients of ``limiter`` (empty, burst 1), as two dict keys."""
    assert len(dict.fromkeys([a, b])) == 2
    assert limiter.try_acquire(a, now_ns=0)
    assert b not in limiter
    assert limiter.try_acquire(b, now_ns=0), f"{b!r} was treated as {a!r}"
    assert len(limiter) == 2
    assert limiter.try_acquire(a, now_ns=0) is False
    assert limiter.try_acquire(b, now_ns=0) is False


class NoServer:
    """A Redis client that fails the test if it is ever asked anything: for what a Redis
    limiter must decide before any round trip (arguments, the event loop)."""

    def evalsha(self, *args: Any) -> Any:
        raise AssertionError(f"a round trip was made: EVALSHA {args!r}")

    eval = evalsha


class AsyncNoServer:
    """:class:`NoServer` for the asyncio limiters."""

    async def evalsha(self, *args: Any) -> Any:
        raise AssertionError(f"a round trip was made: EVALSHA {args!r}")

    eval = evalsha


#: A call's record on the server: its first key's prefix and {hash tag}, "::" and its token.
CALL_RECORD = re.compile(rb"[^{]*\{[^}]*\}::[0-9a-f]{16}")


def only_call_records(client: Any) -> int:
    """How many keys ``client``'s server holds, failing the test if any is not a call's record
    (see ``distributed/_keys.py``): no limiter's state is left."""
    keys = client.keys("*")
    states = [key for key in keys if not CALL_RECORD.fullmatch(key)]
    assert not states, f"not records: {states[:10]}"
    return len(keys)


def wait_until(condition: Callable[[], Any], what: str, seconds: float = 10.0) -> None:
    """Poll ``condition`` every millisecond until it holds; fail naming ``what`` after
    ``seconds`` (a hang detector, not a speed target)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.001)
