"""What every Redis limiter holds: its cores (one, or one per plan), its keys, and its answers
when the server cannot decide."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeAlias, TypeVar, cast

from protocol_in_code._native import Band, Decision, KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.distributed import _plugin
from protocol_in_code.qos.distributed._core import Core
from protocol_in_code.qos.distributed._keys import redis_key
from protocol_in_code.qos.distributed._options import (
    KeyedKeywords,
    OneKeyKeywords,
    Options,
    check_fallback_plans,
    listed,
)
from protocol_in_code.qos.distributed._replies import RESERVE, Levels
from protocol_in_code.qos.distributed._server import Server
from protocol_in_code.qos.distributed._shapes import constructors
from protocol_in_code.qos.distributed._waiting import awaited_acquire

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: A key of a keyed Redis limiter: its Redis key holds the key's bytes (``str`` as UTF-8).
Key: TypeAlias = str | bytes

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Limits:
    """What every Redis limiter holds and does but running the script: a key-taking form,
    which the one-key limiters serve with their one key (see :func:`its_key`).

    :meth:`_target` says which core and Redis keys a call is for; :meth:`_fall_back` asks the
    ``on_error`` policy the call's own question."""

    #: Whether each call names a key (the constructors' errors show the form to write).
    takes_keys = False
    #: What every Redis limiter declares to the layers that take any limiter (see
    #: ``_plugin.py``): its parts of a stacked request are decided together on the server.
    stacking = _plugin.STACKING
    _core: Core
    _unavailable: tuple[type[BaseException], ...]

    def _target(self, key: Any, plan: Any) -> tuple[Core, list[bytes]]:
        """The core a call with ``key`` and ``plan`` is for, and the Redis keys it names."""
        raise NotImplementedError

    async def _wait(
        self,
        key: Any,
        n: Any,
        timeout: Any,
        plan: Any,
        asking: Callable[[Server], Callable[[list[bytes], Any], Awaitable[Any]]],
    ) -> bool:
        """``acquire`` awaited: the reservation asked through ``asking`` (the server's threads
        for a synchronous client, the client itself for an asyncio one)."""
        core, keys = self._target(key, plan)
        core.args(RESERVE, n, None)
        return await awaited_acquire(
            core,
            keys,
            n,
            timeout,
            asking(core.server),
            lambda e: self._fall_back(e, "check", key, n, None, plan, core),
        )

    def _fall_back(
        self,
        error: BaseException,
        method: str,
        key: Any,
        n: Any,
        now_ns: Any,
        plan: str | None = None,
        core: Core | None = None,
    ) -> Any:
        """The ``on_error`` answer to ``method`` asked with these arguments (``key`` is left
        out for a one-key limiter, as its local fallback takes none)."""
        return (core or self._core).policy.answer(
            error, method, *self._asked(method, key, n, now_ns), **_planned(plan)
        )

    def _fall_back_levels(
        self, error: BaseException, key: Any, n: Any, now_ns: Any, plan: Any, core: Core
    ) -> tuple[Decision, Levels | None]:
        """The ``on_error`` answer to ``check_levels`` asked with these arguments."""
        return core.policy.answer_levels(
            error, *self._asked("check", key, n, now_ns), **_planned(plan)
        )

    def _fall_back_settle(
        self, error: BaseException, key: Any, costs: tuple[Any, Any], now_ns: Any, plan: Any
    ) -> None:
        """The ``on_error`` answer to ``settle`` of ``costs`` (reserved, actual): a local
        limiter given as the policy settles them; otherwise there is nothing to do."""
        args = (*costs, now_ns)
        self._target(key, plan)[0].policy.answer(
            error, "settle", *((key, *args) if self.takes_keys else args), **_planned(plan)
        )

    def _asked(self, method: str, key: Any, n: Any, now_ns: Any) -> tuple[Any, ...]:
        """The arguments of ``method`` as a local limiter of this kind is asked."""
        args = (now_ns,) if method == "available" else (n, now_ns)
        return (key, *args) if self.takes_keys else args


