"""`tripwire.gates.loads_seen`: what each module loads, seen by importing it, kept however its docstring is worded.

A tiny project in a temporary `src/`: two stand-in "heavy" packages (`bulky`, costly like torch, and `slim`), and
modules that load neither, one, or both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tripwire.common.errors import GoldenFileError
from tripwire.gates.loads_seen import check_seen, golden_of, golden_text, observe, read_golden, source_modules

PACKAGES = ("bulky", "slim")
FILES = {
    "bulky/__init__.py": "import slim\n",  # as torch loads numpy
    "slim/__init__.py": "",
    "proj/__init__.py": "",
    "proj/light.py": '"""Needs nothing of the tensor library."""\nimport json\n',
    "proj/half.py": "import slim\n",
    "proj/heavy.py": "import bulky\n",
    "proj/lazy.py": "def later():\n    import bulky\n",
    "proj/__main__.py": "raise SystemExit('never imported')\n",
    "proj/broken.py": "import not_installed_anywhere\n",
}


def write(src: Path) -> Path:
    for name, text in FILES.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text, encoding="utf-8")
    return src


def test_each_module_is_seen_to_load_without_what_it_never_asks_for(tmp_path: Path) -> None:
    src = write(tmp_path / "src")
    modules = source_modules(src, ["proj"])
    assert modules == ["proj", "proj.broken", "proj.half", "proj.heavy", "proj.lazy", "proj.light"]  # no __main__
    seen = observe(modules, PACKAGES, src, costly=("bulky",), jobs=2)
    # half asks for slim: slim is allowed and half probed again, so its freedom from bulky is seen; heavy asks for
    # bulky first, which is costly: nothing more is claimed; broken fails to import: nothing is claimed either
    assert seen == {"proj": PACKAGES, "proj.light": PACKAGES, "proj.lazy": PACKAGES, "proj.half": ("bulky",)}
    golden = golden_of(seen, PACKAGES)
    assert read_golden(json.loads(golden_text(golden)), "g") == {m: tuple(sorted(p)) for m, p in seen.items()}


def test_a_module_that_starts_loading_one_fails_at_its_line_and_a_gone_one_is_a_note(tmp_path: Path) -> None:
    src = write(tmp_path / "src")
    golden = read_golden(
        golden_of(observe(source_modules(src, ["proj"]), PACKAGES, src, costly=("bulky",)), PACKAGES), "g"
    )
    assert check_seen(golden, src) == ([], [])
    (src / "proj" / "light.py").write_text('"""Needs nothing of the tensor library."""\nimport json\nimport bulky\n')
    (src / "proj" / "lazy.py").unlink()
    failures, notes = check_seen(golden, src, source="loads_seen.json")
    assert failures == [
        "proj.light loads bulky (src/proj/light.py:3: import bulky); it loaded without it when loads_seen.json was"
        " recorded: whatever its docstring says, that was a promise kept; if the change is meant, record the golden"
        " again"
    ]
    assert notes == ["proj.lazy no longer exists (moved or renamed?): record loads_seen.json again to keep its promise"]


@pytest.mark.parametrize("data", [[], {"modules": []}, {"modules": {"a": "torch"}}, {"modules": {"a": [1]}}])
def test_a_malformed_golden_is_one_line(data: object) -> None:
    with pytest.raises(GoldenFileError, match=r"^g: not a loads-seen golden .*record again$"):
        read_golden(data, "g")
