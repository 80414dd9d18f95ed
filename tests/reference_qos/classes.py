"""Hierarchical shaping as a tree of parent pointers: three validation passes and borrowing.

The decision flow is the course's, step for step: the children's rates are summed per parent
name in one pass over the classes (by the ``parent`` each class gives, not by looking children
up), over-subscription is reported for the parents in the order they were first named, and
``borrowable`` makes the same sums for the whole tree before it walks up from the class.
"""

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


def _claims_by_parent(classes: dict[Any, TrafficClass]) -> dict[Any, Any]:
    """Each named parent's children's rates, summed from ``0`` in class order.

    Keyed by the parent's name as the children write it (whether or not such a class exists),
    in the order the parents are first named.
    """
    claims: dict[Any, Any] = {}
    for cls in classes.values():
        if cls.parent is not None:
            claims[cls.parent] = claims.get(cls.parent, 0) + cls.guaranteed_rate
    return claims


def validate_tree(tree: ClassTree) -> ValidationResult:
    """Unknown parents, then cycles, then over-subscription: the first problem found."""
    for cls in tree.classes.values():
        if cls.parent is not None and cls.parent not in tree.classes:
            return ValidationResult(ValidationOutcome.UNKNOWN_PARENT, f"{cls.name} -> {cls.parent}")
    for cls in tree.classes.values():
        visited = set()
        name = cls.name
        while name is not None:
            if name in visited:
                return ValidationResult(ValidationOutcome.CYCLE, f"cycle reached at {name}")
            visited.add(name)
            name = tree.classes[name].parent
    for parent_name, claimed in _claims_by_parent(tree.classes).items():
        parent = tree.classes[parent_name]
        if claimed > parent.guaranteed_rate:
            return ValidationResult(
                ValidationOutcome.OVER_SUBSCRIBED,
                f"{parent_name}: children claim {claimed} > guaranteed {parent.guaranteed_rate}",
            )
    return ValidationResult(ValidationOutcome.VALID, "")


def borrowable(tree: ClassTree, class_name: Any) -> Any:
    """Sum, from the class up to the root, of each class's guarantee its children leave free.

    Every parent's claims are summed first, over the whole tree; then the walk starts.
    """
    claims = _claims_by_parent(tree.classes)
    total = 0
    name = class_name
    while name is not None:
        cls = tree.classes[name]
        total += max(cls.guaranteed_rate - claims.get(name, 0), 0)
        name = cls.parent
    return total
