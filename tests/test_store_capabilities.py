"""Stores plug in by what their limiters declare: the web and stack layers name no store.

Two kinds of test:

* the layers that take any limiter (``stack.py``, ``_http/``, the middleware, the framework
  forms, the metrics) are read with ``ast``: none imports a store's module or names a store's
  limiter class;
* a toy store written here, a small keyed limiter in pure Python that declares its
  capabilities (:mod:`protocol_in_code.qos.capabilities`), works in a stack beside a native
  limiter (all or none, sync and asyncio, its parts handed to its own stacking) and under the
  ASGI and WSGI middleware, with no edit to any of them.
"""

from __future__ import annotations

import ast
import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos import capabilities
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.asgi import Route
from protocol_in_code.qos.capabilities import Misfit, StackedPart
from protocol_in_code.qos.limiter import Band, Decision, LimitOutcome, RateLimiter
from protocol_in_code.qos.stack import Part, check_together, check_together_async
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from qos_support import REPO_ROOT
from test_web_middleware import _ok_asgi, _ok_wsgi, _request

QOS = REPO_ROOT / "python" / "protocol_in_code" / "qos"

# ---------------------------------------------------------------------------------------------
# The generic layers name no store
# ---------------------------------------------------------------------------------------------

#: The layers that take any limiter.
GENERIC = sorted(
    [
        QOS / "stack.py",
        QOS / "asgi.py",
        QOS / "wsgi.py",
        QOS / "metrics.py",
        *QOS.glob("for_*.py"),
        *(QOS / "_http").glob("*.py"),
    ]
)

#: The modules of the stores: limits kept in another process's reach (a server, the host).
STORE_MODULES = ("protocol_in_code.qos.distributed", "protocol_in_code.qos.shared")


def _store_classes() -> set[str]:
    """Every limiter class the store modules export."""
    import importlib

    names = set()
    for module_name in STORE_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and callable(getattr(value, "check", None)):
                names.add(name)
    return names


STORE_CLASSES = _store_classes()


