"""A loop's file edited while it is recorded: tripwire reads each file's source once a recording, as the loop runs it.

A user edits the training script while a long run goes on. The report names each sync by its line's text (a budget
keys lines by it, `sites.line_identity`), and a `.to(...)` is classified by how its line spells the target: both were
read from the file on disk, at each site's first sync and again when the report was made, so an edit mid-run
shifted them onto other lines.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from loop_modules import load

from tripwire.sync import hot_path, state
from tripwire.sync.counter import SyncCounter

LOOP = """import torch


def first(t):
    return t.sum().item()


def second(t, device):
    return t.max().item(), torch.tensor([1.0]).to(device)
"""
# two lines at the top, and the upload's line spelled for the host: a misread would name other lines and drop it
EDITED = "# a comment\n# another\n" + LOOP.replace(".to(device)", '.to("cpu")')


def _rewrite(path: Path, text: str) -> None:
    """Write `text` with a later modification time (linecache compares the time and the size)."""
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 5_000_000_000, before + 5_000_000_000))


def test_a_file_edited_mid_recording_is_read_as_the_loop_runs_it(tmp_path: Path) -> None:
    module = load(tmp_path, LOOP)
    x, device = torch.arange(4.0), "cpu"  # a device held in a name: the GPU run's `cuda`
    with SyncCounter() as counter, hot_path("step"):
        module.first(x)
        _rewrite(tmp_path / "loop.py", EDITED)  # the user saves an edit while the loop runs
        module.second(x, device)
    seen = {(record.kind, record.site.rsplit("/", 1)[-1], record.text) for record in counter.site_records("step")}
    assert seen == {
        ("item", "loop.py:5", "return t.sum().item()"),
        ("item", "loop.py:9", "return t.max().item(), torch.tensor([1.0]).to(device)"),
        ("to_device", "loop.py:9", "return t.max().item(), torch.tensor([1.0]).to(device)"),
    }


def test_the_next_recording_reads_the_file_as_it_is_then(tmp_path: Path) -> None:
    module, device = load(tmp_path, LOOP), torch.device("cpu")  # a device held in a name: the GPU run's `cuda`
    with SyncCounter(), hot_path("step"):
        module.first(torch.arange(4.0, device=device))
    _rewrite(tmp_path / "loop.py", EDITED)
    edited = load(tmp_path, EDITED)
    with SyncCounter() as counter, hot_path("step"):
        edited.first(torch.arange(4.0, device=device))
    assert [record.text for record in counter.site_records("step")] == ["return t.sum().item()"]
    assert counter.site_records("step")[0].site.endswith("loop.py:7")
    assert state.site_text(str(tmp_path / "loop.py"), 1) == "# a comment"