def its_key(method: Callable[Concatenate[Any, Any, _P], _R]) -> Callable[Concatenate[Any, _P], _R]:
    """A key-taking operation (``method(limiter, key, ...)``) as a one-key limiter's method:
    called without the key, which is the limiter's own (:meth:`OneKey._target`), and shown
    (``inspect.signature``, ``help()``) without it, as type checkers read it. ``plan=`` stays
    in the signature, and is refused with a ``TypeError`` if given: a one-key limiter has no
    plans. A coroutine function stays one, so that ``inspect.iscoroutinefunction`` still
    knows it."""
    signature = inspect.signature(method)
    shown = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != "key"]
    )
    if inspect.iscoroutinefunction(method):

        async def awaited(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> Any:
            return await method(self, None, *args, **kwargs)

        bound = cast(Callable[Concatenate[Any, _P], _R], awaited)
    else:

        def bound(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            return method(self, None, *args, **kwargs)

    functools.update_wrapper(bound, method)
    bound.__signature__ = shown  # type: ignore[attr-defined]
    return bound


def _planned(plan: Any) -> dict[str, Any]:
    """``plan=`` as a call passes it on: not at all without one."""
    return {} if plan is None else {"plan": plan}


@constructors(OneKeyKeywords)
class OneKey(Limits):
    """What :class:`RedisRateLimiter` and :class:`AsyncRedisRateLimiter` share: everything but
    running the script."""

    def __init__(self, client: Any, rate: Any = None, **options: Unpack[OneKeyKeywords]) -> None:
        given = Options.read(rate, options, RateLimiter)
        self._core = core = Core(Server(client), given, given.configuration())
        self._keys = [redis_key(core.one_key_layout, given.name)]
        self._unavailable = core.server.unavailable

    @property
    def name(self) -> str:
        """The limit's identity: limiters of the same name (and prefix) share one limit."""
        return self._core.name

    @property
    def bands(self) -> tuple[Band, ...]:
        """The bands, each a :class:`Band` as it was written, as in-process."""
        return self._core.validator.bands

    @property
    def redis_key(self) -> bytes:
        """The hash on the server that holds this limit: ``prefix{name}:fingerprint``, the name
        escaped as a hash tag (see ``_keys.py``)."""
        return self._keys[0]

    def _target(self, key: Any, plan: Any) -> tuple[Core, list[bytes]]:
        """The one core and the one Redis key: a one-key limiter has no plans."""
        if plan is not None:
            raise TypeError(f"plan={plan!r} was given, but a {type(self).__name__} has no plans")
        return self._core, self._keys

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"


@constructors(KeyedKeywords)
class ManyKeys(Limits):
    """What :class:`RedisKeyedRateLimiter` and :class:`AsyncRedisKeyedRateLimiter` share:
    everything but running the script."""

    takes_keys = True

    def key_refusal(self, key: object) -> str | None:
        """Why ``key`` cannot be a Redis key (None if it can): a declared capability."""
        return _plugin.key_refusal(key)

    def __init__(self, client: Any, rate: Any = None, **options: Unpack[KeyedKeywords]) -> None:
        given = Options.read(rate, options, KeyedRateLimiter)
        server = Server(client)  # one for every plan: the script loaded once
        #: Each plan's core, by name; None without plans.
        self._plans: dict[str, Core] | None = None
        if given.plans is None:
            self._core = core = Core(server, given, given.configuration())
        else:
            names, configurations = given.plan_configurations()
            cores = [Core(server, given, configuration) for configuration in configurations]
            self._plans = {plan: cores[index] for plan, index in names}
            self._core = core = cores[0]
            check_fallback_plans(given.on_error, self._plans)
        self._unavailable = core.server.unavailable

    @property
    def name(self) -> str:
        """The limiter's identity: limiters of the same name (and prefix) share each key's
        limit, and limiters of different names never do, whatever the keys."""
        return self._core.name

    @property
    def bands(self) -> tuple[Band, ...]:
        """The bands, each a :class:`Band` as it was written, as in-process. A limiter with
        plans has no bands of its own: AttributeError, pointing to :attr:`plans`."""
        if self._plans is not None:
            raise AttributeError(
                f"a {type(self).__name__} with plans has no bands of its own: read .plans, "
                f"each plan's bands ({listed(self._plans)})"
            )
        return self._core.validator.bands

    @property
    def plans(self) -> dict[str, tuple[Band, ...]] | None:
        """Each plan's bands, a dict of plan name to a tuple of :class:`Band`; None without
        plans."""
        if self._plans is None:
            return None
        return {plan: core.validator.bands for plan, core in self._plans.items()}

    def redis_key(self, key: str | bytes, *, plan: str | None = None) -> bytes:
        """The hash on the server that holds ``key``'s limit (under ``plan``):
        ``prefix{key}:fingerprint:name``, the key escaped as a hash tag (see ``_keys.py``), the
        fingerprint being that of the plan's bands."""
        return redis_key(self._core_of(plan).key_layout, key)

    def _core_of(self, plan: Any) -> Core:
        """The core of ``plan``: the only one without plans (then ``plan`` must not be given),
        else the named plan's, which must be one of them (the native limiters' errors)."""
        plans = self._plans
        if plans is None:
            if plan is None:
                return self._core
            raise TypeError(
                f"plan={plan!r} was given, but this limiter has no plans: give it "
                "plans={name: rate or bands, ...} to limit each key by its plan"
            )
        if plan is None:
            raise TypeError(f"plan= is required: this limiter's plans are {listed(plans)}")
        if not isinstance(plan, str):
            raise TypeError(
                f"plan must be a str naming one of this limiter's plans ({listed(plans)}), "
                f"not {plan!r}"
            )
        core = plans.get(plan)
        if core is None:
            raise ValueError(f"unknown plan {plan!r}: this limiter's plans are {listed(plans)}")
        return core

    def _target(self, key: Any, plan: Any) -> tuple[Core, list[bytes]]:
        """The core of ``plan`` (see :meth:`_core_of`) and ``key``'s Redis key under it."""
        core = self._core if plan is None and self._plans is None else self._core_of(plan)
        return core, [redis_key(core.key_layout, key)]

    def __repr__(self) -> str:
        if self._plans is not None:
            return f"{type(self).__name__}(name={self.name!r}, plans={self.plans!r})"
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"
