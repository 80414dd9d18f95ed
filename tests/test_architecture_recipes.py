"""``docs/architecture.md`` stays true to the tree.

Its recipes ("How to add a band option", "... a limiter option", "... a web option", "... a
meter", "... a store") list the files a change of that kind touches. A file renamed or split
leaves a recipe pointing at nothing, and the next reader follows it into a wall: each path a
recipe names must be there. The same holds for the map of the house (``## How the code is laid
out``): a room it names must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from qos_support import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "architecture.md"
RECIPES = ("a band option", "a limiter option", "a web option", "a meter", "a store")
# A path in backquotes: at least one folder and a file name with a known ending, or a folder
# ending with "/". Placeholders (``<name>``) and globs are not paths.
PATH = re.compile(r"`((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|pyi|rs|lua|toml|md|json|yml))?)`")
LINK = re.compile(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)")


def sections() -> dict[str, str]:
    """The page's ``##`` sections, by title."""
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def where(path: str) -> Path:
    """A path as the page writes it: from the repository's root, or, where that is not how it
    starts, from ``python/protocol_in_code/qos/`` (the page names the web modules as
    ``_http/rules.py``)."""
    for base in (REPO_ROOT, REPO_ROOT / "python" / "protocol_in_code" / "qos"):
        if (base / path).exists():
            return base / path
    return REPO_ROOT / path


def test_every_recipe_is_on_the_page() -> None:
    titles = set(sections())
    missing = [recipe for recipe in RECIPES if f"How to add {recipe}" not in titles]
    assert not missing, f"architecture.md has no recipe for {missing}"


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_names_files_that_are_there(recipe: str) -> None:
    body = sections()[f"How to add {recipe}"]
    paths = PATH.findall(body)
    assert len(paths) >= 3, f"the recipe for {recipe} lists {paths}: too few to follow"
    gone = [path for path in paths if not where(path).exists()]
    pages = [page for page in LINK.findall(body) if not (PAGE.parent / page).exists()]
    assert not gone + pages, f"the recipe for {recipe} names what is not there: {gone + pages}"


def map_paths() -> list[str]:
    """Every file and folder the map of the house (``## How the code is laid out``) draws, as
    a path from the repository's root. The map is a tree in a text block: each line names a file
    or folder (or several: ``a.rs, b.rs``), indented under its folder."""
    body = sections()["How the code is laid out"]
    block = re.search(r"```text\n(.*?)```", body, re.S)
    assert block, "the map of the house is a ```text block"
    stack: list[tuple[int, str]] = []
    paths = []
    for line in block[1].splitlines():
        names = first_names(line.strip())
        if not names:
            continue  # a description carried over from the line above
        depth = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = "".join(folder for _, folder in stack)
        folder = names[0].rpartition("/")[0]
        paths += [parent + (n if "/" in n or not folder else f"{folder}/{n}") for n in names]
        # What is drawn under an entry lives in it: in the folder, or in the folder a Rust
        # module of that name keeps its submodules in (``surface.rs`` and ``surface/``).
        stack.append((depth, names[0].removesuffix(".rs").rstrip("/") + "/"))
    return paths


def test_the_map_names_rooms_that_are_there() -> None:
    gone = [path for path in map_paths() if not (REPO_ROOT / path.rstrip("/")).exists()]
    assert not gone, f"the map names what is not there: {gone}"


def test_every_product_file_is_on_the_map() -> None:
    """A module added without its line on the map is a room nobody is told of."""
    drawn = set(map_paths())
    product = [
        *(REPO_ROOT / "src").rglob("*.rs"),
        *(REPO_ROOT / "python" / "protocol_in_code").rglob("*.py"),
        *(REPO_ROOT / "python" / "protocol_in_code").rglob("*.lua"),
    ]
    missing = sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for path in product
        if path.name not in ("tests.rs", "__init__.py") and "tests" not in path.parent.parts
    )
    # A folder on the map stands for its mod.rs.
    missing = [
        path
        for path in missing
        if path not in drawn and not (path.endswith("/mod.rs") and path[: -len("mod.rs")] in drawn)
    ]
    assert not missing, f"architecture.md's map leaves out {missing}"


def first_names(text: str) -> list[str]:
    """The files or folders a line of the map starts with (``a.rs, b.rs, c.rs   what...``),
    or none for a line of description (whose first word is not a file or folder name)."""
    names = []
    for word in text.split(" "):
        name = word.removesuffix(",")
        if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*(\.\w+|/)", name):
            break
        names.append(name)
        if not word.endswith(","):
            break
    return names
