"""Type stubs for the native core; import these names from ``protocol_in_code.qos`` instead."""

import enum
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, final

from typing_extensions import Buffer, Self, disjoint_base

__all__ = [
    "ClassTree",
    "Color",
    "ConsumeOutcome",
    "ConsumeResult",
    "Decision",
    "EnqueueResult",
    "ExcessRateMeter",
    "KeyedStats",
    "LeakyBucket",
    "LimitOutcome",
    "NativeKeyedRateLimiter",
    "NativeRateLimiter",
    "OfferOutcome",
    "OfferResult",
    "RefillResult",
    "SingleRateMeter",
    "TokenBucket",
    "ToyShaper",
    "TrafficClass",
    "TwoRateMeter",
    "ValidationOutcome",
    "ValidationResult",
    "borrowable",
    "compute_refill",
    "leak",
    "offer",
    "run_contention",
    "try_consume",
    "validate_tree",
]

@final
class RefillResult:
    __match_args__: ClassVar[tuple[str, str]]
    def __new__(cls, tokens: Any, last_refill_at: Any) -> RefillResult: ...
    @property
    def tokens(self) -> Any: ...
    @property
    def last_refill_at(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def compute_refill(
    tokens: Any, capacity: Any, rate_per_sec: Any, last_refill_at: Any, now: Any
) -> RefillResult: ...

class ConsumeOutcome(str, enum.Enum):
    def __new__(cls, value: object) -> ConsumeOutcome: ...
    ALLOWED = "Allowed"
    THROTTLED = "Throttled"

@final
class ConsumeResult:
    __match_args__: ClassVar[tuple[str, str]]
    def __new__(cls, outcome: ConsumeOutcome, tokens_remaining: Any) -> ConsumeResult: ...
    @property
    def outcome(self) -> ConsumeOutcome: ...
    @property
    def tokens_remaining(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class TokenBucket:
    __match_args__: ClassVar[tuple[str, str, str, str]]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    capacity: Any
    tokens: Any
    rate_per_sec: Any
    last_refill_at: Any
    def __new__(
        cls, capacity: Any, tokens: Any, rate_per_sec: Any, last_refill_at: Any = 0
    ) -> TokenBucket: ...
    def __eq__(self, value: object, /) -> bool: ...

def try_consume(bucket: TokenBucket, n: Any, now: Any) -> ConsumeResult: ...

class OfferOutcome(str, enum.Enum):
    def __new__(cls, value: object) -> OfferOutcome: ...
    ACCEPTED = "Accepted"
    OVERFLOWED = "Overflowed"

@final
class LeakyBucket:
    __match_args__: ClassVar[tuple[str, str, str, str]]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    capacity: Any
    level: Any
    leak_per_sec: Any
    last_leak_at: Any
    def __new__(
        cls, capacity: Any, level: Any, leak_per_sec: Any, last_leak_at: Any = 0
    ) -> LeakyBucket: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class OfferResult:
    __match_args__: ClassVar[tuple[str, str]]
    def __new__(cls, outcome: OfferOutcome, level: Any) -> OfferResult: ...
    @property
    def outcome(self) -> OfferOutcome: ...
    @property
    def level(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def leak(bucket: LeakyBucket, now: Any) -> None: ...
def offer(bucket: LeakyBucket, n: Any, now: Any) -> OfferResult: ...

class ValidationOutcome(str, enum.Enum):
    def __new__(cls, value: object) -> ValidationOutcome: ...
    VALID = "Valid"
    UNKNOWN_PARENT = "UnknownParent"
    CYCLE = "Cycle"
    OVER_SUBSCRIBED = "OverSubscribed"

@final
class TrafficClass:
    __match_args__: ClassVar[tuple[str, str, str]]
    def __new__(
        cls, name: str, guaranteed_rate: Any, parent: str | None = None
    ) -> TrafficClass: ...
    @property
    def name(self) -> str: ...
    @property
    def guaranteed_rate(self) -> Any: ...
    @property
    def parent(self) -> str | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ClassTree:
    __match_args__: ClassVar[tuple[str]]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    classes: dict[str, TrafficClass]
    def __new__(cls, classes: dict[str, TrafficClass] = ...) -> ClassTree: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class ValidationResult:
    __match_args__: ClassVar[tuple[str, str]]
    def __new__(cls, outcome: ValidationOutcome, detail: str) -> ValidationResult: ...
    @property
    def outcome(self) -> ValidationOutcome: ...
    @property
    def detail(self) -> str: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def validate_tree(tree: ClassTree) -> ValidationResult: ...
def borrowable(tree: ClassTree, class_name: str) -> Any: ...

@final
class EnqueueResult:
    __match_args__: ClassVar[tuple[str, str, str]]
    def __new__(
        cls, class_name: str, outcome: ConsumeOutcome, tokens_remaining: Any
    ) -> EnqueueResult: ...
    @property
    def class_name(self) -> str: ...
    @property
    def outcome(self) -> ConsumeOutcome: ...
    @property
    def tokens_remaining(self) -> Any: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class ToyShaper:
    __match_args__: ClassVar[tuple[str, str, str, str]]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    tree: ClassTree
    buckets: dict[str, TokenBucket]
    clock: Any
    trace: list[str]
    def __new__(
        cls,
        tree: ClassTree,
        buckets: dict[str, TokenBucket] = ...,
        clock: Any = 0,
        trace: list[str] = ...,
    ) -> ToyShaper: ...
    def __eq__(self, value: object, /) -> bool: ...
    def tick(self, seconds: Any) -> None: ...
    def enqueue(self, class_name: str, size: Any, now: Any) -> EnqueueResult: ...

def run_contention(
    shaper: ToyShaper, offered: Iterable[tuple[str, Any]]
) -> tuple[EnqueueResult, ...]: ...

class LimitOutcome(str, enum.Enum):
    def __new__(cls, value: object) -> LimitOutcome: ...
    ALLOWED = "Allowed"
    DENIED = "Denied"
    NEVER = "Never"
    REFUSED = "Refused"

@final
class Decision:
    __match_args__: ClassVar[tuple[str, str, str]]
    def __new__(cls, outcome: LimitOutcome, wait_ns: int | None, remaining: int) -> Decision: ...
    @property
    def outcome(self) -> LimitOutcome: ...
    @property
    def wait_ns(self) -> int | None: ...
    @property
    def remaining(self) -> int: ...
    @property
    def allowed(self) -> bool: ...
    def __bool__(self) -> bool: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class NativeRateLimiter:
    def __new__(
        cls,
        rate: Any = None,
        burst: int | None = None,
        *,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        initial: int | None = None,
        start_ns: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Self: ...
    def try_acquire(self, n: int = 1, now_ns: int | None = None) -> bool: ...
    def check(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def refund(self, n: int = 1, now_ns: int | None = None) -> None: ...
    def available(self, now_ns: int | None = None) -> int: ...
    def acquire(self, n: int = 1, timeout: float | None = None) -> bool: ...
    @property
    def bands(self) -> tuple[tuple[int | Fraction, int], ...]: ...
    def __reduce__(self) -> tuple[Any, tuple[()], list[tuple[int, int | None]]]: ...
    def __setstate__(self, balances: list[tuple[int, int | None]]) -> None: ...

@final
class KeyedStats:
    __match_args__: ClassVar[tuple[str, str, str, str]]
    def __new__(cls, allowed: int, denied: int, refused: int, forgotten: int) -> KeyedStats: ...
    @property
    def allowed(self) -> int: ...
    @property
    def denied(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def forgotten(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class NativeKeyedRateLimiter:
    def __new__(
        cls,
        rate: Any = None,
        burst: int | None = None,
        *,
        per: Any = None,
        bands: Iterable[Any] | None = None,
        max_keys: int = 100000,
        shards: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Self: ...
    def try_acquire(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> bool: ...
    def check(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def peek(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def refund(self, key: Hashable, n: int = 1, now_ns: int | None = None) -> None: ...
    def available(self, key: Hashable, now_ns: int | None = None) -> int: ...
    def acquire(self, key: Hashable, n: int = 1, timeout: float | None = None) -> bool: ...
    def try_acquire_many(
        self, keys: _Ints, now_ns: _Ints, n: int | _Ints | None = None
    ) -> array[int]: ...
    @property
    def stats(self) -> KeyedStats: ...
    @property
    def max_keys(self) -> int: ...
    @property
    def bands(self) -> tuple[tuple[int | Fraction, int], ...]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __iter__(self) -> Iterator[Any]: ...
    def __reduce__(self) -> tuple[Any, tuple[()], Any]: ...
    def __setstate__(self, state: Any) -> None: ...

class Color(str, enum.Enum):
    def __new__(cls, value: object) -> Color: ...
    GREEN = "Green"
    YELLOW = "Yellow"
    RED = "Red"

_Rate = int | Fraction | Decimal | str | float
_Ints = Buffer | Sequence[int]

@final
class SingleRateMeter:
    def __new__(
        cls,
        cir: _Rate,
        cbs: int,
        ebs: int,
        *,
        start_ns: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> SingleRateMeter: ...
    def mark(
        self, nbytes: int, now_ns: int | None = None, color: Color | str | None = None
    ) -> Color: ...
    def mark_many(
        self, sizes: _Ints, times_ns: _Ints, colors: _Ints | None = None
    ) -> array[int]: ...
    @property
    def tc(self) -> int | Fraction: ...
    @property
    def te(self) -> int | Fraction: ...
    def __setstate__(self, state: list[tuple[int, int | None]]) -> None: ...

@final
class TwoRateMeter:
    def __new__(
        cls,
        cir: _Rate,
        cbs: int,
        pir: _Rate,
        pbs: int,
        *,
        start_ns: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> TwoRateMeter: ...
    def mark(
        self, nbytes: int, now_ns: int | None = None, color: Color | str | None = None
    ) -> Color: ...
    def mark_many(
        self, sizes: _Ints, times_ns: _Ints, colors: _Ints | None = None
    ) -> array[int]: ...
    @property
    def tp(self) -> int | Fraction: ...
    @property
    def tc(self) -> int | Fraction: ...
    def __setstate__(self, state: list[tuple[int, int | None]]) -> None: ...

@final
class ExcessRateMeter:
    def __new__(
        cls,
        cir: _Rate,
        cbs: int,
        eir: _Rate,
        ebs: int,
        *,
        start_ns: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> ExcessRateMeter: ...
    def mark(
        self, nbytes: int, now_ns: int | None = None, color: Color | str | None = None
    ) -> Color: ...
    def mark_many(
        self, sizes: _Ints, times_ns: _Ints, colors: _Ints | None = None
    ) -> array[int]: ...
    @property
    def tc(self) -> int | Fraction: ...
    @property
    def te(self) -> int | Fraction: ...
    def __setstate__(self, state: list[tuple[int, int | None]]) -> None: ...
