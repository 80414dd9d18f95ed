"""The constructors' options: declared once, with their defaults, their checks and their errors.

Every Redis limiter takes its rate alone by position and everything else by keyword. The
keywords are declared once, in :class:`OneKeyKeywords` and :class:`KeyedKeywords` (what the
two kinds share is :class:`_Keywords`), and each constructor says
``**options: Unpack[...]`` of one of them, so that a type checker knows every keyword and its
type. :func:`spelled_out` shows ``inspect`` (``help()``, an IDE) the same keywords, in
:data:`ORDER`, with the defaults :class:`Options` gives them. What a constructor is given
becomes one :class:`Options`, checked where it is made (:meth:`Options.read`); a core is built
from that record alone.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, TypeVar

from protocol_in_code._native import KeyedRateLimiter, RateLimiter, _read_plans
from protocol_in_code.qos._keywords import spell_out
from protocol_in_code.qos.distributed import _bands
from protocol_in_code.qos.distributed._policy import OnError

if TYPE_CHECKING:
    from typing_extensions import Required

    from protocol_in_code.qos.distributed._core import Core


#: A configuration read: the native limiter that checks a call's arguments as in-process, and
#: what the script is told of the bands.
Parsed: TypeAlias = tuple[RateLimiter, _bands.ScriptConfig]


class _Keywords(TypedDict, total=False):
    """The keywords of both kinds of limiter: what each means is said by
    :class:`~protocol_in_code.qos.distributed.RedisRateLimiter`."""

    name: Required[str]
    burst: int | None
    per: Any
    bands: Iterable[Any] | None
    on_error: OnError
    min_ttl_ms: int
    prefix: str | bytes


class OneKeyKeywords(_Keywords, total=False):
    """The keywords of :class:`RedisRateLimiter` and its asyncio form."""

    initial: int | None


class KeyedKeywords(_Keywords, total=False):
    """The keywords of :class:`RedisKeyedRateLimiter` and its asyncio form."""

    plans: dict[str, Any] | None


#: The order in which the constructors' signatures show their keywords.
ORDER = ("name", "burst", "per", "bands", "initial", "plans", "on_error", "min_ttl_ms", "prefix")


@dataclass(frozen=True)
class Options:
    """One limiter's options, checked: the one place their defaults are written."""

    name: str
    rate: Any = None
    burst: int | None = None
    per: Any = None
    bands: Iterable[Any] | None = None
    initial: int | None = None
    plans: dict[str, Any] | None = None
    on_error: OnError = "raise"
    min_ttl_ms: int = 0
    prefix: str | bytes = "qos:"

    @property
    def name_bytes(self) -> bytes:
        """The name as it goes into the Redis keys."""
        return self.name.encode("utf-8", "surrogatepass")

    @property
    def prefix_bytes(self) -> bytes:
        """The prefix as it goes into the Redis keys."""
        prefix = self.prefix
        return prefix.encode("utf-8", "surrogatepass") if isinstance(prefix, str) else prefix

    @classmethod
    def read(
        cls,
        rate: Any,
        keywords: Mapping[str, Any],
        local_type: type[RateLimiter] | type[KeyedRateLimiter],
    ) -> Options:
        """The options a constructor was given (``keywords``, already bound to its signature),
        each checked, in the order of :data:`ORDER`. ``local_type`` is the local limiter an
        ``on_error`` may name."""
        options = cls(rate=rate, **keywords)
        checked_name(options.name)
        min_ttl_ms = options.min_ttl_ms
        if not isinstance(min_ttl_ms, int) or isinstance(min_ttl_ms, bool):
            raise TypeError(f"min_ttl_ms must be an int, not {type(min_ttl_ms).__name__}")
        if not 0 <= min_ttl_ms <= _bands.MAX_TTL_MS:
            raise ValueError(f"min_ttl_ms must be between 0 and 2**53 - 1, not {min_ttl_ms!r}")
        prefix = options.prefix
        if not isinstance(prefix, (str, bytes)):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if b"{" in options.prefix_bytes:
            raise ValueError(
                f"prefix must not contain '{{': the first '{{' of a Redis key opens its cluster "
                f"hash tag, which is the key's (or the name's), not {options.prefix_bytes!r}"
            )
        _check_on_error(options.on_error, local_type)
        if (
            options.plans is None
            and isinstance(options.on_error, KeyedRateLimiter)
            and options.on_error.plans
        ):
            raise TypeError(
                "on_error is a local KeyedRateLimiter with plans, but this limiter has none: "
                "give the fallback the same bands, or both the same plans"
            )
        return options

    def configuration(self) -> Parsed:
        """The rate and bands, read as in-process (the native limiter's errors), within the
        script's bound."""
        return _bands.parse(self.rate, self.burst, self.per, self.bands, self.initial)

    def plan_configurations(self) -> tuple[list[tuple[str, int]], list[Parsed]]:
        """The plans, read as in-process: each plan's name and the index of its
        configuration, and the configurations (plans of the same bands share one), each
        within the script's bound (a ``ValueError`` naming the plan)."""
        names, configurations = _read_plans(self.plans, self.rate, self.burst, self.per, self.bands)
        parsed = []
        for index, configuration in enumerate(configurations):
            try:
                parsed.append(_bands.parse(None, None, None, configuration, None))
            except ValueError as error:  # a band beyond the script's bound
                said = next(plan for plan, at in names if at == index)
                raise ValueError(f"plans[{said!r}]: {error}") from None
        return names, parsed


