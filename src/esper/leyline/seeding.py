"""Deterministic seed derivation: every random stream of a run is a pure function of the run seed."""

from __future__ import annotations

import hashlib

_MASK = (1 << 63) - 1


def derive_seed(run_seed: int, *path: object) -> int:
    """A 63-bit seed for the stream named by `path` (e.g. ("env", round, env_id)) under `run_seed`."""
    text = "/".join([str(run_seed), *(str(p) for p in path)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & _MASK
