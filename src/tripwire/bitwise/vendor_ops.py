"""CPU ops whose bits the portable pin cannot fix: they differ between Intel and AMD CPUs under it.

The pin (`tripwire.common.numerics`) fixes which kernels ATen, oneDNN and MKL run. It cannot fix what one instruction
computes: `rcpps` and `rsqrtps` are approximations whose results differ between CPU vendors. On CPU, torch computes a
few elementwise functions of float tensors with MKL's vector math (VML, high-accuracy mode, `ATen/cpu/vml.h`), and
for these VML starts from those approximations and refines them: the result is within an ulp but not correctly
rounded, and which way it rounds depends on the CPU. Measured here (docs/portability.md): `torch.sqrt` of 4M float32
values on an AMD EPYC differs from the correctly rounded root in 15.5 % of them; one `/ torch.sqrt` in the trainer's
observation normalizer made a golden recorded on an Intel Xeon fail on that AMD EPYC, and gave a third answer under
qemu. `VENDOR_BOUND` lists the ops whose VML kernels contain those instructions in torch 2.14.1's MKL 2024.2 (its
`libtorch_cpu.so` disassembled: `mkl_vml_kernel_*` functions with `rcpps`/`rsqrtps`), on every ISA branch MKL has.

`VendorBoundOps` is a dispatch mode that notes each such op a run calls on a CPU tensor, with the caller's line, so a
gate can refuse a golden that cannot travel and name the line. The portable spellings: `torch.rsqrt(x)` (ATen's IEEE
square root and divide) in place of `1 / torch.sqrt(x)`, or a correctly rounded root computed in float64 by another
route. Ops the mode cannot see are those called from inside another kernel (`pow(x, 0.5)` is listed itself for that
reason: it computes its root through VML).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

_FLOATS = (torch.float32, torch.float64)

# op name (without a trailing `_` of the in-place form, or `_foreach_`) -> the dtypes whose CPU kernel is vendor-bound.
VENDOR_BOUND: dict[str, tuple[torch.dtype, ...]] = {
    "sqrt": _FLOATS,
    "tan": _FLOATS,
    "atan": _FLOATS,
    "asin": _FLOATS,
    "acos": _FLOATS,
    "log10": _FLOATS,
    "log2": _FLOATS,
    "log": (torch.float64,),  # the float32 kernel has them only on AVX-512 branches, which the pin excludes
}
_ROOT_EXPONENT = 0.5  # pow(x, 0.5) computes sqrt(x) through VML
_WATCHED = frozenset((*VENDOR_BOUND, "pow"))  # the names worth a closer look, checked once per dispatched op

_OWN = str(Path(__file__).resolve().parents[1])  # tripwire's own frames are not the caller
_TORCH = str(Path(torch.__file__).resolve().parent)


def vendor_bound(op_name: str, dtype: torch.dtype, exponent: object = None) -> bool:
    """Whether op `op_name` (an aten overload packet's name) on a CPU tensor of `dtype` has vendor-bound bits."""
    name = _base_name(op_name)
    if name == "pow":
        return dtype in _FLOATS and exponent == _ROOT_EXPONENT
    return dtype in VENDOR_BOUND.get(name, ())


def _base_name(op_name: str) -> str:
    """`sqrt` for `sqrt`, `sqrt_` and `_foreach_sqrt(_)`: the table's key."""
    return op_name.removeprefix("_foreach_").rstrip("_")


class VendorBoundOps(TorchDispatchMode):
    """`with VendorBoundOps() as seen:` notes every vendor-bound op on a CPU tensor the block calls (`VENDOR_BOUND`).

    `seen.calls` counts `(op, dtype, caller)`: the caller is the innermost line outside torch and tripwire. The
    mode changes nothing the ops compute; it costs every op a trip through Python, so it is for a gate's own run,
    not a benchmark.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's __init__ is untyped
        self.calls: Counter[tuple[str, str, str]] = Counter()
        self.root = None if root is None else Path(root).resolve()  # callers are shown relative to it (else the cwd)

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if _base_name(name) in _WATCHED:
            self._note(func, name, args)
        return func(*args, **kwargs)

    def _note(self, func: Any, name: str, args: tuple[Any, ...]) -> None:
        tensors = [leaf for leaf in tree_leaves(args[:1]) if isinstance(leaf, torch.Tensor)]
        if not tensors or tensors[0].device.type != "cpu":
            return
        exponent = args[1] if len(args) > 1 and not isinstance(args[1], torch.Tensor) else None
        dtype = tensors[0].dtype
        if not (dtype.is_floating_point or dtype.is_complex):  # an integer input is computed in the default dtype
            dtype = torch.get_default_dtype()
        if vendor_bound(name, dtype, exponent):
            self.calls[(str(func), str(dtype).removeprefix("torch."), _caller(self.root or Path.cwd()))] += 1

    def lines(self) -> list[str]:
        """One line per (op, dtype, caller), most called first: `aten.sqrt.default float32 at FILE:LINE (N calls)`."""
        return [
            f"{op} {dtype} at {caller} ({count} call{'s' * (count != 1)})"
            for (op, dtype, caller), count in self.calls.most_common()
        ]


def _caller(root: Path) -> str:
    """The innermost frame outside torch and tripwire, as `path:line` (relative to `root` if inside it)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((_OWN, _TORCH)) and not filename.startswith("<"):
            path = Path(filename)
            try:
                shown = str(path.resolve().relative_to(root))
            except ValueError:
                shown = filename
            return f"{shown}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"
