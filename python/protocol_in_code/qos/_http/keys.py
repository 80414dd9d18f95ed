"""Whose limit, at what cost: the request as the key, cost and plan functions see it, and
what they may return.

A key function's key (:func:`key_of`) and a cost function's cost (:func:`cost_of`) are read
and checked before the limiter is asked, so that the middleware never fails after a token is
spent: a key that is no value (:func:`not_a_key`) and a cost no limiter takes raise here,
naming the function and what it returned.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias


@dataclass(frozen=True)
class RequestInfo:
    """A request as a key, cost, plan or exemption function sees it, whichever server runs it.

    ``path`` is relative to where the application is mounted, as its own routes are written:
    ASGI's ``path`` without ``root_path``, WSGI's ``PATH_INFO`` (``SCRIPT_NAME`` is not in
    it), Django's ``path_info``; decoded from UTF-8, and spelled as the client sent it (routes
    match it as routers read it, :func:`routed`). ``headers`` has lower-case names, and
    repeated fields joined with ``", "``. ``client`` is the address :func:`client_address`
    settled on (``None`` when the server gives none, as on a Unix socket).

    ``request`` is the request as the code around the limit holds it, for what only it knows
    (who is signed in): under the framework forms, the framework's own request (Django's
    ``HttpRequest``, with ``request.user``; Flask's ``flask.Request``; Starlette's
    ``Request`` for FastAPI); under the ASGI middleware the ASGI ``scope`` (where an
    authentication middleware in front puts ``scope["user"]``), and under the WSGI middleware
    the ``environ``. It is not compared and not shown, as it is not the request's value.
    """

    method: str
    path: str
    client: str | None
    headers: Mapping[str, str]
    request: Any = field(default=None, compare=False, repr=False)


#: What a key function may return: a value, equal to another key exactly when their values are
#: equal, in this process and in every other: text, bytes, numbers, and tuples of them.
Key: TypeAlias = str | bytes | int | float | tuple["Key", ...]
#: A key function: the request's key, or ``None`` when its limit does not apply to the request.
KeyFunction: TypeAlias = Callable[[RequestInfo], "Key | None"]
CostFunction: TypeAlias = Callable[[RequestInfo], int]


#: The largest cost every limiter takes: ``n`` is an unsigned 64-bit count.
COST_MAX = 2**64 - 1


def cost_of(function: CostFunction, info: RequestInfo) -> int:
    """Tokens this request takes, as the cost ``function`` (the route's, or the middleware's)
    says; a request without one takes 1.

    A cost no limiter takes raises here, naming it, before the limiter is asked.
    """
    n = function(info)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= COST_MAX:
        raise ValueError(
            f"cost= returned {reprlib.repr(n)}, which is not an int from 0 to 2**64 - 1"
        )
    return n


#: The key of a client whose address the server does not give (a peer on a Unix socket),
#: where no key function is given: without one, a keyed limiter's key is the client's address.
UNKNOWN_CLIENT = "unknown"


def key_of(
    function: KeyFunction, refusal: Callable[[object], str | None] | None, info: RequestInfo
) -> Key | None:
    """The key of a keyed limiter, as the key ``function`` says; ``refusal`` is the limiter's
    own key check where it takes only some keys (a Redis limiter takes ``str`` and ``bytes``:
    see :class:`~protocol_in_code.qos.capabilities.KeyChecked`).

    ``None`` from the key function means that this limit does not apply to this request (a
    limit per signed-in user, for a request nobody signed in to): it is passed over, as if its
    route did not match. Any other key must be one the limiter takes: a value (see
    :func:`not_a_key`), or what its own check accepts. One that is not raises ``TypeError``
    here, naming the key function and what it returned, before the limiter is asked: the
    middleware never fails after a token is spent.
    """
    key = function(info)
    if key is None:
        return None
    if refusal is not None:
        refused = refusal(key)
        if refused is not None:
            raise TypeError(
                f"key= returned {reprlib.repr(key)}, which {refused} "
                f"({function_name(function)} returned a {type(key).__qualname__})"
            )
        return key
    kind = type(key)
    if kind is str or kind is int or kind is bytes:  # the keys most functions return
        return key
    wrong = not_a_key(key)
    if wrong is not None:
        raise TypeError(
            f"key= returned {reprlib.repr(key)}, which {wrong}. {function_name(function)} "
            "must return a value (str, bytes, int, float, or a tuple of them: the user's id, "
            "not the user), or None where this limit does not apply to the request"
        )
    return key


def not_a_key(key: object) -> str | None:
    """Why ``key`` is not a key, or ``None`` for a key.

    A key is a value: ``str``, ``bytes``, ``int``, ``float`` and tuples of them, nested to any
    depth, each equal to another key exactly when their values are. Anything else would
    misplace clients without a word. An object equal only to itself (an ORM's user, made anew
    for every request) is a new client at every request, so the limit never applies; so is
    NaN, which equals nothing. A list or a dict is no dict key. And a bool is refused too:
    ``True`` is the key ``1`` (the user of id 1), and a key function that returns one
    (``user.is_authenticated and user.pk``) puts every anonymous client in the one key
    ``False``; ``None`` says that a limit does not apply.
    """
    stack = [key]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            continue
        if isinstance(item, bool):
            return "is a bool, not a key: True is the key 1, and False is 0"
        if isinstance(item, int):
            continue
        if isinstance(item, float):
            if item != item:
                return "is NaN, not a key: NaN equals nothing, so each request is a new client"
            continue
        if isinstance(item, tuple):
            stack.extend(item)
            continue
        kind = type(item).__qualname__
        if item is key:
            return f"is a {kind}, not a key"
        return f"holds a {kind}, which is not a key"
    return None


def function_name(function: Callable[..., Any]) -> str:
    """A function as an error names it: its module and qualified name, where it has them."""
    name = getattr(function, "__qualname__", None)
    if not isinstance(name, str):
        return reprlib.repr(function)
    module = getattr(function, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) and module else name
