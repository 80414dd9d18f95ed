"""Type stubs for the native core; import these names from ``protocol_in_code.qos`` instead."""

import enum
from typing import Any, ClassVar, final

__all__ = [
    "ConsumeOutcome",
    "ConsumeResult",
    "RefillResult",
    "TokenBucket",
    "compute_refill",
    "try_consume",
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
