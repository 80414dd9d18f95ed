"""The house's measures: how large each room is, and how often each operation is written.

    python bench/house.py

Product lines only: a Rust file's lines before its ``#[cfg(test)] mod tests`` (a ``tests.rs``
counts nothing), every line of a Python or Lua file under ``python/``. What it prints:

* each room's product lines, and the glue's size against the core's (the glue should stay a
  thin adapter: at most 0.7 times the core);
* the product files over 600 lines (none should be);
* where each limiter operation is defined: the glue, the Redis package, the stubs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QOS = ROOT / "python" / "protocol_in_code" / "qos"
ROOMS = {
    "core (src/core)": ROOT / "src" / "core",
    "glue (src/python)": ROOT / "src" / "python",
    "Redis (qos/distributed)": QOS / "distributed",
    "web (qos/_http)": QOS / "_http",
}
OPERATIONS = ("try_acquire", "check", "peek", "refund", "acquire", "acquire_async")
LIMIT = 600


def product_lines(path: Path) -> int:
    """A file's lines that are product, not test."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix != ".rs":
        return len(lines)
    if path.name == "tests.rs" or "tests" in path.parent.parts:
        return 0
    # The test module closes a file; a test-only helper inside the product code stays counted.
    tests = (
        i
        for i, line in enumerate(lines)
        if line.startswith("#[cfg(test)]")
        and lines[i + 1 : i + 2] in (["mod tests;"], ["mod tests {"])
    )
    return next(tests, len(lines))


def sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".rs", ".py", ".lua"))


def definitions(folder: Path, name: str) -> int:
    """How many times ``name`` is defined (a Rust ``fn``, a Python ``def``) under ``folder``."""
    pattern = re.compile(rf"^\s*(?:pub(?:\([\w:]+\))? )?(?:async )?(?:fn|def) {name}\b", re.M)
    return sum(len(pattern.findall(p.read_text(encoding="utf-8"))) for p in sources(folder))


def main() -> None:
    sizes = {room: sum(product_lines(p) for p in sources(folder)) for room, folder in ROOMS.items()}
    for room, lines in sizes.items():
        print(f"{room:26} {lines:6} lines")
    ratio = sizes["glue (src/python)"] / sizes["core (src/core)"]
    print(f"{'glue / core':26} {ratio:6.2f}")
    big = [
        (product_lines(p), p.relative_to(ROOT).as_posix())
        for p in sources(ROOT / "src") + sources(ROOT / "python")
        if product_lines(p) > LIMIT
    ]
    print(f"product files over {LIMIT} lines: {sorted(big, reverse=True) or 'none'}")
    stubs = ROOT / "python" / "protocol_in_code"
    print(f"{'defined in':14} {'glue':>5} {'Redis':>6} {'stubs':>6}")
    for name in OPERATIONS:
        stub_text = "".join(p.read_text(encoding="utf-8") for p in stubs.rglob("*.pyi"))
        in_stubs = len(re.findall(rf"^\s*(?:async )?def {name}\b", stub_text, re.M))
        print(
            f"{name:14} {definitions(ROOT / 'src' / 'python', name):5} "
            f"{definitions(QOS / 'distributed', name):6} {in_stubs:6}"
        )


if __name__ == "__main__":
    main()