def _check_on_error(on_error: Any, local_type: type[RateLimiter] | type[KeyedRateLimiter]) -> None:
    """``on_error`` is one of the three words, or a local limiter of ``local_type``."""
    if isinstance(on_error, str):
        if on_error not in ("raise", "allow", "deny"):
            raise ValueError(
                "on_error must be 'raise', 'allow', 'deny' or a local "
                f"{local_type.__name__} to fall back on, not {on_error!r}"
            )
    elif not isinstance(on_error, local_type):
        raise TypeError(
            "on_error must be 'raise', 'allow', 'deny' or a local "
            f"{local_type.__name__} to fall back on, not {type(on_error).__name__}"
        )


def _unrequired(hint: Any) -> Any:
    """A keyword's annotation as a signature shows it: ``Required[str]`` is ``str``."""
    hint = getattr(hint, "__forward_arg__", hint)
    if isinstance(hint, str) and hint.startswith("Required["):
        return hint.removeprefix("Required[").removesuffix("]")
    return hint


_Function = TypeVar("_Function", bound=Callable[..., Any])


def spelled_out(keywords: Any) -> Callable[[_Function], _Function]:
    """Show ``inspect`` a constructor's ``**options: Unpack[keywords]`` as the keywords they
    are: its ``__signature__`` lists, in place of ``**options``, one keyword-only parameter
    for each key of ``keywords``, in :data:`ORDER`, with the default :class:`Options` gives it
    (``name`` has none: it is required). The function itself is given back unwrapped."""
    defaults = {
        field.name: inspect.Parameter.empty
        if field.default is dataclasses.MISSING
        else field.default
        for field in dataclasses.fields(Options)
    }
    hints: dict[str, Any] = {}
    for kind in reversed(keywords.__mro__):
        hints.update(getattr(kind, "__annotations__", {}))

    def spell(function: _Function) -> _Function:
        return spell_out(
            function,
            ((name, _unrequired(hints[name]), defaults[name]) for name in ORDER if name in hints),
        )

    return spell


def checked_name(name: Any) -> bytes:
    """A limiter's name as it goes into its Redis keys: a non-empty ``str`` (any characters:
    the key layout keeps every name apart, see ``_keys.py``)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__} ({name!r})")
    if not name:
        raise ValueError("name must not be empty: it is the limit's identity on the server")
    return name.encode("utf-8", "surrogatepass")


def listed(plans: dict[str, Any]) -> str:
    """The plans' names, as an error lists them: ``'free', 'pro'``."""
    return ", ".join(f"'{plan}'" for plan in plans)


def check_fallback_plans(on_error: Any, plans: dict[str, Core]) -> None:
    """A local fallback of a limiter with plans must know every one of them, with the same
    bands, so that it can be asked what the server would have been."""
    if not isinstance(on_error, KeyedRateLimiter):
        return
    local = on_error.plans or {}
    for plan, core in plans.items():
        if plan not in local or _read_plans({plan: local[plan]})[1] != [core.validator.bands]:
            raise ValueError(
                f"on_error is a local KeyedRateLimiter without the plan {plan!r} of the same "
                "bands: give the fallback the same plans as this limiter"
            )
