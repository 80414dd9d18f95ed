"""The Redis package's shape: an I/O-free core, one options record, and two thin shells (issue 34).

* Each limiter operation is written once per shell, in its key-taking form; the one-key limiters
  serve the same definitions with their one key bound, shown to ``inspect`` without ``key``.
* The core (arguments, replies, the ``on_error`` policy, options, batching) neither calls a
  client nor awaits: a reply read there is a plain value in, a ``Decision`` out.
* The constructors' keywords, their defaults and their checks have one owner, ``Options``.
* No module of the package is over 600 lines.
* The in-flight limiters' shells (``_seats.py``, ``_seats_async.py``) write each server step
  once; what a reply means, a lease's state and an acquire's course are ``_seats_core``'s.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import (
    UNAVAILABLE_WAIT_NS,
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    Decision,
    LimiterUnavailable,
    LimitOutcome,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
    _options,
    _policy,
    _replies,
)
from protocol_in_code.qos.distributed._async import AsyncOperations
from protocol_in_code.qos.distributed._sync import SyncOperations
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter

PACKAGE = Path(_options.__file__).parent

OPERATIONS = [
    "try_acquire",
    "check",
    "check_levels",
    "peek",
    "refund",
    "settle",
    "available",
    "acquire",
    "try_acquire_many",
]

#: The modules that say what to send and read what comes back, with no client call in them.
CORE_MODULES = ["_core.py", "_replies.py", "_policy.py", "_options.py", "_batch.py"]


def definitions(name: str) -> list[str]:
    """The modules of the package that define a function or method called ``name``, but for
    the in-flight limiters' (``_seats*.py``), whose calls have the same names."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name.startswith("_seats"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found.append(path.name)
    return found


#: Operations whose name the package also gives to something else: a batch's round settled
#: (``_batch.py``), a waiter's give-back run once its call answers (``_waits.py``).
OTHER_MEANINGS = {"settle": ["_batch.py", "_waits.py"]}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_operation_is_written_once_per_shell(operation: str) -> None:
    others = OTHER_MEANINGS.get(operation, [])
    shells = [found for found in definitions(operation) if found not in others]
    assert sorted(shells) == ["_async.py", "_sync.py"]


@pytest.mark.parametrize("operation", [op for op in OPERATIONS if op != "try_acquire_many"])
@pytest.mark.parametrize(
    ("one_key", "shell"),
    [(RedisRateLimiter, SyncOperations), (AsyncRedisRateLimiter, AsyncOperations)],
    ids=["sync", "asyncio"],
)
def test_the_one_key_forms_serve_the_shells_operations_with_their_key(
    one_key: type, shell: type, operation: str
) -> None:
    method = getattr(one_key, operation)
    assert method.__wrapped__ is getattr(shell, operation)
    parameters = list(inspect.signature(method).parameters)
    assert "key" not in parameters and parameters[0] == "self"
    if "plan" in parameters:  # as type checkers read it; refused when given (below)
        assert inspect.signature(method).parameters["plan"].kind is inspect.Parameter.KEYWORD_ONLY
    assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(
        getattr(shell, operation)
    )


@pytest.mark.parametrize("keyed", [RedisKeyedRateLimiter, AsyncRedisKeyedRateLimiter])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_keyed_forms_take_the_shells_operations_as_they_are(
    keyed: type, operation: str
) -> None:
    shell = SyncOperations if keyed is RedisKeyedRateLimiter else AsyncOperations
    if operation == "try_acquire_many":
        assert operation in vars(keyed)  # batching is the keyed forms' own
    else:
        assert getattr(keyed, operation) is getattr(shell, operation)


def test_a_one_key_limiter_refuses_a_plan() -> None:
    limiter = RedisRateLimiter(qos_support.NoServer(), 10, name="global")
    with pytest.raises(TypeError, match="plan='pro' was given, but a RedisRateLimiter has no"):
        limiter.check(plan="pro")  # type: ignore[call-arg]


@pytest.mark.parametrize("module", CORE_MODULES)
def test_the_core_modules_neither_await_nor_call_a_client(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.Await, ast.AsyncFunctionDef)), f"{module} awaits"
        if isinstance(node, ast.Attribute):
            sends = ("run", "send", "run_async", "send_async", "pipelines", "pipelines_async")
            assert node.attr not in sends, f"{module} calls the server ({node.attr})"
        if isinstance(node, ast.ImportFrom):
            assert node.module not in ("asyncio", "threading"), f"{module} imports {node.module}"


def test_no_module_of_the_package_is_over_600_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in PACKAGE.glob("*.py")}
    assert {name: size for name, size in sizes.items() if size > 600} == {}


def test_a_reply_is_read_into_a_decision_without_a_server() -> None:
    assert _replies.decision(4 * 7) == Decision(LimitOutcome.ALLOWED, 0, 7)
    assert _replies.decision(4 * 3 + 1) == Decision(LimitOutcome.NEVER, None, 3)
    assert _replies.decision([0, 2, 5, 20]) == Decision(LimitOutcome.DENIED, 25_000, 2)
    assert _replies.leveled([4 * 2, 10, 2, 90, 0, 990]) == (
        Decision(LimitOutcome.ALLOWED, 0, 2),
        [(2, 100_000), (0, 1_000_000)],
    )
    assert _replies.reservation([0, 0, 1500, 77], 1) == _replies.Reserved(1500, 77)
    assert _replies.reservation([1, 0, 0], 1) is None


