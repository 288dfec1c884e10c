"""OpCounter: counts the aten operators a piece of code dispatches, a machine-independent proxy for its work.

Time is noisy on shared CI runners; the number of aten ops a training epoch dispatches is not. It changes only
when the code does (an extra `.clone()`, a per-env loop that used to be batched, a lost fusion), so it can be
gated exactly next to the noisy timings. Ops are seen below autograd by a `TorchDispatchMode`, once per call the
code makes (ops a kernel calls internally are not seen), so the count does not depend on the CPU's ISA or on
thread counts. It does depend on the torch version and the device type: keep baselines keyed by both.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpCounter(TorchDispatchMode):
    """`with OpCounter() as ops: work()`, then `ops.total` and `ops.by_op` ("aten.add_.Tensor" -> count)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.by_op[str(func)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        """Number of aten ops dispatched while active."""
        return sum(self.by_op.values())
