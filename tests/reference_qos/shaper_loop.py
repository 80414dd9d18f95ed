"""The capstone: classify, refill, spend, with one independent token bucket per class."""

from dataclasses import dataclass, field
from typing import Any

from .classes import ClassTree
from .token_bucket import ConsumeOutcome, TokenBucket, try_consume


@dataclass(frozen=True)
class EnqueueResult:
    """Which class, what its bucket decided, and the balance left."""

    class_name: Any
    outcome: ConsumeOutcome
    tokens_remaining: Any


@dataclass
class ToyShaper:
    """A class tree, a bucket per class, a clock, and a trace of every decision."""

    tree: ClassTree
    buckets: dict[Any, TokenBucket] = field(default_factory=dict)
    clock: Any = 0
    trace: list[str] = field(default_factory=list)

    def tick(self, seconds: Any) -> None:
        """Move the shaper's clock forward."""
        self.clock += seconds

    def enqueue(self, class_name: Any, size: Any, now: Any) -> EnqueueResult:
        """Spend ``size`` tokens from the class's own bucket at ``now``, and trace it."""
        bucket = self.buckets[class_name]
        result = try_consume(bucket, size, now)
        self.trace.append(
            f"enqueue {class_name} size={size} at t={now}: {result.outcome.value} "
            f"(tokens_remaining={result.tokens_remaining})"
        )
        return EnqueueResult(class_name, result.outcome, result.tokens_remaining)


def run_contention(shaper: ToyShaper, offered: Any) -> tuple[EnqueueResult, ...]:
    """Enqueue each ``(class_name, size)`` at the shaper's clock, in order."""
    return tuple(shaper.enqueue(class_name, size, shaper.clock) for class_name, size in offered)