def store_names_in(source: str) -> list[str]:
    """What ``source`` says of a store: each import of a store's module (or of a name from
    one), each store class it names, and each store module it spells as a string (an
    ``importlib`` or ``sys.modules`` look-up)."""

    def is_store_module(name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in STORE_MODULES)

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if is_store_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if is_store_module(module):
                found.append(f"from {module} import")
            else:  # a store's package imported from its parent
                found += [
                    f"from {module} import {a.name}"
                    for a in node.names
                    if is_store_module(f"{module}.{a.name}")
                ]
            found += [f"import of {a.name}" for a in node.names if a.name in STORE_CLASSES]
        elif isinstance(node, ast.Name) and node.id in STORE_CLASSES:
            found.append(f"name {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in STORE_CLASSES:
            found.append(f"attribute {node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if is_store_module(node.value):
                found.append(f"string {node.value!r}")
    return found


def test_the_store_classes_are_found() -> None:
    assert {
        "RedisRateLimiter",
        "RedisKeyedRateLimiter",
        "AsyncRedisRateLimiter",
        "AsyncRedisKeyedRateLimiter",
        "SharedRateLimiter",
        "SharedKeyedRateLimiter",
    } <= STORE_CLASSES


@pytest.mark.parametrize(
    "source",
    [
        "from protocol_in_code.qos.distributed import RedisRateLimiter",
        "from protocol_in_code.qos import distributed",
        "from protocol_in_code.qos.distributed import _together",
        "import protocol_in_code.qos.distributed.limiters",
        "from protocol_in_code._native import SharedKeyedRateLimiter",
        "isinstance(x, limiters.AsyncRedisKeyedRateLimiter)",
        "sys.modules.get('protocol_in_code.qos.distributed.limiters')",
        "def f():\n    from protocol_in_code.qos.shared import SharedRateLimiter",
    ],
)
def test_the_check_finds_a_store_named(source: str) -> None:
    assert store_names_in(source), source


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: str(p.relative_to(QOS)))
def test_the_layers_that_take_any_limiter_name_no_store(path: Path) -> None:
    assert store_names_in(path.read_text(encoding="utf-8")) == [], path


# ---------------------------------------------------------------------------------------------
# A store of one's own
# ---------------------------------------------------------------------------------------------

#: What a toy limiter asks a refused caller to wait: it never refills by itself.
TOY_WAIT_NS = 10**9


class ToyStacking:
    """The toy store's stacking: every part of the store under its one lock, all or none.
    ``calls`` counts the stacks it was handed, each as the number of its parts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[int] = []

    def check_together(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]:
        self.calls.append(len(parts))
        with self.lock:
            # Parts naming one bucket (a limiter and key) ask it for the sum of their tokens.
            wanted: dict[tuple[int, Any], int] = {}
            owners: dict[tuple[int, Any], ToyKeyed] = {}
            for limiter, key, n, _ in parts:
                bucket = (id(limiter), key)
                wanted[bucket] = wanted.get(bucket, 0) + n
                owners[bucket] = limiter
            allowed = all(owners[b].left(b[1]) >= n for b, n in wanted.items())
            if allowed:
                for bucket, n in wanted.items():
                    owner, key = owners[bucket], bucket[1]
                    owner.tokens[key] = owner.left(key) - n
            return [
                limiter.decision(key, 0 if allowed else wanted[id(limiter), key])
                for limiter, key, _, _ in parts
            ]

    async def check_together_async(
        self, parts: Sequence[StackedPart], *, now_ns: int | None = None
    ) -> list[Decision]:
        await asyncio.sleep(0)
        return self.check_together(parts, now_ns=now_ns)


#: The one stacking of the toy store.
TOY_STACKING = ToyStacking()


class ToyKeyed:
    """A keyed limiter in pure Python: ``burst`` tokens per key, no refill (``now_ns`` is
    ignored), text keys only. It declares what the layers ask: its store's stacking and the
    keys it takes."""

    stacking = TOY_STACKING

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self.tokens: dict[Any, int] = {}
        self.band = Band(burst, burst=burst)

    @staticmethod
    def key_refusal(key: object) -> str | None:
        return None if isinstance(key, str) else "a toy limiter cannot take: its keys are str"

    @property
    def bands(self) -> tuple[Band, ...]:
        return (self.band,)

    def left(self, key: Any) -> int:
        return self.tokens.get(key, self.burst)

    def decision(self, key: Any, short_of: int) -> Decision:
        """ALLOWED with what is left, or DENIED for a call that needed ``short_of``."""
        if short_of <= self.left(key):
            return Decision(LimitOutcome.ALLOWED, None, self.left(key) - short_of)
        return Decision(LimitOutcome.DENIED, TOY_WAIT_NS, self.left(key))

    def check(self, key: Any, n: int = 1, now_ns: int | None = None) -> Decision:
        answer = self.stacking.check_together([(self, key, n, None)])
        return answer[0]

    def peek(self, key: Any, n: int = 1, now_ns: int | None = None) -> Decision:
        return self.decision(key, n)

    def try_acquire(self, key: Any, n: int = 1, now_ns: int | None = None) -> bool:
        return self.check(key, n).allowed

    def refund(self, key: Any, n: int = 1, now_ns: int | None = None) -> None:
        self.tokens[key] = min(self.burst, self.left(key) + n)

    def available(self, key: Any, now_ns: int | None = None) -> int:
        return self.left(key)

    def acquire(self, key: Any, n: int = 1, timeout: float | None = None) -> bool:
        return self.try_acquire(key, n)

    async def acquire_async(self, key: Any, n: int = 1, timeout: float | None = None) -> bool:
        return self.try_acquire(key, n)


class AsyncToyKeyed(ToyKeyed):
    """The toy limiter with every call awaited, as a store behind a server has it."""

    awaits = Misfit("an asyncio toy limiter", "give it a synchronous toy")

    async def check(self, key: Any, n: int = 1, now_ns: int | None = None) -> Decision:  # type: ignore[override]
        return (await self.stacking.check_together_async([(self, key, n, None)]))[0]

    async def peek(self, key: Any, n: int = 1, now_ns: int | None = None) -> Decision:  # type: ignore[override]
        return super().peek(key, n)

    async def try_acquire(self, key: Any, n: int = 1, now_ns: int | None = None) -> bool:  # type: ignore[override]
        return (await self.check(key, n)).allowed

    async def refund(self, key: Any, n: int = 1, now_ns: int | None = None) -> None:  # type: ignore[override]
        super().refund(key, n)

    async def available(self, key: Any, now_ns: int | None = None) -> int:  # type: ignore[override]
        return self.left(key)

    async def acquire(self, key: Any, n: int = 1, timeout: float | None = None) -> bool:  # type: ignore[override]
        return await self.try_acquire(key, n)


class BlockingToyKeyed(ToyKeyed):
    """The toy limiter as if each call waited on a server: it says so."""

    blocks = Misfit("a toy limiter on a slow wire", "give it a fast one")


class ToyStore:
    """A store of one's own given as ``store=``: each rate's limit is a toy limiter."""

    named = "the toy store"

    def __init__(self) -> None:
        self.made: list[tuple[Any, str]] = []

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any:
        self.made.append((rate, name))
        return ToyKeyed(rate if burst is None else burst)


@pytest.fixture(autouse=True)
def _fresh_stacking() -> None:
    TOY_STACKING.calls.clear()


def test_the_toy_declares_its_capabilities() -> None:
    toy = ToyKeyed(1)
    assert isinstance(toy, capabilities.Stackable) and isinstance(toy, capabilities.KeyChecked)
    assert not isinstance(toy, capabilities.Blocking)
    assert isinstance(BlockingToyKeyed(1), capabilities.Blocking)
    assert isinstance(AsyncToyKeyed(1), capabilities.Awaiting)
    assert isinstance(ToyStore(), capabilities.RateStore)


def test_the_toy_s_parts_are_handed_to_its_stacking_at_once() -> None:
    first, second = ToyKeyed(2), ToyKeyed(2)
    stacked = check_together([Part(first, "a"), Part(RateLimiter(10)), Part(second, "b", 2)])
    assert stacked.allowed
    assert TOY_STACKING.calls == [2]
    assert (first.left("a"), second.left("b")) == (1, 0)


def test_a_stack_with_the_toy_is_all_or_none_sync() -> None:
    toy, native = ToyKeyed(1), RateLimiter(1000, burst=1)
    assert check_together([Part(native), Part(toy, "k")], now_ns=0).allowed
    # The native limit refuses now: the toy's token stays.
    toy.refund("k")
    refused = check_together([Part(native), Part(toy, "k")], now_ns=0)
    assert not refused.allowed and toy.left("k") == 1
    assert [d.outcome for d in refused.parts] == [LimitOutcome.DENIED, LimitOutcome.ALLOWED]
    # The toy refuses: the native limit's token stays.
    native, toy = RateLimiter(1000, burst=1), ToyKeyed(1)
    toy.tokens["k"] = 0
    refused = check_together([Part(native), Part(toy, "k")], now_ns=0)
    assert not refused.allowed and native.available(now_ns=0) == 1
    assert refused.decision.wait_ns == TOY_WAIT_NS


def test_a_stack_with_the_toy_is_all_or_none_asyncio() -> None:
    async def run() -> None:
        toy, native = AsyncToyKeyed(1), RateLimiter(1000, burst=1)
        assert (await check_together_async([Part(native), Part(toy, "k")], now_ns=0)).allowed
        assert toy.left("k") == 0
        native, toy = RateLimiter(1000, burst=1), AsyncToyKeyed(1)
        toy.tokens["k"] = 0
        refused = await check_together_async([Part(native), Part(toy, "k")], now_ns=0)
        assert not refused.allowed and native.available(now_ns=0) == 1
        # A synchronous toy beside an asyncio one: one store, decided in one step.
        sync, awaited = ToyKeyed(1), AsyncToyKeyed(1)
        TOY_STACKING.calls.clear()
        both = await check_together_async([Part(sync, "k"), Part(awaited, "k")])
        assert both.allowed and TOY_STACKING.calls == [2]

    asyncio.run(run())


def test_an_asyncio_toy_in_a_synchronous_stack_is_refused() -> None:
    with pytest.raises(
        TypeError, match=r"parts\[1\]: an asyncio limiter's decision must be awaited"
    ):
        check_together([Part(RateLimiter(1)), Part(AsyncToyKeyed(1), "k")])


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_the_toy_limits_requests_under_the_middleware(middleware: Any) -> None:
    toy = ToyKeyed(2)
    app = middleware(_ok_asgi if middleware is ASGIMiddleware else _ok_wsgi, toy)
    statuses = [_request(app)[0] for _ in range(3)]
    assert statuses == [200, 200, 429] and toy.tokens == {"192.0.2.1": 0}


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_a_key_the_toy_cannot_take_is_refused_in_its_words(middleware: Any) -> None:
    app = middleware(
        _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi, ToyKeyed(2), key=lambda info: 42
    )
    with pytest.raises(TypeError, match=r"key= returned 42, which a toy limiter cannot take"):
        _request(app)


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_the_toy_stacked_with_a_native_limit_under_the_middleware(middleware: Any) -> None:
    toy, native = ToyKeyed(1), RateLimiter(1000, burst=5)
    app = middleware(
        _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi,
        native,
        routes=[Route("/api", toy, name="toy")],
        stack=True,
    )
    assert _request(app, "/api")[0] == 200
    assert _request(app, "/api")[0] == 429
    # The toy refused: the native limit gave back what it would have taken.
    assert native.available() >= 4 and TOY_STACKING.calls


def test_a_blocking_toy_is_refused_under_asgi_in_its_words_and_taken_under_wsgi() -> None:
    with pytest.raises(TypeError, match="limiter: a toy limiter on a slow wire would block the"):
        ASGIMiddleware(_ok_asgi, BlockingToyKeyed(1))
    assert _request(WSGIMiddleware(_ok_wsgi, BlockingToyKeyed(1)))[0] == 200


def test_an_asyncio_toy_is_refused_under_wsgi_in_its_words_and_awaited_under_asgi() -> None:
    with pytest.raises(TypeError, match="limiter: an asyncio toy limiter cannot serve WSGI"):
        WSGIMiddleware(_ok_wsgi, AsyncToyKeyed(1))
    app = ASGIMiddleware(_ok_asgi, AsyncToyKeyed(1))
    assert [_request(app)[0] for _ in range(2)] == [200, 429]


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_a_store_of_one_s_own_keeps_a_rate_s_limits(middleware: Any) -> None:
    store = ToyStore()
    app = middleware(
        _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi, 2, store=store, name="toys"
    )
    assert [_request(app)[0] for _ in range(3)] == [200, 200, 429]
    ((rate, name),) = store.made
    assert rate == 2 and name.startswith("web.toys")


# ---------------------------------------------------------------------------------------------
# What the Redis limiters declare, and the stores found by what store= names
# ---------------------------------------------------------------------------------------------


def test_the_redis_limiters_declare_their_store_s_stacking_keys_and_form() -> None:
    from protocol_in_code.qos import distributed
    from protocol_in_code.qos.distributed import _plugin

    classes = [
        distributed.RedisRateLimiter,
        distributed.RedisKeyedRateLimiter,
        distributed.AsyncRedisRateLimiter,
        distributed.AsyncRedisKeyedRateLimiter,
    ]
    assert all(cls.stacking is _plugin.STACKING for cls in classes)
    assert [getattr(cls, "blocks", None) for cls in classes] == [_plugin.BLOCKS] * 2 + [None] * 2
    assert [getattr(cls, "awaits", None) for cls in classes] == [None] * 2 + [_plugin.AWAITS] * 2
    for keyed in (
        distributed.RedisKeyedRateLimiter(qos_support.NoServer(), 1, name="c"),
        distributed.AsyncRedisKeyedRateLimiter(qos_support.AsyncNoServer(), 1, name="c"),
    ):
        assert keyed.key_refusal("k") is None and keyed.key_refusal(b"k") is None
        assert keyed.key_refusal(1) == "a Redis limiter cannot take: its keys are str or bytes"


def test_the_limiters_of_this_host_declare_no_stacking() -> None:
    from protocol_in_code.qos import KeyedRateLimiter, SharedKeyedRateLimiter, SharedRateLimiter

    for cls in (RateLimiter, KeyedRateLimiter, SharedRateLimiter, SharedKeyedRateLimiter):
        assert not hasattr(cls, "stacking"), cls


def test_a_store_that_is_none_of_them_is_refused_naming_what_is_taken() -> None:
    from protocol_in_code.qos._stores import rate_store

    with pytest.raises(
        TypeError,
        match=r"^store must be 'shared', 'process', a folder \(a pathlib.Path\) or a Redis "
        r"client, not int$",
    ):
        rate_store(42)
    with pytest.raises(
        ValueError,
        match=r"^store must be 'shared', 'process', a folder or a Redis client, not 'x'$",
    ):
        rate_store("x")


def test_a_redis_client_is_a_store_without_its_package_imported_first() -> None:
    """The Redis package is imported when a Redis client is given as the store, and not
    before: a service that keeps its rates on the host never imports it."""
    import subprocess
    import sys

    pytest.importorskip("redis")
    program = """
import sys
import redis.asyncio
from protocol_in_code.qos.asgi import RateLimitMiddleware

async def app(scope, receive, send): ...

RateLimitMiddleware(app, "5/second", store="process")
assert "protocol_in_code.qos.distributed" not in sys.modules
middleware = RateLimitMiddleware(app, "5/second", store=redis.asyncio.Redis(port=1))
limiter = middleware.rules.rules[0].limiter
assert type(limiter).__name__ == "AsyncRedisKeyedRateLimiter", limiter
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


DECLARED = """
import redis
import redis.asyncio

from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.capabilities import (
    Awaiting,
    Batched,
    Blocking,
    KeyChecked,
    Levelled,
    Planned,
    RateStore,
    Stackable,
)
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.distributed._plugin import RedisStore

client = redis.Redis()
aclient = redis.asyncio.Redis()

stackable: Stackable = RedisRateLimiter(client, 1, name="k")
stackable = RedisKeyedRateLimiter(client, 1, name="c")
stackable = AsyncRedisRateLimiter(aclient, 1, name="k")
stackable = AsyncRedisKeyedRateLimiter(aclient, 1, name="c")
checked: KeyChecked = RedisKeyedRateLimiter(client, 1, name="c")
checked = AsyncRedisKeyedRateLimiter(aclient, 1, name="c")
blocking: Blocking = RedisRateLimiter(client, 1, name="k")
blocking = RedisKeyedRateLimiter(client, 1, name="c")
awaiting: Awaiting = AsyncRedisRateLimiter(aclient, 1, name="k")
awaiting = AsyncRedisKeyedRateLimiter(aclient, 1, name="c")
levelled: Levelled = RedisRateLimiter(client, 1, name="k")
levelled = AsyncRedisKeyedRateLimiter(aclient, 1, name="c")
batched: Batched = RedisKeyedRateLimiter(client, 1, name="c")
batched = KeyedRateLimiter(1)
planned: Planned = KeyedRateLimiter(1)
planned = RedisKeyedRateLimiter(client, 1, name="c")
store: RateStore = RedisStore(client)

# The limiters of this host declare no store's stacking, and only a limiter on a synchronous
# client blocks.
native: Stackable = RateLimiter(1)  # type: ignore[assignment]
awaited: Blocking = AsyncRedisRateLimiter(aclient, 1, name="k")  # type: ignore[assignment]
"""


def test_mypy_finds_what_the_redis_limiters_declare(tmp_path: Path) -> None:
    """The declarations are checked against the Protocols, and where a class declares none,
    mypy refuses it (``--strict`` reports an ``ignore`` that is not needed)."""
    import os
    import subprocess
    import sys

    (tmp_path / "declared.py").write_text(DECLARED)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "declared.py"],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(REPO_ROOT / "python")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
