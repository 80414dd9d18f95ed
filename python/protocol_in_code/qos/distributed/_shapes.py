"""The constructors' errors for calls of an old shape, each showing the call to write."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from protocol_in_code.qos.distributed._options import spelled_out

_P = ParamSpec("_P")
_R = TypeVar("_R")
_C = TypeVar("_C", bound=type)

#: What the examples in the constructors' errors show for an argument the call did not give.
_UNSAID = "..."


def constructors(keywords: Any) -> Callable[[_C], _C]:
    """A class decorator: the class's own ``__new__`` and ``__init__``, each taking
    ``**options: Unpack[keywords]``, shown to ``inspect`` with those keywords spelled out (see
    ``_options.spelled_out``), and refusing a call that does not fit that signature with a
    ``TypeError`` that shows the call to write (see :func:`_misfit`), where Python's own would
    only say what is missing or unexpected. mypy reads the methods as written."""

    def refusing(cls: _C) -> _C:
        for method in ("__new__", "__init__"):
            if method in vars(cls):
                function = getattr(vars(cls)[method], "__func__", vars(cls)[method])
                checked = _constructor(spelled_out(keywords)(function))
                setattr(cls, method, staticmethod(checked) if method == "__new__" else checked)
        return cls

    return refusing


def _constructor(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """``method`` (a ``__new__`` or ``__init__``), raising :func:`_misfit`'s error for a call
    that does not fit it."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def constructor(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            misfit = _misfit(signature, args, kwargs)
            if misfit is not None:
                raise misfit from None
            # A misfit of no old shape (a misspelt keyword, no client): the binding's own
            # words, since ``**options`` would take any keyword.
            owner = (
                args[0] if args and isinstance(args[0], type) else type(args[0]) if args else None
            )
            called = method.__qualname__ if owner is None else owner.__name__
            raise TypeError(f"{called}() {error}") from None
        return method(*args, **kwargs)

    return constructor


def _misfit(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> TypeError | None:
    """The error for a constructor call that does not fit ``signature``: ``args`` are the class
    (for ``__new__``) or the instance (for ``__init__``), then the call's own positional
    arguments. None for a misfit of no old shape (a misspelt keyword, no client), which
    Python's own error describes.

    The old signatures took a one-key limiter's key second, before the rate
    (``RedisRateLimiter(client, "global", 10)``), and a keyed limiter no identity at all. Each
    old shape is refused, never read as something else, with the new form shown.
    """
    if set(kwargs) - {"key"} - set(signature.parameters) or not args:
        return None
    cls = args[0] if isinstance(args[0], type) else type(args[0])
    name = cls.__name__
    keyed = getattr(cls, "takes_keys", False)
    given = list(args[2:]) if len(args) > 1 else []  # after the client
    if "rate" in kwargs:
        rate = repr(kwargs["rate"])
    elif given:
        rate = repr(given[0])
    else:
        rate = f"bands={kwargs['bands']!r}" if "bands" in kwargs else _UNSAID
    identity = repr(kwargs["name"]) if "name" in kwargs else _UNSAID

    def form(rate: str, identity: str, *more: str) -> str:
        return f"{name}(client, {', '.join((rate, *more))}, name={identity})"

    if "key" in kwargs:
        if keyed:
            return TypeError(
                f"{name}() takes no key=: the keys come with each call (try_acquire(key)), and "
                f"the limiter itself is known by its name: write {form(rate, identity)}"
            )
        return TypeError(
            f"{name}() takes name=, not key=: a limit is known by its name, write "
            f"{form(rate, identity if 'name' in kwargs else repr(kwargs['key']))}"
        )
    if len(given) >= 2 or (given and "rate" in kwargs):
        first = given[0]
        second = given[1] if len(given) >= 2 else kwargs["rate"]
        if len(given) >= 2:
            opening = (
                f"{name}() takes the rate alone by position (everything after it is a "
                f"keyword), and {len(given)} were given"
            )
        else:
            opening = f"{name}() got the rate twice: {first!r} by position and rate={second!r}"
        readings = []
        if not keyed and "name" not in kwargs:
            readings.append(
                f"the limit's name is a keyword now (it came before the rate): for a limit "
                f"named {first!r} of {second!r}, write {form(repr(second), repr(first))}"
            )
        if len(given) == 2 and "rate" not in kwargs:
            readings.append(
                f"for a burst of {second!r}, write "
                f"{form(repr(first), identity, f'burst={second!r}')}, or for {first!r} per "
                f"{second!r} seconds {form(repr(first), identity, f'per={second!r}')} (also "
                f'written as a quota, such as "100/minute")'
            )
        return TypeError(f"{opening}: {'; '.join(readings) or f'write {form(rate, identity)}'}")
    if "name" not in kwargs and (len(args) >= 2 or "client" in kwargs):
        what = (
            "limiters of different names never share a key's limit, even for the same key"
            if keyed
            else "limiters of the same name (and prefix) share one limit, and limiters of "
            "different names never do"
        )
        return TypeError(
            f"{name}() needs name=, the limit's identity on the server: {what}. Write "
            f"{form(rate, repr('login'))}"
        )
    return None
