"""What a line of source says about where data goes: the host spelled by name, read from the AST (no torch).

The copy rule (`tripwire.sync.copies`, on a run) and the static audit (`tripwire.gates.static_audit`, on the source)
both ask whether a `.to(...)` target or a `copy_` receiver names the host; both ask it here, so a CPU run and the
audit agree on what a line means.
"""

from __future__ import annotations

import ast

__all__ = ["HOST_WORDS", "name_of", "names_host"]

HOST_WORDS = ("cpu", "host", "pinned")


def name_of(node: ast.expr) -> str:
    """The last part of a name (`self.cpu_buffer` -> `cpu_buffer`, `device` -> `device`), "" for anything else."""
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def names_host(node: ast.expr) -> bool:
    """Whether an expression spells the host: a CPU device string, `torch.device("cpu"...)`, or a name (its last
    part: `self.cpu_buffer`, `host[i]`) with `cpu`, `host` or `pinned` in it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.split(":")[0] == "cpu"
    if isinstance(node, ast.Call):
        first = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "type"), None)
        return name_of(node.func) == "device" and first is not None and names_host(first)
    if isinstance(node, ast.Subscript):
        return names_host(node.value)
    return any(word in name_of(node).lower() for word in HOST_WORDS)
