"""Hierarchical shaping as a tree of parent pointers: three validation passes and borrowing."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ValidationOutcome(str, Enum):
    """What ``validate_tree`` found first."""

    VALID = "Valid"
    UNKNOWN_PARENT = "UnknownParent"
    CYCLE = "Cycle"
    OVER_SUBSCRIBED = "OverSubscribed"


@dataclass(frozen=True)
class TrafficClass:
    """A class, its guaranteed rate and its parent's name (``None`` for a root)."""

    name: Any
    guaranteed_rate: Any
    parent: Any = None


@dataclass
class ClassTree:
    """Classes by name."""

    classes: dict[Any, TrafficClass] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidationResult:
    """The outcome and a human-readable detail (empty when valid)."""

    outcome: ValidationOutcome
    detail: str


def _children(classes: dict[Any, TrafficClass], name: Any) -> list[TrafficClass]:
    return [c for c in classes.values() if c.parent == name]


def _claimed(children: list[TrafficClass]) -> Any:
    total = 0
    for child in children:
        total = total + child.guaranteed_rate
    return total


def validate_tree(tree: ClassTree) -> ValidationResult:
    """Unknown parents, then cycles, then over-subscription: the first problem found."""
    classes = tree.classes
    for cls in classes.values():
        if cls.parent is not None and cls.parent not in classes:
            return ValidationResult(ValidationOutcome.UNKNOWN_PARENT, f"{cls.name} -> {cls.parent}")
    for cls in classes.values():
        visited = set()
        name = cls.name
        while name is not None:
            if name in visited:
                return ValidationResult(ValidationOutcome.CYCLE, f"cycle reached at {name}")
            visited.add(name)
            name = classes[name].parent
    for cls in classes.values():
        children = _children(classes, cls.name)
        if children:
            claimed = _claimed(children)
            if claimed > cls.guaranteed_rate:
                return ValidationResult(
                    ValidationOutcome.OVER_SUBSCRIBED,
                    f"{cls.name}: children claim {claimed} > guaranteed {cls.guaranteed_rate}",
                )
    return ValidationResult(ValidationOutcome.VALID, "")


def borrowable(tree: ClassTree, class_name: Any) -> Any:
    """Sum, from the class up to the root, of each class's guarantee its children leave free."""
    total = 0
    name = class_name
    while name is not None:
        cls = tree.classes[name]
        spare = cls.guaranteed_rate - _claimed(_children(tree.classes, name))
        total += max(spare, 0)
        name = cls.parent
    return total
