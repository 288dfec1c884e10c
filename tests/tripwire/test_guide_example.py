"""docs/tripwire.md's complete example runs as written and prints what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

GUIDE = Path(__file__).parents[2] / "docs" / "tripwire.md"


def test_the_guides_complete_example_runs_and_prints_its_claimed_counts() -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)
    example = next(block for block in blocks if "def train(" in block)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, str(GUIDE), "exec"), {"__name__": "guide_example"})
    assert printed.getvalue().strip() == "[{'update': 1}, {'update': 1}, {'update': 1}]"
