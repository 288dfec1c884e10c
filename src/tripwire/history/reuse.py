"""A commit's result reused for another commit whose tree answers everything the run read the same way.

Each commit a walk runs leaves `closure.json` beside its result (`tripwire.common.closure`): the files the run
opened or imported, the folders it listed, the paths it asked `Tree.has` about, the ancestry questions it asked
`Tree.is_ancestor`, and whether it started another process or read its own sha (then it is `open` and never reused).
For another commit the same questions are put to git instead of a checkout: one `git ls-tree -r -t` per commit
gives every file's blob and every folder's names, and each recorded ancestry question is asked again. When every
answer is the same (each file the same blob and mode, or absent in both; each listed folder the same names; each
checked path present in both or in neither; each ancestry the same), the run would have read the same bytes, so it
records the same result, and the walk copies it instead of running the commit. The copy says so: its `source` names
the commit it stands for and, under `reused_from`, the commit that ran.

Why that is sound: a result is a function of what the run reads. Everything else it depends on is either in the
walk's cache key (the scenario file, tripwire's recording code, the CPU pin, Python, torch) or the same for every
commit of the walk (the environment, the machine). Within the tree, the closure holds every read an audit hook sees;
`.gitattributes` files are part of every signature, since they can change the bytes a checkout writes for the same
blob. What it cannot see is named in `tripwire.common.closure`: a bare existence check (`os.stat`) by the tree's own
code of a path it never opens or lists. `--no-reuse` runs every commit.

A walk learns closures as commits finish; a commit is looked up against every distinct closure learned so far (most
commits of a walk share a handful), so a run of unchanged commits after one that ran costs a `git ls-tree` each.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tripwire.common.closure import VERSION
from tripwire.common.git import GitError, git_run, is_ancestor

_LISTINGS_KEPT = 64  # commits whose `git ls-tree` is kept in memory (a walk asks about its neighbours)


@dataclass(frozen=True)
class Listing:
    """One commit's tree as git has it: path -> "mode oid" for every entry, folder -> its entries' names."""

    entries: dict[str, str]
    children: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]  # "path mode oid" of every .gitattributes


def _listing(repo: Path, sha: str) -> Listing:
    done = git_run(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", operands=(sha,))
    if done.returncode:
        raise GitError(f"git ls-tree {sha} failed in {repo}: {done.stderr.decode('utf-8', 'replace').strip()}")
    entries: dict[str, str] = {}
    children: dict[str, list[str]] = {".": []}
    for record in done.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, raw_path = record.partition(b"\t")
        path = raw_path.decode("utf-8", "surrogateescape")
        mode, _, oid = meta.decode().split(" ")
        entries[path] = f"{mode} {oid}"
        parent, _, name = path.rpartition("/")
        children.setdefault(parent or ".", []).append(name)
    attributes = tuple(
        sorted(f"{path} {entries[path]}" for path in entries if path.rpartition("/")[2] == ".gitattributes")
    )
    return Listing(entries, {folder: tuple(sorted(names)) for folder, names in children.items()}, attributes)


def _through_link(listing: Listing, name: str) -> bool:
    """Whether `name`, or a folder on its path, is a symbolic link in this tree: what the run read through it is
    another entry, which git's answer for `name` does not cover."""
    parts = name.split("/")
    return any(listing.entries.get("/".join(parts[:end]), "").startswith("120000 ") for end in range(1, len(parts) + 1))


def _spec(closure: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """`(its digest, the questions)` of a recorded closure, or None when it may not be reused (open, or unreadable)."""
    if closure.get("version") != VERSION or closure.get("open"):
        return None
    try:
        spec = {
            "files": sorted(str(name) for name in closure["files"]),
            "dirs": sorted(str(name) for name in closure["dirs"]),
            "exists": sorted(str(name) for name in closure["exists"]),
            "ancestors": sorted(str(ref) for ref in closure["ancestors"]),
        }
    except (KeyError, TypeError):
        return None
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    return digest, spec


class Reuse:
    """The closures a walk has learned, and which commit's result stands for another commit."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._specs: dict[str, dict[str, Any]] = {}  # closure digest -> its questions
        self._latest = ""  # the digest learned last: what a commit about to run is predicted by
        self._answers: dict[str, dict[str, str]] = {}  # closure digest -> {signature: sha of the commit that ran}
        self._listings: OrderedDict[str, Listing] = OrderedDict()
        self._ancestry: dict[tuple[str, str], bool] = {}
        self._lock = threading.RLock()

    def learn(self, sha: str, closure_file: Path) -> None:
        """Add the closure a commit's run recorded (a missing, open or unreadable one teaches nothing)."""
        try:
            closure = json.loads(closure_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        found = _spec(closure) if isinstance(closure, dict) else None
        if found is None:
            return
        digest, spec = found
        with self._lock:
            self._specs.setdefault(digest, spec)
            self._latest = digest
            signature = self._signature(sha, spec)
            if signature is not None:
                self._answers.setdefault(digest, {}).setdefault(signature, sha)

    @property
    def learned(self) -> bool:
        """Whether any closure has been learned."""
        return bool(self._specs)

    def find(self, sha: str) -> str | None:
        """A commit whose result stands for `sha`'s (it ran, and `sha`'s tree answers its closure the same), or
        None."""
        with self._lock:
            for digest, spec in self._specs.items():
                signature = self._signature(sha, spec)
                source = self._answers.get(digest, {}).get(signature or "")
                if source is not None and source != sha:
                    return source
        return None

    def predict(self, sha: str) -> str | None:
        """`sha`'s signature under the closure learned last: two commits about to run with the same prediction will
        most likely share a result, so the walk runs one and waits to reuse it for the other."""
        with self._lock:
            spec = self._specs.get(self._latest)
            return None if spec is None else self._signature(sha, spec)

    def _signature(self, sha: str, spec: dict[str, Any]) -> str | None:
        try:
            listing = self._listing(sha)
            ancestry = [self._is_ancestor(ref, sha) for ref in spec["ancestors"]]
        except (GitError, OSError, ValueError):
            return None  # git cannot answer for this commit: it runs
        if any(_through_link(listing, name) for key in ("files", "dirs", "exists") for name in spec[key]):
            return None  # read through a symbolic link of the tree: what it reached is not named here
        answers = {
            "files": [listing.entries.get(name, "absent") for name in spec["files"]],
            "dirs": [listing.children.get(name) for name in spec["dirs"]],
            "exists": [name in listing.entries for name in spec["exists"]],
            "ancestors": ancestry,
            "attributes": listing.attributes,
        }
        return hashlib.sha256(json.dumps(answers).encode()).hexdigest()

    def _listing(self, sha: str) -> Listing:
        listing = self._listings.get(sha)
        if listing is None:
            listing = _listing(self.repo, sha)
            self._listings[sha] = listing
            while len(self._listings) > _LISTINGS_KEPT:
                self._listings.popitem(last=False)
        else:
            self._listings.move_to_end(sha)
        return listing

    def _is_ancestor(self, ref: str, sha: str) -> bool:
        key = (ref, sha)
        if key not in self._ancestry:
            # as `Tree.is_ancestor` answers (an unknown ref: False); one shaped like an option raises GitError
            self._ancestry[key] = is_ancestor(self.repo, ref, sha)
        return self._ancestry[key]
