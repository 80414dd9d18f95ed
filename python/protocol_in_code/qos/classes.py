"""Hierarchical shaping as a tree of parent pointers.

A :class:`ClassTree` is only a dict from class name to :class:`TrafficClass`; each class names
its parent (``None`` for a root) and the rate it is guaranteed. There are no child lists to keep
in sync: everything is found by walking parent pointers when asked.

:func:`validate_tree` runs three passes over the classes, in order, and reports the first
problem, because each pass would be meaningless if the one before had failed:

1. UNKNOWN_PARENT (``"video -> ghost"``): a parent that is not in the tree; a walk up would fall
   off it.
2. CYCLE (``"cycle reached at a"``): walking up from a class, with a fresh set of visited names,
   reaches some name twice; a walk would never end.
3. OVER_SUBSCRIBED (``"default: children claim 120 > guaranteed 100"``): the direct children of
   a class are guaranteed more, together, than the class itself. Children are not searched
   for: one pass over the classes adds each rate to a tally under the parent's name as the
   child writes it, and the tallies are checked in the order the parents were first named.

Otherwise the tree is VALID. :func:`borrowable` makes the same tallies for the whole tree, then
walks from a class to the root and adds up, for each class on the way, the part of its
guarantee that its direct children leave unclaimed:
``max(guaranteed_rate - children's guaranteed rates, 0)``.

Class names must be ``str``, as the course writes them.
"""

from protocol_in_code._native import (
    ClassTree,
    TrafficClass,
    ValidationOutcome,
    ValidationResult,
    borrowable,
    validate_tree,
)

__all__ = [
    "ClassTree",
    "TrafficClass",
    "ValidationOutcome",
    "ValidationResult",
    "borrowable",
    "validate_tree",
]