def test_the_policy_is_a_pure_answer() -> None:
    error = ConnectionError("down")
    allow, deny = _policy.Policy("allow", 5), _policy.Policy("deny", 5)
    assert allow.answer(error, "try_acquire", 1, None) is True
    assert deny.answer(error, "check", 1, None) == Decision(
        LimitOutcome.DENIED, UNAVAILABLE_WAIT_NS, 0
    )
    assert allow.answer(error, "available", None) == 5
    assert allow.answer_levels(error, 1, None) == (Decision(LimitOutcome.ALLOWED, 0, 0), None)
    local = _policy.Policy(RateLimiter(2, start_ns=0), 2)
    assert local.answer(error, "check", 1, 0) == Decision(LimitOutcome.ALLOWED, 0, 1)
    with pytest.raises(LimiterUnavailable) as raised:
        _policy.Policy("raise", 5).answer(error, "check", 1, None)
    assert raised.value.__cause__ is error


@pytest.mark.parametrize(
    ("cls", "keywords"),
    [
        (RedisRateLimiter, _options.OneKeyKeywords),
        (AsyncRedisRateLimiter, _options.OneKeyKeywords),
        (RedisKeyedRateLimiter, _options.KeyedKeywords),
        (AsyncRedisKeyedRateLimiter, _options.KeyedKeywords),
    ],
)
def test_the_signatures_show_the_options_records_keywords_and_defaults(
    cls: type, keywords: Any
) -> None:
    defaults = {field.name: field.default for field in dataclasses.fields(_options.Options)}
    parameters = inspect.signature(cls).parameters
    shown = [name for name in parameters if name not in ("client", "rate")]
    declared = keywords.__required_keys__ | keywords.__optional_keys__
    assert shown == [name for name in _options.ORDER if name in declared]
    for name in shown:
        if name == "name":
            assert parameters[name].default is inspect.Parameter.empty
        else:
            assert parameters[name].default == defaults[name]


def test_a_misspelt_keyword_is_refused_naming_the_class() -> None:
    with pytest.raises(TypeError, match=r"^RedisKeyedRateLimiter\(\) got an unexpected keyword"):
        RedisKeyedRateLimiter(qos_support.NoServer(), 10, name="api", prefx="p:")  # type: ignore[call-arg]


def test_the_options_record_checks_once_for_every_form() -> None:
    with pytest.raises(ValueError, match="on_error must be 'raise', 'allow', 'deny' or a local"):
        _options.Options.read(10, {"name": "api", "on_error": "ignore"}, KeyedRateLimiter)
    with pytest.raises(TypeError, match="min_ttl_ms must be an int, not float"):
        _options.Options.read(10, {"name": "api", "min_ttl_ms": 1.5}, RateLimiter)
    options = _options.Options.read(10, {"name": "api", "prefix": "app:"}, RateLimiter)
    assert (options.prefix_bytes, options.on_error, options.min_ttl_ms) == (b"app:", "raise", 0)


def test_the_asyncio_one_key_form_awaits_its_operations() -> None:
    limiter = AsyncRedisRateLimiter(qos_support.AsyncNoServer(), 10, name="global")
    assert AsyncRedisRateLimiter.acquire_async is AsyncRedisRateLimiter.acquire
    assert inspect.iscoroutinefunction(limiter.check)
    with pytest.raises(ValueError, match="now_ns must be a whole number of microseconds"):
        asyncio.run(limiter.check(1, 1))  # checked before any round trip, as in-process


#: The in-flight limiters' shells: each sends the script's calls and reads the grant lists.
SEAT_SHELLS = ["_seats.py", "_seats_async.py"]

#: What a seats shell does with the server: each written once per shell, for both of its
#: limiters (``call`` is also the script's own send, so it is not counted here).
SEAT_STEPS = ["beat", "_take", "_read_until", "_leave", "release", "extend"]

#: What the seats core alone decides: a reply's meaning, a lease's state, an acquire's course.
SEAT_DECISIONS = ["too_many", "grant_token", "ask_again_in", "LeaseExpired", "ttl_ms_of"]


def seat_definitions(name: str) -> list[str]:
    """The seats module of each definition of a function or method called ``name``."""
    found = []
    for path in sorted(PACKAGE.glob("_seats*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found.append(path.name)
    return found


@pytest.mark.parametrize("step", SEAT_STEPS)
def test_each_seats_step_is_written_once_per_shell(step: str) -> None:
    assert seat_definitions(step) == SEAT_SHELLS


@pytest.mark.parametrize("shell", SEAT_SHELLS)
def test_the_seats_shells_leave_every_decision_to_the_core(shell: str) -> None:
    tree = ast.parse((PACKAGE / shell).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in SEAT_DECISIONS, f"{shell} decides ({node.func.id})"
        if isinstance(node, ast.ClassDef):
            assert node.name not in ("Turn", "LeaseState", "SeatsState", "KeyedSeats")


def test_the_seats_core_neither_awaits_nor_calls_a_client() -> None:
    tree = ast.parse((PACKAGE / "_seats_core.py").read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.Await, ast.AsyncFunctionDef)), "the core awaits"
        if isinstance(node, ast.Attribute):
            assert node.attr not in ("evalsha", "eval", "blpop", "rpush", "client")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = (
                [node.module]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
            )
            assert not {"asyncio", "threading", "socket"} & set(modules), modules
