"""Folders as file name prefixes, for telling whose a frame is (torch's, tripwire's, the standard library's).

Imports nothing but `os`: the sync counter's state loads it first thing, before a loop's folder is taken off
`sys.path`, so nothing it imports may be one a loop's file could shadow (`tempfile` imports `random`).
"""

from __future__ import annotations

import os

__all__ = ["folder_prefixes"]


def folder_prefixes(*folders: str) -> tuple[str, ...]:
    """Each folder as a file name prefix (with its separator, so `.../torch/` does not take in `.../torchvision/`),
    both as given and with its links resolved: a frame's file name is the path it was imported from, which is a
    link's where a library's folder (or one above it) is linked in, and its target's where the folder was resolved."""
    found = {os.path.join(form(folder), "") for folder in folders for form in (os.path.abspath, os.path.realpath)}
    return tuple(sorted(found))
