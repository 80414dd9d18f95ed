"""validate_tree and borrowable over random small class trees, compared with the reference.

``validate_tree``: the outcome (the enum member itself), the detail string exactly, the
exception type, and the Python operations done on traced rates (the children's rates are summed
from the int ``0`` in dict order, then compared with ``>``). ``borrowable``: the value (by value
and type), the exception type (``KeyError`` with the same key for an unknown name) and the
operations. Neither may change the tree.

Trees are built from string names (the course's), with unknown parents, self-parents, cycles,
over-subscribed and valid trees, and now and then a dict key that differs from the class's own
``name`` (the passes use both, exactly as the course's code does). ``borrowable`` is only called
on trees without a cycle: the reference walks a cycle forever.

Deep chains (up to 400 classes, with up to three faults, listed root first, leaf first or
shuffled) are compared the same way, and chains deeper than Python's recursion limit, worked by
hand, pin which problem is reported when several apply: an unknown parent anywhere, then the
first class (in dict order) whose walk up either finds a cycle or starts from a name that is no
key, then a sum that fails, then the first over-subscribed parent in the order first named.

The native build's deliberate differences (class names must be ``str``; ``borrowable`` raises
``ValueError`` on a cycle, where the course's walk never ends) are tested in
``test_deliberate_differences.py``.
"""

from __future__ import annotations

import inspect
import sys
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qos_support import (
    BOOM,
    INF,
    NAN,
    BoomError,
    Traced,
    TracedInplace,
    anything,
    assert_same_exception,
    describe,
    kind_values,
    materialize,
    run,
    same_value,
)

NAMES = ["a", "b", "c", "d", "video", "voice", "default", "é"]
GHOST = "ghost"

# --------------------------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------------------------


@st.composite
def tree_entries(draw, rates: st.SearchStrategy, acyclic: bool = False):
    """[(key, name, rate recipe, parent)] in dict order.

    Most trees are forests (each parent an earlier key or None), so that valid and
    over-subscribed trees come up often, several parents at once among them; the rest take any
    key (self included) as a parent. Often a class's name is not its key (another key, or no
    key at all), and now and then a parent is any name, known or not. ``acyclic``: forests
    only, so a walk up from any class ends.
    """
    forest = acyclic or draw(st.integers(0, 2)) > 0
    keys = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=6))
    entries = []
    for i, key in enumerate(keys):
        name = key if draw(st.integers(0, 3)) else draw(st.sampled_from([*NAMES, GHOST]))
        if draw(st.integers(0, 19)) == 0:
            parent = GHOST
        elif forest:
            parent = draw(st.one_of(st.none(), st.sampled_from(keys[:i] or [None])))
            if parent is None and i and draw(st.integers(0, 9)) == 0 and not acyclic:
                parent = draw(st.sampled_from(NAMES))
        else:
            parent = draw(st.one_of(st.none(), st.sampled_from(keys), st.sampled_from(NAMES)))
        entries.append((key, name, draw(rates), parent))
    return entries


def build(qos, entries, log: list):
    return qos.ClassTree(
        {
            key: qos.TrafficClass(name, materialize(rate, log), parent)
            for key, name, rate, parent in entries
        }
    )


def tree_snapshot(tree):
    return [(k, c.name, c.guaranteed_rate, c.parent) for k, c in tree.classes.items()]


def assert_same_tree(got, want, context: str = "") -> None:
    g, w = tree_snapshot(got), tree_snapshot(want)
    assert len(g) == len(w), context
    for gc, wc in zip(g, w, strict=True):
        assert all(same_value(a, b) for a, b in zip(gc, wc, strict=True)), (
            f"{context}tree changed: {gc!r} != {wc!r}"
        )


