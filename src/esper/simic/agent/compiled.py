"""The policy network compiled with torch.compile, as the original compiles it: after its weights are in place.

`compile_network(policy, backend, mode)` returns what the PPO agent calls for every forward pass: the policy itself
(`--compile off`), or `torch.compile(policy, backend=..., mode=..., dynamic=True)`, an `OptimizedModule` that
shares the policy's parameters (`dynamic=True`: the env count and the sequence length vary without recompiling,
as in the original's `policy.compile(mode, dynamic=True)`). Parameters, the optimizer and every state dict stay
on the plain module, so a checkpoint holds the same keys whatever the setting (no `_orig_mod.` prefix) and a run
resumes under another setting. What is compiled is `FactoredRecurrentActorCritic.forward`; sampling, masking and
scoring stay eager, and so does the host network's loss-and-correct: the original keeps that one eager too
(`_compiled_loss_and_correct = loss_and_correct`, after inductor device-side asserts in long runs).
"""

from __future__ import annotations

import torch

from esper.leyline.options import CompileBackend, CompileMode
from esper.tamiyo.policy import FactoredRecurrentActorCritic, Network

__all__ = ["compile_network"]


def compile_network(policy: FactoredRecurrentActorCritic, backend: CompileBackend, mode: CompileMode) -> Network:
    """The network the agent calls: `policy` itself, or compiled on `backend` (inductor in `mode`)."""
    if backend is CompileBackend.OFF:
        return policy
    inductor_mode = str(mode) if backend is CompileBackend.INDUCTOR else None
    compiled: Network = torch.compile(policy, backend=str(backend), mode=inductor_mode, dynamic=True)
    return compiled
