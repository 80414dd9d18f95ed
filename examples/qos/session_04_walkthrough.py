"""Session 04 walkthrough: a class tree is only parent pointers, checked in three passes.

Hierarchical shaping gives each traffic class a guaranteed rate and a parent. The tree is just
a dict from name to TrafficClass(name, guaranteed_rate, parent): no child lists to keep in
sync, everything else is found by walking parent pointers. validate_tree() checks it in three
passes, in order, and reports the first problem, because each pass only makes sense once the
one before it has passed:

    1. unknown parent    every parent must be a class in the tree, or a walk up falls off it
                         (detail "video -> ghost")
    2. cycle             walking up from each class must reach a root, never a name twice
                         (detail "cycle reached at a")
    3. over-subscription a class's direct children may not be guaranteed more, together,
                         than the class itself (detail "default: children claim 120 >
                         guaranteed 100")

A valid tree gives VALID with an empty detail. borrowable(tree, name) then says how much a
class could use: walking from it to the root, each class adds the part of its own guarantee
that its direct children leave unclaimed.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/session_04_walkthrough.py

Each check prints one line, [OK] or [NG]; the exit status is 1 if any check is NG.
"""

import sys

from protocol_in_code.qos.classes import (
    ClassTree,
    TrafficClass,
    ValidationOutcome,
    ValidationResult,
    borrowable,
    validate_tree,
)

failures = 0


def report(ok, what, shown, expected):
    """Print one [OK]/[NG] line with the repr of what was checked."""
    global failures
    if ok:
        print(f"[OK] {what} -> {shown!r}")
    else:
        failures += 1
        print(f"[NG] {what} -> {shown!r} (expected {expected!r})")


def check(what, tree, outcome, detail):
    """validate_tree(tree) must find `outcome` (the enum member itself) with this detail."""
    result = validate_tree(tree)
    expected = ValidationResult(outcome, detail)
    report(result == expected and result.outcome is outcome, what, result, expected)


def tree_of(*classes):
    """A ClassTree from TrafficClass objects, keyed by their names."""
    return ClassTree(classes={c.name: c for c in classes})


def main():
    # A valid 2-level tree: the root guarantees 100; its children claim 60 + 30 = 90 <= 100.
    valid = tree_of(
        TrafficClass("default", 100),
        TrafficClass("video", 60, parent="default"),
        TrafficClass("voice", 30, parent="default"),
    )
    check("a valid 2-level tree", valid, ValidationOutcome.VALID, "")

    # Children may claim all of their parent's guarantee, just not more: 60 + 40 = 100.
    check(
        "children claiming exactly the parent's 100",
        tree_of(
            TrafficClass("default", 100),
            TrafficClass("video", 60, parent="default"),
            TrafficClass("voice", 40, parent="default"),
        ),
        ValidationOutcome.VALID,
        "",
    )

    # Pass 1: "video" names a parent that is not in the tree.
    check(
        "pass 1: an unknown parent",
        tree_of(TrafficClass("default", 100), TrafficClass("video", 60, parent="ghost")),
        ValidationOutcome.UNKNOWN_PARENT,
        "video -> ghost",
    )

    # Pass 2: a -> b -> a never reaches a root; walking up from a meets a again.
    check(
        "pass 2: a cycle",
        tree_of(TrafficClass("a", 10, parent="b"), TrafficClass("b", 10, parent="a")),
        ValidationOutcome.CYCLE,
        "cycle reached at a",
    )

    # Pass 3: the children of "default" claim 70 + 50 = 120, more than its own 100.
    check(
        "pass 3: over-subscription",
        tree_of(
            TrafficClass("default", 100),
            TrafficClass("video", 70, parent="default"),
            TrafficClass("voice", 50, parent="default"),
        ),
        ValidationOutcome.OVER_SUBSCRIBED,
        "default: children claim 120 > guaranteed 100",
    )

    # The passes run in order: an unknown parent is reported even with a cycle in the tree.
    check(
        "the first problem in pass order wins",
        tree_of(
            TrafficClass("a", 10, parent="b"),
            TrafficClass("b", 10, parent="a"),
            TrafficClass("video", 5, parent="ghost"),
        ),
        ValidationOutcome.UNKNOWN_PARENT,
        "video -> ghost",
    )

    # borrowable of the leaf "voice": its own 30 (it has no children) plus what "default"
    # leaves unclaimed, 100 - (60 + 30) = 10.
    amount = borrowable(valid, "voice")
    report(amount == 40 and type(amount) is int, "borrowable(valid, 'voice'): 30 + 10", amount, 40)

    # The root alone can only lend what its children leave free.
    amount = borrowable(valid, "default")
    report(amount == 10 and type(amount) is int, "borrowable(valid, 'default')", amount, 10)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