# Small rates of every kind, so that valid and over-subscribed trees both come up.
small_rates = st.one_of(
    st.integers(0, 12),
    st.floats(0, 12),
    st.sampled_from([NAN, INF, 0.1, 0.2, 0.3, -0.0, True, False, 2**64, -1]),
    st.fractions(0, 12, max_denominator=4),
    st.decimals(0, 12, places=1),
)
mixed_rates = st.one_of(small_rates, anything)


def check_validate(impl, ref, entries) -> None:
    ref_log: list = []
    got_log: list = []
    rt, gt = build(ref, entries, ref_log), build(impl, entries, got_log)
    expected = run(ref.validate_tree, rt)
    got = run(impl.validate_tree, gt)
    assert_same_exception(expected, got)
    assert got_log == ref_log, "Python operations differ"
    assert_same_tree(gt, rt)
    if expected.raised:
        if isinstance(expected.exc, KeyError):
            assert got.exc.args == expected.exc.args
        return
    result, want = got.value, expected.value
    assert type(result) is impl.ValidationResult
    assert result.outcome is impl.ValidationOutcome(want.outcome.value)
    assert type(result.detail) is str and result.detail == want.detail, (
        f"detail {result.detail!r} != reference {want.detail!r}"
    )
    assert repr(result) == repr(want)


@given(entries=tree_entries(small_rates))
def test_validate_tree_matches_reference(impl, ref, entries):
    check_validate(impl, ref, entries)


@given(entries=tree_entries(mixed_rates))
def test_validate_tree_with_any_rates_matches_reference(impl, ref, entries):
    check_validate(impl, ref, entries)


@given(entries=kind_values.flatmap(tree_entries))
def test_validate_tree_with_one_kind_of_rate_matches_reference(impl, ref, entries):
    check_validate(impl, ref, entries)


# --------------------------------------------------------------------------------------------
# Deep chains, with faults
# --------------------------------------------------------------------------------------------

FAULTS = ["root's parent", "parent pointing down", "unknown parent", "name", "rate"]


@st.composite
def deep_tree_entries(draw, rates: st.SearchStrategy):
    """[(key, name, rate recipe, parent)]: a chain ``c0 <- c1 <- ...`` up to 400 deep, with a
    few siblings ``s*`` hanging off it, and up to three faults.

    Valid as built (each chain class guaranteed ``1``, each sibling ``0``). The faults: the
    root given a parent down the chain (a cycle, maybe through the root itself), some class
    given a parent further down (a cycle higher up), a parent that is no class, a class
    named for another key or for none, and a rate drawn from ``rates`` (an over-subscribed
    parent, or a sum or comparison that fails). Listed root first, leaf first or shuffled,
    since the cycle pass reports the first name reached twice from the first class listed.
    """
    depth = draw(st.integers(1, 400))
    keys = [f"c{i}" for i in range(depth)]
    entries = [[key, key, 1, keys[i - 1] if i else None] for i, key in enumerate(keys)]
    for i in range(draw(st.integers(0, 4))):
        entries.append([f"s{i}", f"s{i}", 0, draw(st.sampled_from(keys))])
    for fault in draw(st.lists(st.sampled_from(FAULTS), max_size=3)):
        if fault == "root's parent":
            entries[0][3] = draw(st.sampled_from(keys))
            continue
        at = draw(st.integers(0, len(entries) - 1))
        if fault == "parent pointing down":
            entries[at][3] = draw(st.sampled_from(keys[min(at, depth - 1) :]))
        elif fault == "unknown parent":
            entries[at][3] = GHOST
        elif fault == "name":
            entries[at][1] = draw(st.sampled_from([GHOST, *keys[:3], *keys[-3:]]))
        else:
            entries[at][2] = draw(rates)
    order = draw(st.sampled_from(["root first", "leaf first", "shuffled"]))
    if order == "leaf first":
        entries.reverse()
    elif order == "shuffled":
        draw(st.randoms(use_true_random=False)).shuffle(entries)
    return [tuple(entry) for entry in entries]


