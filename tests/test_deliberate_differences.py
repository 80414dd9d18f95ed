"""Every deliberate difference between the native package and the course's code, in one place.

Drop-in means the course's behaviour on any input a learner might try. Where the native build
differs, it is on purpose, because the course's code would loop forever or accept what the
course never passes, and each difference is listed in docs/course.md and pinned here:

1. Class names in a tree (dict keys, ``name`` and ``parent``) must be ``str``; anything else
   raises ``TypeError``.
2. ``borrowable`` on a tree with a cycle raises ``ValueError`` naming the cycle; the course's
   walk up never ends.
3. ``try_consume`` needs a native ``TokenBucket`` (``TypeError`` naming the parameter
   otherwise); the course's function takes any object with the four attributes.
4. ``ToyShaper.enqueue`` (and so ``run_contention``) needs native buckets in ``buckets``, for
   the same reason, and adds no trace line when refused.

These tests run on the native build only: the reference in ``tests/reference_qos`` follows the
course, so it differs here by design.
"""

from __future__ import annotations

import pytest
from qos_support import watchdog


@pytest.fixture(autouse=True)
def native_only(reference_mode):
    if reference_mode:
        pytest.skip("a deliberate difference of the native build (the reference differs here)")


def tree_of(qos, *classes):
    return qos.ClassTree({c[0]: qos.TrafficClass(*c) for c in classes})


# 1. Class names must be str -----------------------------------------------------------------

NOT_STR = [1, None, b"a", ("a",), 1.5, True]


def _bad_trees(qos, bad):
    """(where, tree, name to borrow): ``bad`` as a dict key, a class's name or a parent."""

    def tree(*classes, extra=()):
        t = tree_of(qos, *classes)
        for key, cls in extra:
            t.classes[key] = cls
        return t

    trees = [
        ("name", tree(extra=[("a", qos.TrafficClass(bad, 5))]), "a"),
        ("name of a sibling", tree(("a", 5), extra=[("c", qos.TrafficClass(bad, 1, "a"))]), "a"),
        ("key", tree(("a", 5), extra=[(bad, qos.TrafficClass("b", 5))]), "a"),
    ]
    if bad is not None:  # a None parent means a root
        trees.append(("parent", tree(("a", 5), extra=[("b", qos.TrafficClass("b", 1, bad))]), "b"))
    return trees


@pytest.mark.parametrize("bad", NOT_STR, ids=repr)
def test_names_in_the_tree_must_be_str(impl, bad):
    for where, tree, name in _bad_trees(impl, bad):
        for fn, args in ((impl.validate_tree, (tree,)), (impl.borrowable, (tree, name))):
            with pytest.raises(TypeError, match="class names must be str"):
                fn(*args)
                pytest.fail(f"{fn.__name__}: {bad!r} as the {where} did not raise")


# 2. borrowable on a cycle raises ------------------------------------------------------------

CYCLES = {
    "self-parent": ([("a", 10, "a")], "a"),
    "two classes": ([("a", 10, "b"), ("b", 10, "a")], "b"),
    "reached from a leaf": ([("leaf", 1, "x"), ("x", 10, "y"), ("y", 10, "x")], "leaf"),
}


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_borrowable_on_a_cycle_raises_value_error(impl, case):
    classes, name = CYCLES[case]
    tree = tree_of(impl, *classes)
    with watchdog(120), pytest.raises(ValueError) as info:  # the course's walk never returns
        impl.borrowable(tree, name)
    assert type(info.value) is ValueError
    assert "cycle" in str(info.value), str(info.value)


# 3. try_consume needs a native bucket -------------------------------------------------------


@pytest.mark.parametrize("bucket", ["reference TokenBucket", "object", "dict", "None"])
def test_try_consume_needs_a_native_bucket(impl, ref, bucket):
    bucket = _foreign_bucket(ref, bucket)
    with pytest.raises(TypeError, match=r"argument 'bucket'.*TokenBucket"):
        impl.try_consume(bucket, 1, 0)


# 4. ToyShaper.enqueue needs native buckets --------------------------------------------------


@pytest.mark.parametrize("bucket", ["reference TokenBucket", "object", "dict", "None"])
def test_enqueue_needs_a_native_bucket(impl, ref, bucket):
    tree = impl.ClassTree({"video": impl.TrafficClass("video", 10)})
    shaper = impl.ToyShaper(tree, {"video": _foreign_bucket(ref, bucket)})
    with pytest.raises(TypeError):
        shaper.enqueue("video", 1, 0)
    with pytest.raises(TypeError):
        impl.run_contention(shaper, [("video", 1)])
    assert shaper.trace == []


def _foreign_bucket(ref, kind):
    return {
        "reference TokenBucket": lambda: ref.TokenBucket(3, 3, 1),
        "object": object,
        "dict": lambda: {"capacity": 3, "tokens": 3, "rate_per_sec": 1, "last_refill_at": 0},
        "None": lambda: None,
    }[kind]()
