"""The Rust rooms depend on each other one way: no two sibling modules name each other.

A module (a file under ``src/``, or a folder with its ``mod.rs`` or ``name.rs``) depends on
another when its code, outside comments and its tests, names a path into it (``crate::...``,
``super::...``). Dependencies are compared between siblings, the two modules just below the
nearest parent they share: ``core::exact::home`` naming ``core::exact::keyed::mod``'s types is
an edge ``home -> keyed``, whatever file inside each names what. A parent naming its child, or
a child its parent, is how a module is built, and not counted.

A circle among siblings means neither can be read, tested or replaced without the other; the
fix is to move what both need into a module of its own (as ``core::exact::answers`` holds the
answers both the keyed tables and their one decision give), or to hand a hook down instead of
naming the room above (as ``fork::register`` is given what runs in a forked child).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
#: A path into the crate: ``crate::a::b``, ``super::a``, ``super::super::a``, or a braced list.
PATH = re.compile(r"\b(crate|super(?:::super)*)::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_:]*)")

Module = tuple[str, ...]


def module_of(path: Path) -> Module:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def code(text: str) -> Iterator[str]:
    """The file's lines up to its tests, without comments."""
    for line in text.splitlines():
        if line.strip().startswith("#[cfg(test)]"):
            return
        yield line.split("//")[0]


def named(module: Module, text: str) -> set[Module]:
    """Every path the module's code names, made absolute."""
    found = set()
    for line in code(text):
        for head, rest in PATH.findall(line):
            base = () if head == "crate" else module[: len(module) - head.count("super")]
            names = rest[1:-1].split(",") if rest.startswith("{") else [rest]
            for name in names:
                found.add(base + tuple(p for p in name.strip().split("::") if p and p != "self"))
    return found


def longest_module(path: Module, modules: Iterable[Module]) -> Module | None:
    """The module a named path leads into: its longest prefix that is a module."""
    known = set(modules)
    return next((path[:i] for i in range(len(path), 0, -1) if path[:i] in known), None)


def sibling_edges() -> dict[Module, set[Module]]:
    files = {
        module_of(path): path
        for path in SRC.rglob("*.rs")
        if "tests" not in path.parts and path.name != "tests.rs"
    }
    edges: dict[Module, set[Module]] = {}
    for module, path in files.items():
        for target in named(module, path.read_text()):
            into = longest_module(target, files.keys())
            if into is None:
                continue
            shared = 0
            while shared < min(len(module), len(into)) and module[shared] == into[shared]:
                shared += 1
            if shared in (len(module), len(into)):  # the same module, a parent or a child
                continue
            edges.setdefault(module[: shared + 1], set()).add(into[: shared + 1])
    return edges


def circles(edges: dict[Module, set[Module]]) -> list[list[Module]]:
    """The groups of modules that reach each other (Tarjan's strongly connected components)."""
    index: dict[Module, int] = {}
    low: dict[Module, int] = {}
    stack: list[Module] = []
    found: list[list[Module]] = []

    def visit(node: Module) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for next_node in edges.get(node, ()):
            if next_node not in index:
                visit(next_node)
                low[node] = min(low[node], low[next_node])
            elif next_node in stack:
                low[node] = min(low[node], index[next_node])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def test_the_checker_sees_the_rooms_and_their_edges() -> None:
    edges = sibling_edges()
    assert ("core", "exact", "answers") in edges[("core", "exact", "home")]
    assert ("core", "exact", "home") in edges[("core", "exact", "keyed")]
    assert ("core",) in edges[("python",)]  # the glue stands on the core
    assert ("python",) not in edges.get(("core",), set())  # and never the other way


def test_no_two_sibling_modules_name_each_other() -> None:
    edges = sibling_edges()
    found = [
        " <-> ".join("::".join(module) for module in group)
        + ": "
        + "; ".join(
            f"{'::'.join(a)} -> {'::'.join(b)}" for a in group for b in edges[a] if b in group
        )
        for group in circles(edges)
    ]
    assert not found, "modules that depend on each other:\n" + "\n".join(found)