@given(entries=deep_tree_entries(small_rates))
def test_validate_deep_trees_matches_reference(impl, ref, entries):
    check_validate(impl, ref, entries)


@given(entries=deep_tree_entries(mixed_rates))
def test_validate_deep_trees_with_any_rates_matches_reference(impl, ref, entries):
    check_validate(impl, ref, entries)


DEPTH = 1_500


def chain_entries(depth=DEPTH, *, leaf_first=False, root_parent=None, **changes):
    """A valid chain ``c0 <- ... <- c(depth-1)`` as entries, ``root_parent`` given to ``c0``,
    ``changes`` mapping a key to ``(name, rate, parent)``; a key not in the chain is added at
    the end (before reversing, for ``leaf_first``)."""
    entries = {f"c{i}": (f"c{i}", 1, f"c{i - 1}" if i else root_parent) for i in range(depth)}
    entries.update(changes)
    listed = [(key, *fields) for key, fields in entries.items()]
    return listed[::-1] if leaf_first else listed


LAST = f"c{DEPTH - 1}"
MIDDLE = f"c{DEPTH // 2}"

# (what, entries, outcome member name or exception type, detail or KeyError key)
DEEP_CASES = [
    ("valid, root first", chain_entries(), "VALID", ""),
    ("valid, leaf first", chain_entries(leaf_first=True), "VALID", ""),
    ("the root's parent is the leaf, root first",
     chain_entries(root_parent=LAST), "CYCLE", "cycle reached at c0"),
    ("the root's parent is the leaf, leaf first",
     chain_entries(root_parent=LAST, leaf_first=True), "CYCLE", f"cycle reached at {LAST}"),
    ("the root's parent is the middle, root first",
     chain_entries(root_parent=MIDDLE), "CYCLE", "cycle reached at c0"),
    ("the root's parent is the middle, leaf first: the walk enters the loop there",
     chain_entries(root_parent=MIDDLE, leaf_first=True), "CYCLE", f"cycle reached at {MIDDLE}"),
    ("a self-parent at the leaf, root first: every walk before it reached the root",
     chain_entries(**{LAST: (LAST, 1, LAST)}), "CYCLE", f"cycle reached at {LAST}"),
    ("an unknown parent at the leaf beats a cycle at the root",
     chain_entries(root_parent=LAST, **{LAST: (LAST, 1, GHOST)}), "UNKNOWN_PARENT",
     f"{LAST} -> {GHOST}"),
    ("an unknown parent beats a name that is not a key listed before it",
     chain_entries(c1=("nobody", 1, "c0"), **{LAST: (LAST, 1, GHOST)}), "UNKNOWN_PARENT",
     f"{LAST} -> {GHOST}"),
    ("a cycle beats an over-subscribed parent",
     chain_entries(root_parent=LAST, extra=("extra", 5, "c0")), "CYCLE", "cycle reached at c0"),
    ("a cycle beats a rate that cannot be added",
     chain_entries(root_parent=LAST, extra=("extra", "5", "c0")), "CYCLE",
     "cycle reached at c0"),
    ("a name that is not a key, listed before a cycle",
     chain_entries(root_parent=LAST, leaf_first=True, **{LAST: ("nobody", 1, f"c{DEPTH - 2}")}),
     KeyError, "nobody"),
    ("a cycle found before a name that is not a key",
     chain_entries(root_parent=LAST, **{LAST: ("nobody", 1, f"c{DEPTH - 2}")}), "CYCLE",
     "cycle reached at c0"),
    ("a name that is another key starts that class's walk",
     chain_entries(c0=(LAST, 1, None)), "VALID", ""),
    ("over-subscribed at the root, named last", chain_entries(extra=("extra", 5, "c0")),
     "OVER_SUBSCRIBED", "c0: children claim 6 > guaranteed 1"),
    ("the parent named first is reported, leaf first",
     chain_entries(leaf_first=True, x=("x", 5, "c0"), y=("y", 5, LAST)),
     "OVER_SUBSCRIBED", f"{LAST}: children claim 5 > guaranteed 1"),
    ("a sum that fails beats an over-subscribed parent named before it",
     chain_entries(x=("x", 5, "c0"), y=("y", "5", LAST)), TypeError, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entries", "outcome", "detail"),
    [c[1:] for c in DEEP_CASES],
    ids=[c[0] for c in DEEP_CASES],
)
def test_deep_chains_like_the_reference(impl, ref, entries, outcome, detail):
    """Chains deeper than Python's recursion limit: the course's walks are loops, so it answers
    at any depth (no RecursionError), and so does the native build, with the same answer."""
    assert DEPTH > sys.getrecursionlimit()
    check_validate(impl, ref, entries)
    got = run(impl.validate_tree, build(impl, entries, []))
    if isinstance(outcome, type):
        assert type(got.exc) is outcome
        if outcome is KeyError:
            assert got.exc.args == (detail,)
        return
    assert got.value.outcome is impl.ValidationOutcome[outcome]
    assert got.value.detail == detail


def check_borrowable(impl, ref, entries, class_name) -> None:
    ref_log: list = []
    got_log: list = []
    rt, gt = build(ref, entries, ref_log), build(impl, entries, got_log)
    expected = run(ref.borrowable, rt, class_name)
    got = run(impl.borrowable, gt, class_name)
    assert_same_exception(expected, got)
    assert got_log == ref_log, "Python operations differ"
    assert_same_tree(gt, rt)
    if expected.raised:
        if isinstance(expected.exc, KeyError):
            assert got.exc.args == expected.exc.args
        return
    assert same_value(got.value, expected.value), (
        f"got {describe(got.value)}, reference {describe(expected.value)}"
    )


def _with_name(entries_strategy):
    return entries_strategy.flatmap(
        lambda entries: st.tuples(
            st.just(entries),
            st.sampled_from([*(e[0] for e in entries), GHOST]),
        )
    )


@given(case=_with_name(tree_entries(small_rates, acyclic=True)))
def test_borrowable_matches_reference(impl, ref, case):
    check_borrowable(impl, ref, *case)


@given(case=_with_name(tree_entries(mixed_rates, acyclic=True)))
def test_borrowable_with_any_rates_matches_reference(impl, ref, case):
    check_borrowable(impl, ref, *case)


@given(case=_with_name(kind_values.flatmap(lambda k: tree_entries(k, acyclic=True))))
def test_borrowable_with_one_kind_of_rate_matches_reference(impl, ref, case):
    check_borrowable(impl, ref, *case)


# --------------------------------------------------------------------------------------------
# The three passes, worked by hand
# --------------------------------------------------------------------------------------------


def tc(qos, name, rate, parent=None):
    return qos.TrafficClass(name, rate, parent)


def tree_of(qos, *classes):
    return qos.ClassTree({c[0]: tc(qos, *c) for c in classes})


VALID_TREE = [("default", 100), ("video", 60, "default"), ("voice", 30, "default")]

# (what, classes as (name, rate[, parent]), outcome member name, detail)
VALIDATION_CASES = [
    ("empty tree", [], "VALID", ""),
    ("a valid 2-level tree", VALID_TREE, "VALID", ""),
    ("children claiming exactly the guarantee",
     [("r", 10), ("x", 4, "r"), ("y", 6, "r")], "VALID", ""),
    ("unknown parent",
     [("default", 100), ("video", 60, "ghost")], "UNKNOWN_PARENT", "video -> ghost"),
    ("unknown parent found before an earlier cycle",
     [("a", 1, "b"), ("b", 1, "a"), ("c", 1, "nowhere")], "UNKNOWN_PARENT", "c -> nowhere"),
    ("self-parent", [("a", 10, "a")], "CYCLE", "cycle reached at a"),
    ("two-class cycle", [("a", 10, "b"), ("b", 10, "a")], "CYCLE", "cycle reached at a"),
    ("cycle reached from a leaf",
     [("leaf", 1, "x"), ("x", 10, "y"), ("y", 10, "x")], "CYCLE", "cycle reached at x"),
    ("cycle found before over-subscription",
     [("r", 1), ("k", 5, "r"), ("a", 10, "b"), ("b", 10, "a")], "CYCLE", "cycle reached at a"),
    ("over-subscription",
     [("default", 100), ("video", 70, "default"), ("voice", 50, "default")],
     "OVER_SUBSCRIBED", "default: children claim 120 > guaranteed 100"),
    ("over-subscription at the second level",
     [("root", 100), ("mid", 50, "root"), ("x", 30, "mid"), ("y", 30, "mid")],
     "OVER_SUBSCRIBED", "mid: children claim 60 > guaranteed 50"),
    ("float sums are Python's", [("r", 0.3), ("x", 0.1, "r"), ("y", 0.2, "r")],
     "OVER_SUBSCRIBED", "r: children claim 0.30000000000000004 > guaranteed 0.3"),
    ("Fractions print as Fractions", [("r", 1), ("x", Fraction(1, 2), "r"), ("y", 1, "r")],
     "OVER_SUBSCRIBED", "r: children claim 3/2 > guaranteed 1"),
    ("Decimals print as Decimals", [("r", Decimal("1.0")), ("x", Decimal("1.50"), "r")],
     "OVER_SUBSCRIBED", "r: children claim 1.50 > guaranteed 1.0"),
    ("a bool child sums to an int", [("r", False), ("x", True, "r")],
     "OVER_SUBSCRIBED", "r: children claim 1 > guaranteed False"),
    ("a NaN guarantee is never exceeded", [("r", NAN), ("x", 5, "r")], "VALID", ""),
    ("an infinite guarantee", [("r", INF), ("x", 10**400, "r")], "VALID", ""),
    ("the parent named first is reported first",
     [("a", 10), ("b", 10), ("b1", 20, "b"), ("a1", 6, "a"), ("a2", 6, "a")],
     "OVER_SUBSCRIBED", "b: children claim 20 > guaranteed 10"),
    ("a parent named before it is listed",
     [("x", 7, "r"), ("s", 1), ("y", 2, "s"), ("r", 5)],
     "OVER_SUBSCRIBED", "r: children claim 7 > guaranteed 5"),
    ("a huge int sum stays exact", [("r", 2**64), ("x", 2**63, "r"), ("y", 2**63 + 1, "r")],
     "OVER_SUBSCRIBED", f"r: children claim {2**64 + 1} > guaranteed {2**64}"),
]  # fmt: skip


@pytest.mark.parametrize("side", ["impl", "ref"])
@pytest.mark.parametrize(
    ("classes", "outcome", "detail"),
    [c[1:] for c in VALIDATION_CASES],
    ids=[c[0] for c in VALIDATION_CASES],
)
def test_validation_hand_worked_cases(request, side, classes, outcome, detail):
    qos = request.getfixturevalue(side)
    result = qos.validate_tree(tree_of(qos, *classes))
    assert type(result) is qos.ValidationResult
    assert result.outcome is qos.ValidationOutcome[outcome]
    assert result.detail == detail and type(result.detail) is str
    assert repr(result) == (
        f"ValidationResult(outcome={qos.ValidationOutcome[outcome]!r}, detail={detail!r})"
    )


def test_children_are_tallied_under_the_parent_they_name(impl, ref):
    """Key "a" holds a class named "e", and class "e" names "a" as its parent: the tally is kept
    under "a" (the name as the child writes it) and checked against the class at key "a"."""
    for qos in (impl, ref):
        tree = qos.ClassTree({"a": qos.TrafficClass("e", 1), "e": qos.TrafficClass("e", 10, "a")})
        result = qos.validate_tree(tree)
        assert result.outcome is qos.ValidationOutcome.OVER_SUBSCRIBED
        assert result.detail == "a: children claim 10 > guaranteed 1"


def test_detail_uses_the_class_name_not_the_key(impl, ref):
    for qos in (impl, ref):
        tree = qos.ClassTree({"k": qos.TrafficClass("video", 1, "ghost")})
        assert qos.validate_tree(tree).detail == "video -> ghost"


@pytest.mark.parametrize(
    ("classes", "exc"),
    [
        ([("r", Decimal(10)), ("x", Decimal(1), "r"), ("y", 1.5, "r")], TypeError),
        ([("r", 10), ("x", Fraction(1, 2), "r"), ("y", Decimal(1), "r")], TypeError),
        ([("r", 10), ("x", "5", "r")], TypeError),
        ([("r", Decimal("NaN")), ("x", Decimal(1), "r")], Exception),  # InvalidOperation
        ([("r", 10), ("x", BOOM, "r")], BoomError),
        ([("r", BOOM), ("x", 1, "r")], BoomError),
        ([("r", BOOM), ("x", 1)], None),  # no children: the rate is never touched
    ],
)
def test_validation_exceptions_like_the_reference(impl, ref, classes, exc):
    expected = run(ref.validate_tree, tree_of(ref, *classes))
    got = run(impl.validate_tree, tree_of(impl, *classes))
    assert_same_exception(expected, got)
    if exc is None:
        assert not expected.raised and got.value.outcome is impl.ValidationOutcome.VALID
    else:
        assert isinstance(expected.exc, exc)


def test_a_name_that_is_not_a_key_fails_the_cycle_walk_like_the_reference(impl, ref):
    """The cycle pass walks from ``cls.name``: a class filed under another key is looked up by
    its name and raises KeyError, as the course's ``classes[name]`` does."""
    for qos in (ref, impl):
        tree = qos.ClassTree({"k": qos.TrafficClass("video", 1)})
        with pytest.raises(KeyError) as info:
            qos.validate_tree(tree)
        assert info.value.args == ("video",)


ODD_NAMES = ["vidéo", "视频", "\ud800x", "a\udc80", "\ud83d\ude00", ""]


@pytest.mark.parametrize(
    "classes",
    [
        [(ODD_NAMES[0], 10), (ODD_NAMES[2], 6, ODD_NAMES[0]), (ODD_NAMES[3], 6, ODD_NAMES[0])],
        [(ODD_NAMES[2], 1, ODD_NAMES[3]), (ODD_NAMES[3], 1, ODD_NAMES[2])],
        [(ODD_NAMES[5], 5), (ODD_NAMES[4], 1, ODD_NAMES[5]), (ODD_NAMES[1], 1, "\udfff")],
        [(name, 1, ODD_NAMES[i - 1] if i else None) for i, name in enumerate(ODD_NAMES)],
    ],
    ids=["over-subscribed", "cycle", "unknown parent", "valid chain"],
)
def test_names_with_lone_surrogates_and_non_ascii_text(impl, ref, classes):
    """Names are compared and printed exactly as Python's strs, lone surrogates included."""
    entries = [(c[0], c[0], c[1], c[2] if len(c) > 2 else None) for c in classes]
    check_validate(impl, ref, entries)
    if run(ref.validate_tree, build(ref, entries, [])).value.outcome.value == "Valid":
        for name in ODD_NAMES:
            check_borrowable(impl, ref, entries, name)


def test_summing_order_and_operations(impl, ref):
    """Children's rates are summed from the int 0 in dict order, then compared with ``>``."""
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        tree = tree_of(
            qos,
            ("x", Traced(4, "x", log), "r"),
            ("r", Traced(10, "r", log)),
            ("y", TracedInplace(7, "y", log), "r"),
        )
        result = qos.validate_tree(tree)
        assert result.outcome is qos.ValidationOutcome.OVER_SUBSCRIBED
        assert result.detail == (
            "r: children claim Traced(11, '((0+x)+y)') > guaranteed Traced(10, 'r')"
        )
        logs[side] = log
    assert logs["got"] == logs["ref"]
    assert logs["ref"] == [
        ("radd", "x", "0"),
        ("add", "(0+x)", "y"),
        ("gt", "((0+x)+y)", "r"),
    ]


def test_all_sums_come_before_any_comparison(impl, ref):
    """Pass 3 sums every parent's children first, then compares, parents in the order named."""
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        tree = tree_of(
            qos,
            ("a", Traced(10, "a", log)),
            ("b", Traced(10, "b", log)),
            ("b1", Traced(3, "b1", log), "b"),
            ("a1", Traced(4, "a1", log), "a"),
            ("b2", Traced(4, "b2", log), "b"),
        )
        assert qos.validate_tree(tree).outcome is qos.ValidationOutcome.VALID
        logs[side] = log
    assert logs["got"] == logs["ref"]
    assert logs["ref"] == [
        ("radd", "b1", "0"),
        ("radd", "a1", "0"),
        ("add", "(0+b1)", "b2"),
        ("gt", "((0+b1)+b2)", "b"),
        ("gt", "(0+a1)", "a"),
    ]


def test_validation_reads_the_tree_at_call_time(impl):
    tree = tree_of(impl, *VALID_TREE)
    assert impl.validate_tree(tree).outcome is impl.ValidationOutcome.VALID
    tree.classes["extra"] = impl.TrafficClass("extra", 20, "default")
    assert impl.validate_tree(tree).detail == "default: children claim 110 > guaranteed 100"
    tree.classes = {"video": impl.TrafficClass("video", 1, "ghost")}
    assert impl.validate_tree(tree).detail == "video -> ghost"


# --------------------------------------------------------------------------------------------
# borrowable, worked by hand
# --------------------------------------------------------------------------------------------

BORROW_TREE = [
    ("root", 100),
    ("video", 60, "root"),
    ("voice", 30, "root"),
    ("hd", 25, "video"),
    ("sd", 20, "video"),
]

# (what, classes, class name, expected value or exception type)
BORROW_CASES = [
    ("a leaf: its own rate, plus what each ancestor leaves free", BORROW_TREE, "hd", 25 + 15 + 10),
    ("a leaf directly under the root", BORROW_TREE, "voice", 30 + 10),
    ("the root", BORROW_TREE, "root", 10),
    ("a middle class", BORROW_TREE, "video", 15 + 10),
    ("over-subscribed ancestors add the int 0",
     [("r", 10), ("x", 8, "r"), ("y", 8, "r")], "x", 8),
    ("a float rate makes a float total", [("r", 10), ("x", 2.5, "r")], "x", 2.5 + 7.5),
    ("a float fully claimed is 0.0, not 0", [("r", 2.0), ("x", 2, "r")], "r", 0.0),
    ("a Fraction total", [("r", 1), ("x", Fraction(1, 3), "r")], "x", Fraction(1)),
    ("a NaN spare stays NaN", [("r", NAN)], "r", NAN),
    ("bools sum to ints", [("r", True)], "r", 1),
    ("a class with nothing spare anywhere", [("r", 0)], "r", 0),
    ("an unknown name", BORROW_TREE, "ghost", KeyError),
    ("an unknown parent on the way up", [("x", 1, "ghost")], "x", KeyError),
    ("Decimal plus float", [("r", Decimal(10)), ("x", 1.5, "r")], "x", TypeError),
    ("a bad rate off the path still fails the sums",
     [("r", 10), ("x", 1, "r"), ("s", 10), ("y", "5", "s")], "x", TypeError),
    ("the sums fail before an unknown name is looked up",
     [("s", 10), ("y", "5", "s")], "ghost", TypeError),
    ("the sums fail before a None name ends the walk", [("s", 10), ("y", "5", "s")], None,
     TypeError),
    ("a None name borrows the int 0", BORROW_TREE, None, 0),
    ("a parent with no class of its name", [("x", 1, "ghost")], "ghost", KeyError),
]  # fmt: skip


@pytest.mark.parametrize("side", ["impl", "ref"])
@pytest.mark.parametrize(
    ("classes", "name", "expected"),
    [c[1:] for c in BORROW_CASES],
    ids=[c[0] for c in BORROW_CASES],
)
def test_borrowable_hand_worked_cases(request, side, classes, name, expected):
    qos = request.getfixturevalue(side)
    tree = tree_of(qos, *classes)
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            qos.borrowable(tree, name)
        assert type(info.value) is expected
        return
    got = qos.borrowable(tree, name)
    assert same_value(got, expected), describe(got)


def test_borrowable_operations(impl, ref):
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        tree = tree_of(qos, ("r", Traced(10, "r", log)), ("x", TracedInplace(4, "x", log), "r"))
        total = qos.borrowable(tree, "x")
        assert total.v == 10 and total.label == "((0+(x-0))+=(r-(0+x)))"
        logs[side] = log
    assert logs["got"] == logs["ref"]
    assert logs["ref"] == [
        ("radd", "x", "0"),  # every parent's claims first, over the whole tree
        ("sub", "x", "0"),  # then the walk: x has no children, so x - 0
        ("lt", "(x-0)", "0"),
        ("radd", "(x-0)", "0"),
        ("sub", "r", "(0+x)"),
        ("lt", "(r-(0+x))", "0"),
        ("iadd", "(0+(x-0))", "(r-(0+x))"),
    ]


# --------------------------------------------------------------------------------------------
# How they can be called
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"), [("validate_tree", ("tree",)), ("borrowable", ("tree", "class_name"))]
)
def test_signature(impl, name, params):
    fn = getattr(impl, name)
    assert fn.__name__ == name
    got = inspect.signature(fn).parameters
    assert list(got) == list(params)
    for p in got.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        assert p.default is inspect.Parameter.empty, p


