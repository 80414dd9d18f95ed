"""Every Python code block in the README runs as shown.

Each ```python block is run on its own, in a fresh namespace, as a reader would paste it into a
file: blocks that assert their results (the rate-and-burst table, the 429 example, the meter)
check what the README claims.
"""

from __future__ import annotations

import re

import pytest
from qos_support import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_block_runs(index: int, reference_mode: bool) -> None:
    if reference_mode:
        pytest.skip("the README's examples use the native limiters")
    source = BLOCKS[index]
    code = compile(source, f"README.md python block {index + 1}", "exec")
    exec(code, {"__name__": f"readme_block_{index + 1}"})
