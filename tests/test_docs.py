"""Every Python code block in the README and in ``docs/`` runs as shown.

Each ```python block is run on its own, in a fresh namespace, as a reader would paste it into a
file: blocks that assert their results (the rate-and-burst table, the 429 example, the meter)
check what the pages claim. A block that needs a Redis server reads its address from
``REDIS_URL``; here it gets the session's own ``redis-server`` (see ``conftest.py``), emptied
before the block runs, and is skipped, or under ``QOS_REQUIRE_REDIS=1`` failed, where there is
none. A block that is not meant to run is marked as another language (```text, ```sh): every
fence names its language, so none is left out silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from qos_support import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
# Names a Markdown renderer reads as Python, of which only "python" is run: the others would be
# Python that no test runs.
PYTHON_ALIASES = {"py", "py3", "python3", "pycon", "pyi"}


def page_name(page: Path) -> str:
    return page.relative_to(REPO_ROOT).as_posix()


def fences(page: Path) -> list[tuple[str, str, int]]:
    """Each fenced block of ``page``: its language, its source, and the line it starts on."""
    text = page.read_text(encoding="utf-8")
    return [
        (match[1].strip(), match[2], text.count("\n", 0, match.start()) + 1)
        for match in FENCE.finditer(text)
    ]


BLOCKS = [
    pytest.param(page, source, line, id=f"{page_name(page)}:{line}")
    for page in PAGES
    for language, source, line in fences(page)
    if language == "python"
]


def test_the_pages_have_python_blocks() -> None:
    readme = [block for block in BLOCKS if block.values[0].name == "README.md"]
    assert len(readme) >= 5
    assert len(BLOCKS) >= 20


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_every_fence_names_its_language(page: Path) -> None:
    unnamed = [line for language, _, line in fences(page) if not language]
    assert not unnamed, f"{page_name(page)}: fences with no language at lines {unnamed}"
    aliases = [(line, lang) for lang, _, line in fences(page) if lang.lower() in PYTHON_ALIASES]
    assert not aliases, f"{page_name(page)}: write ```python (run) or ```text, not {aliases}"


def slug(heading: str) -> str:
    """A heading's anchor, as mkdocs (and, for these headings, GitHub) makes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_links_to_what_is_there() -> None:
    """Every link of the README to a file of the repository, and to a heading in it, resolves.
    (mkdocs build --strict checks the links between the pages of docs/.)"""
    readme = REPO_ROOT / "README.md"
    text = FENCE.sub("", readme.read_text(encoding="utf-8"))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        page = (readme.parent / path).resolve() if path else readme
        if not page.exists() or (anchor and anchor not in anchors(page)):
            broken.append(target)
    assert not broken, f"README.md links to what is not there: {broken}"


@pytest.mark.parametrize(("page", "source", "line"), BLOCKS)
def test_a_python_block_runs(
    page: Path,
    source: str,
    line: int,
    reference_mode: bool,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if reference_mode:
        pytest.skip("the pages' examples use the native limiters")
    if "REDIS_URL" in source:
        server = request.getfixturevalue("redis_server")
        client = server.client()
        client.flushall()
        client.close()
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}/0")
    name = f"{page_name(page)}, python block at line {line}"
    # Padded with blank lines so that a traceback's line numbers are the page's own.
    code = compile("\n" * line + source, name, "exec")
    exec(code, {"__name__": f"docs_block_{line}"})