def test_keyword_calls(impl):
    tree = tree_of(impl, *BORROW_TREE)
    assert impl.validate_tree(tree=tree).outcome is impl.ValidationOutcome.VALID
    assert impl.borrowable(tree=tree, class_name="hd") == 50
    assert impl.borrowable(class_name="hd", tree=tree) == 50
    assert impl.borrowable(tree, class_name="voice") == 40


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("validate_tree", (), {}),
        ("validate_tree", ("T", 1), {}),
        ("validate_tree", (), {"classes": {}}),
        ("borrowable", ("T",), {}),
        ("borrowable", ("T", "root", 1), {}),
        ("borrowable", ("T", "root"), {"tree": 1}),
    ],
)
def test_bad_calls_raise_type_error_like_the_reference(impl, ref, name, args, kwargs):
    def args_for(qos):
        return tuple(tree_of(qos, *BORROW_TREE) if a == "T" else a for a in args)

    expected = run(lambda: getattr(ref, name)(*args_for(ref), **kwargs))
    got = run(lambda: getattr(impl, name)(*args_for(impl), **kwargs))
    assert type(expected.exc) is TypeError
    assert_same_exception(expected, got)


# --------------------------------------------------------------------------------------------
# Names that are not keys
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [1, b"a", ("root",), 1.5, True, []], ids=repr)
def test_borrowable_of_a_name_that_is_not_a_str_key(impl, ref, name):
    """Not a key of a str-keyed tree: KeyError with that key (TypeError if unhashable), as in the
    course."""
    expected = run(ref.borrowable, tree_of(ref, *BORROW_TREE), name)
    got = run(impl.borrowable, tree_of(impl, *BORROW_TREE), name)
    assert expected.raised
    assert_same_exception(expected, got)
    assert got.exc.args == expected.exc.args or not isinstance(expected.exc, KeyError)
