"""The train step's `zero_grad` and SGD step without torch.optim's per-call Python: torch's arithmetic, its bits.

Around its arithmetic, `torch.optim.SGD.step` runs a profiler label, its hooks, a grad-mode switch and a rebuild of
its lists of parameters, gradients and momentum buffers (`_init_group`); `zero_grad` runs a profiler label and a loop.
On the host-bound workload that Python was about 6 % of a train pass
(docs/measurements.md#why-the-code-is-as-it-is). `sgd_step` calls torch's functional `torch.optim.sgd.sgd` with each
group's own settings and writes new momentum buffers into the optimizer's state, which is what `SGD.step` does, and
`zero_grads` sets every gradient to None, which is what `zero_grad(set_to_none=True)` does.

Both go through the optimizer's own methods whenever the wrapper could matter: an optimizer other than a plain
`torch.optim.SGD`, a step that is not torch's (patched on the class, e.g. by a tripwire region, or on the instance),
a step hook (the optimizer's or global), a profiler recording (so its trace keeps the labels), a differentiable or
fused group, or a sparse gradient.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.autograd import profiler as autograd_profiler
from torch.optim import SGD, Optimizer
from torch.optim import optimizer as torch_optimizer
from torch.optim.sgd import sgd

_TORCH_FILES = ("torch/optim/optimizer.py", "torch/optim/sgd.py")


def zero_grads(optimizer: Optimizer) -> None:
    """`optimizer.zero_grad(set_to_none=True)`."""
    if autograd_profiler._is_profiler_enabled:
        optimizer.zero_grad(set_to_none=True)
        return
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


def sgd_step(optimizer: Optimizer) -> None:
    """`optimizer.step()`, with torch's arithmetic called directly when nothing around it could matter."""
    if not _direct(optimizer):
        optimizer.step()
        return
    groups = []
    for group in optimizer.param_groups:
        params = [param for param in group["params"] if param.grad is not None]
        grads = [param.grad for param in params]
        if any(grad.is_sparse for grad in grads):
            optimizer.step()  # torch's own step for every group: none has moved yet
            return
        groups.append((group, params, grads))
    state = optimizer.state
    with torch.no_grad():
        for group, params, grads in groups:
            momentum = group["momentum"]
            buffers: list[torch.Tensor | None] = (
                [state[param].get("momentum_buffer") for param in params] if momentum != 0 else []
            )
            new_buffers = any(buffer is None for buffer in buffers)
            sgd(
                params,
                grads,
                buffers,
                weight_decay=group["weight_decay"],
                momentum=momentum,
                lr=group["lr"],
                dampening=group["dampening"],
                nesterov=group["nesterov"],
                maximize=group["maximize"],
                has_sparse_grad=False,
                foreach=group["foreach"],
                fused=group["fused"],
                grad_scale=None,
                found_inf=None,
            )
            if new_buffers:  # the first step: torch's sgd made the buffers in the list
                for param, buffer in zip(params, buffers):
                    state[param]["momentum_buffer"] = buffer


def _direct(optimizer: Optimizer) -> bool:
    """Whether `sgd_step` may call the arithmetic itself (see the module's docstring)."""
    if type(optimizer) is not SGD or "step" in vars(optimizer) or autograd_profiler._is_profiler_enabled:
        return False
    if _hooks(optimizer) or any(getattr(optimizer, name, None) is not None for name in ("grad_scale", "found_inf")):
        return False
    if any(group.get("differentiable") or group.get("fused") for group in optimizer.param_groups):
        return False
    return _is_torchs(SGD.step)


def _hooks(optimizer: Optimizer) -> bool:
    """Whether any step hook could run (unknown attributes, as a newer torch might have, count as hooks)."""
    hook_tables: list[Any] = [
        getattr(torch_optimizer, "_global_optimizer_pre_hooks", None),
        getattr(torch_optimizer, "_global_optimizer_post_hooks", None),
        getattr(optimizer, "_optimizer_step_pre_hooks", None),
        getattr(optimizer, "_optimizer_step_post_hooks", None),
    ]
    return any(table is None or len(table) > 0 for table in hook_tables)


@functools.cache  # per `SGD.step` as found: torch's own, or a patch put over it
def _is_torchs(step: object) -> bool:
    """Whether `step` is torch's `SGD.step` in torch's own wrappers (its profiler hook and grad-mode switch, in
    torch/optim/optimizer.py) and in nothing else's: every layer down to the step in torch/optim/sgd.py is torch's."""
    for _ in range(4):
        code = getattr(step, "__code__", None)
        filename = "" if code is None else code.co_filename.replace("\\", "/")
        if filename.endswith(_TORCH_FILES[1]):
            return True
        if not filename.endswith(_TORCH_FILES[0]):
            return False
        step = getattr(step, "__wrapped__", None)
    return False
