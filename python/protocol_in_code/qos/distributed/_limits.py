"""What every Redis limiter holds: its cores (one, or one per plan), its keys, and its answers
when the server cannot decide."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from protocol_in_code._native import Band, KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.distributed._core import Core
from protocol_in_code.qos.distributed._keys import redis_key
from protocol_in_code.qos.distributed._options import (
    KeyedKeywords,
    OneKeyKeywords,
    Options,
    check_fallback_plans,
    listed,
    spelled_out,
)
from protocol_in_code.qos.distributed._replies import RESERVE
from protocol_in_code.qos.distributed._server import Server
from protocol_in_code.qos.distributed._shapes import old_shapes_refused
from protocol_in_code.qos.distributed._waiting import awaited_acquire

if TYPE_CHECKING:
    from typing_extensions import Unpack


@old_shapes_refused
class OneKey:
    """What :class:`RedisRateLimiter` and :class:`AsyncRedisRateLimiter` share: everything but
    running the script."""

    #: Whether each call names a key (the constructors' errors show the form to write).
    takes_keys = False

    @spelled_out(OneKeyKeywords)
    def __init__(self, client: Any, rate: Any = None, **options: Unpack[OneKeyKeywords]) -> None:
        given = Options.read(rate, options, RateLimiter)
        self._core = core = Core(Server(client), given)
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

    async def _wait(
        self,
        n: Any,
        timeout: Any,
        asking: Callable[[Server], Callable[[list[bytes], Any], Awaitable[Any]]],
    ) -> bool:
        """``acquire`` awaited: the reservation asked through ``asking`` (the server's threads for a
        synchronous client, the client itself for an asyncio one)."""
        self._core.args(RESERVE, n, None)
        return await awaited_acquire(
            self._core,
            self._keys,
            n,
            timeout,
            asking(self._core.server),
            lambda e: self._fall_back(e, "check", n, None),
        )

    def _fall_back(self, error: BaseException, method: str, n: Any, now_ns: Any) -> Any:
        """The ``on_error`` answer to ``method`` asked with these arguments."""
        args = (now_ns,) if method == "available" else (n, now_ns)
        return self._core.policy.answer(error, method, *args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"


@old_shapes_refused
class ManyKeys:
    """What :class:`RedisKeyedRateLimiter` and :class:`AsyncRedisKeyedRateLimiter` share:
    everything but running the script."""

    #: Whether each call names a key (the constructors' errors show the form to write).
    takes_keys = True

    @spelled_out(KeyedKeywords)
    def __init__(self, client: Any, rate: Any = None, **options: Unpack[KeyedKeywords]) -> None:
        given = Options.read(rate, options, KeyedRateLimiter)
        server = Server(client)  # one for every plan: the script loaded once
        #: Each plan's core, by name; None without plans.
        self._plans: dict[str, Core] | None = None
        if given.plans is None:
            self._core = core = Core(server, given)
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

    async def _wait(
        self,
        key: Any,
        n: Any,
        timeout: Any,
        plan: Any,
        asking: Callable[[Server], Callable[[list[bytes], Any], Awaitable[Any]]],
    ) -> bool:
        """``acquire`` awaited for ``key``: see :meth:`OneKey._wait`."""
        core = self._core_of(plan)
        keys = [redis_key(core.key_layout, key)]
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
        """The ``on_error`` answer to ``method`` asked with these arguments."""
        args = (key, now_ns) if method == "available" else (key, n, now_ns)
        planned = {} if plan is None else {"plan": plan}
        return (core or self._core).policy.answer(error, method, *args, **planned)

    def __repr__(self) -> str:
        if self._plans is not None:
            return f"{type(self).__name__}(name={self.name!r}, plans={self.plans!r})"
        return f"{type(self).__name__}(name={self.name!r}, bands={list(self.bands)!r})"
