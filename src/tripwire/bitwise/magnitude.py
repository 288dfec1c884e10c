"""How big a difference is: max |Δ|, the distance in ULPs, and one stated rule for low-bit drift versus a value change.

Bitwise equality stays the verdict everywhere in tripwire; this module explains a divergence when the values of both
sides are at hand (two results recorded on this machine, `--against`, the history walk).

For each tensor that differs between the two sides, in the first diverging checkpoint:

- `max |Δ|`: the largest absolute elementwise difference.
- `ULPs`: the largest elementwise distance counted in representable floats of the tensor's dtype (units in the last
  place): 1 ULP means two neighbouring floats. Float64 values are counted in float32 ULPs: in the loops tripwire
  gates they are Python floats (metrics, rewards, a learning rate) computed from float32 tensors, so float32 is the
  precision they carry, and a difference below float32's resolution counts as 0. Elements near zero can be many
  ULPs apart after a harmless regrouping of a sum whose terms cancel, so the rule does not use this figure alone.
- `scale ULPs`: max |Δ| divided by the spacing of floats at the tensor's largest magnitude (the ULP of its scale).
  A regrouped sum, a fused multiply-add or another kernel changes a result by a few ULPs of the magnitudes
  involved, so this figure stays small for reassociation and is large for a changed formula or constant.

The rule (`classify`): a divergence is **low-bit drift** when every differing tensor is floating point, no NaN or
infinity appears or vanishes, and each differs by at most `DRIFT_SCALE_ULPS` scale ULPs. It is **low-bit drift,
amplified** when, floats only and nothing non-finite changed, most differing tensors are drift (at most
`AMPLIFIED_SHARE` of them beyond the bound, at least `AMPLIFIED_MIN_TENSORS` differing) and none is beyond
`AMPLIFIED_SCALE_ULPS`: a reassociation spreads a few ULPs through every weight it touches, and a few tensors that
divide by or subtract near-equal values grow it further (the std of near-equal ratios; Adam's first step on a
near-zero gradient, whose update is about `lr * sign(g)`), while a changed formula or constant moves most tensors it
reaches far beyond drift. Anything else (an integer, an action, a RNG state, a larger or more widespread float
difference) is a **value change**. The rule judges the FIRST diverging checkpoint only: later checkpoints inherit
the difference and, in training, amplify it, which `growth` shows. Every figure a report gives belongs to one named
tensor: the worst tensor's own max |Δ|, ULPs and scale ULPs, never maxima taken from different tensors.
Limits: a deliberately tiny change (an epsilon from 1e-8 to 1e-9) can fall under the drift bound; a drift that has
already grown through many unrecorded steps before the first checkpoint can exceed it. Record checkpoints often
enough that the first one sees the difference while it is still small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from tripwire.sync import ignore_syncs

# Drift bound in scale ULPs (see the module docstring), about 3e-5 of a float32 tensor's largest magnitude. Measured
# (docs/tripwire.md, "How big a difference is"): a regrouped GAE sum first diverges by 22 scale ULPs in the shipped
# CleanRL-shaped loop and by 44 in CleanRL's own ppo.py (Adam's second moment, after one step); a 10 % change of
# the value-loss coefficient by 3.1e6. The bound leaves 6x room above the drift and calls any change of more than
# about 0.01 % of a tensor's scale a value change.
DRIFT_SCALE_ULPS = 256.0

# Amplified drift (see the module docstring): measured on esper-lite's 71069ae4 (a single FP32 masked-logit seam):
# 134 of 141 differing tensors within the drift bound (median 2 scale ULPs), the other 7 at most 954, all of them
# near-zero head biases after Adam's first step and the std of near-equal ratios. 16x the drift bound leaves 4x
# room above that; a quarter of the tensors bounds how much of the checkpoint may grow.
AMPLIFIED_SCALE_ULPS = 16 * DRIFT_SCALE_ULPS
AMPLIFIED_SHARE = 0.25
AMPLIFIED_MIN_TENSORS = 4

DRIFT = "low-bit drift"
AMPLIFIED = "low-bit drift, amplified"
VALUE_CHANGE = "value change"

_SIGNED_VIEWS = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def _ordered(tensor: torch.Tensor) -> torch.Tensor:
    """The float bits as int64, ordered like the values (negative floats below positive ones, -0 equal to +0)."""
    width = tensor.element_size()
    bits = tensor.contiguous().view(_SIGNED_VIEWS[width]).to(torch.int64)
    magnitude = bits & ((1 << (8 * width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in representable floats between two float tensors of one dtype (float64 result)."""
    return (_ordered(a).to(torch.float64) - _ordered(b).to(torch.float64)).abs()


def spacing(value: float, dtype: torch.dtype) -> float:
    """The gap between `value` (>= 0) and the next larger float of `dtype`: one ULP at that magnitude."""
    here = torch.tensor(value, dtype=dtype)
    up = torch.nextafter(here, torch.tensor(math.inf, dtype=dtype))
    return float((up.to(torch.float64) - here.to(torch.float64)).item())


@dataclass(frozen=True)
class TensorDelta:
    """How one tensor differs between two sides."""

    name: str
    max_abs: float
    ulps: float  # largest elementwise ULP distance (nan for integer tensors)
    scale_ulps: float  # max_abs in ULPs of the tensor's largest magnitude (inf for integer tensors)
    differing: int  # elements that differ
    numel: int
    floating: bool
    nonfinite_changed: bool = False  # NaN or infinity on one side only

    @property
    def drift(self) -> bool:
        """Whether this tensor alone is within the drift rule."""
        return self.floating and not self.nonfinite_changed and self.scale_ulps <= DRIFT_SCALE_ULPS

    def format(self) -> str:
        if not self.floating:
            return f"{self.name}: {self.differing} of {self.numel} elements differ (max |Δ| {self.max_abs:.3g})"
        nonfinite = ", NaN/inf changed" if self.nonfinite_changed else ""
        return (
            f"{self.name}: max |Δ| {self.max_abs:.3g} = {_count(self.ulps)} ULP ({_count(self.scale_ulps)} of its "
            f"scale), {self.differing} of {self.numel} elements{nonfinite}"
        )


def _count(value: float) -> str:
    if math.isinf(value) or math.isnan(value):
        return str(value)
    return f"{value:.0f}" if value < 1e5 else f"{value:.2g}"


def tensor_delta(name: str, a: torch.Tensor, b: torch.Tensor) -> TensorDelta | None:
    """How `b` differs from `a`; None when they are not comparable elementwise (other shape or dtype, or complex: a
    real magnitude would drop the imaginary part). Float64 tensors are measured at float32's resolution (see the module
    docstring)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.is_complex():
        return None
    with ignore_syncs():
        if a.dtype == torch.float64:
            a, b = a.to(torch.float32), b.to(torch.float32)
        if not (a.is_floating_point() and a.element_size() in _SIGNED_VIEWS):
            unequal = a != b
            difference = (a.to(torch.float64) - b.to(torch.float64)).abs() if a.numel() else torch.zeros(1)
            return TensorDelta(
                name, float(difference.max().item()) if a.numel() else 0.0, math.nan, math.inf,
                int(unequal.sum().item()), a.numel(), floating=False,
            )  # fmt: skip
        return _float_delta(name, a.contiguous(), b.contiguous())


def _finite_scale(tensor: torch.Tensor) -> float:
    """The largest finite magnitude of a float tensor (0 when it has none)."""
    magnitudes = tensor.abs()
    return float(magnitudes.masked_fill(~torch.isfinite(magnitudes), 0).max().item()) if tensor.numel() else 0.0


def _float_delta(name: str, a: torch.Tensor, b: torch.Tensor) -> TensorDelta:
    """`tensor_delta` of two contiguous float tensors: every figure is computed on the differing elements only,
    but the scale, on the whole tensors."""
    raw = _SIGNED_VIEWS[a.element_size()]
    unequal = a.view(raw) != b.view(raw)  # bitwise: -0.0 and 0.0 differ here
    changed_a, changed_b = a[unequal], b[unequal]
    finite_a, finite_b = torch.isfinite(changed_a), torch.isfinite(changed_b)
    nonfinite_changed = bool((finite_a != finite_b).any().item()) or bool(
        ((~finite_a) & (~finite_b) & (changed_a.nan_to_num(0.0) != changed_b.nan_to_num(0.0))).any().item()
    )
    both = finite_a & finite_b
    if bool(both.any().item()):
        near_a, near_b = changed_a[both], changed_b[both]
        max_abs = float((near_a.to(torch.float64) - near_b.to(torch.float64)).abs().max().item())
        ulps = float(ulp_distance(near_a, near_b).max().item())
    else:
        max_abs, ulps = (math.inf, math.inf) if changed_a.numel() else (0.0, 0.0)
    unit = spacing(max(_finite_scale(a), _finite_scale(b)), a.dtype)
    return TensorDelta(
        name,
        max_abs,
        ulps,
        max_abs / unit if unit > 0 else math.inf,
        int(changed_a.numel()),
        a.numel(),
        floating=True,
        nonfinite_changed=nonfinite_changed,
    )


def classify(deltas: Sequence[TensorDelta]) -> str:
    """`low-bit drift` when every delta is within the drift rule, `low-bit drift, amplified` when most are and the
    rest grew within bounds (see the module docstring), else `value change`."""
    if not deltas:
        return VALUE_CHANGE
    beyond = [delta for delta in deltas if not delta.drift]
    if not beyond:
        return DRIFT
    floats_only = all(delta.floating and not delta.nonfinite_changed for delta in deltas)
    if (
        floats_only
        and len(deltas) >= AMPLIFIED_MIN_TENSORS
        and len(beyond) <= AMPLIFIED_SHARE * len(deltas)
        and max(delta.scale_ulps for delta in beyond) <= AMPLIFIED_SCALE_ULPS
    ):
        return AMPLIFIED
    return VALUE_CHANGE


def worst(deltas: Sequence[TensorDelta]) -> TensorDelta | None:
    """The tensor that decides the kind: a non-float one first, else the most scale ULPs apart."""
    return max(deltas, key=lambda delta: (not delta.floating, delta.scale_ulps), default=None)


def checkpoint_deltas(
    names: Sequence[str], a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]
) -> tuple[list[TensorDelta], list[str]]:
    """Deltas of the tensors `names` (those that differ), and the names whose values were not kept on a side."""
    deltas, unmeasured = [], []
    for name in names:
        if name not in a or name not in b:
            unmeasured.append(name)
            continue
        delta = tensor_delta(name, a[name], b[name])
        if delta is None:
            unmeasured.append(name)
        elif delta.differing or delta.nonfinite_changed:
            deltas.append(delta)
    return deltas, unmeasured


@dataclass(frozen=True)
class GrowthPoint:
    """The largest difference over one later checkpoint's comparable float tensors."""

    position: int  # 1-based checkpoint position
    name: str
    max_abs: float
    scale_ulps: float


@dataclass(frozen=True)
class Magnitude:
    """How big the first divergence is, what kind it is under the rule, and how it grows afterwards."""

    deltas: tuple[TensorDelta, ...]
    kind: str
    unmeasured: tuple[str, ...] = ()
    growth: tuple[GrowthPoint, ...] = field(default_factory=tuple)
    # float64 values whose bits differ only below float32's resolution: measured as 0 (module docstring)
    below_resolution: tuple[str, ...] = ()

    @property
    def max_abs(self) -> float:
        return max((delta.max_abs for delta in self.deltas), default=0.0)

    @property
    def max_ulps(self) -> float:
        return max((delta.ulps for delta in self.deltas if delta.floating), default=math.nan)

    @property
    def max_scale_ulps(self) -> float:
        return max((delta.scale_ulps for delta in self.deltas), default=0.0)

    def summary(self) -> str:
        """One line: the kind, the worst tensor with its own figures, and how many tensors differ (and how many of
        them within drift) (the history table's cell)."""
        top = worst(self.deltas)
        if top is None and self.below_resolution:
            names = ", ".join(self.below_resolution[:3]) + (", ..." if len(self.below_resolution) > 3 else "")
            return f"float64 values differ below float32's resolution only (measured as 0 ULPs): {names}"
        if top is None:
            return "values not kept: magnitude unknown"
        if top.floating:
            figures = f"max |Δ| {top.max_abs:.3g} = {_count(top.ulps)} ULP ({_count(top.scale_ulps)} of its scale)"
        else:
            figures = f"{top.differing} of {top.numel} elements differ"
        count = len(self.deltas)
        spread = f"; {self.within_drift} of {count} tensors within drift" if count > 1 else ""
        return f"{self.kind}: {figures} in {top.name}{spread}"

    @property
    def within_drift(self) -> int:
        return sum(1 for delta in self.deltas if delta.drift)

    def _spread(self) -> list[str]:
        """How the first divergence spreads over its tensors: how many are drift, and where it grew beyond."""
        if len(self.deltas) < 2:
            return []
        beyond = sorted((delta for delta in self.deltas if not delta.drift), key=lambda delta: -delta.scale_ulps)
        lines = [_spread_line(self.deltas)]
        if beyond:
            names = ", ".join(f"{delta.name} {_count(delta.scale_ulps)}" for delta in beyond[:6])
            more = f", ... ({len(beyond)} in all)" if len(beyond) > 6 else ""
            lines.append(f"    grew beyond it in: {names}{more}")
        return lines

    def format(self) -> list[str]:
        """Indented lines for a report: the summary, the worst tensors, how the difference spreads over the
        tensors, the rule and the growth."""
        lines = [f"  magnitude: {self.summary()}"]
        shown = sorted(self.deltas, key=lambda delta: (delta.floating, -delta.scale_ulps))[:4]
        lines += [f"    {delta.format()}" for delta in shown]
        if len(self.deltas) > len(shown):
            lines.append(f"    ... and {len(self.deltas) - len(shown)} more")
        lines += self._spread()
        rule = (
            f"drift means floats only, within {DRIFT_SCALE_ULPS:.0f} ULPs of each tensor's scale; amplified drift, "
            f"most tensors so and the rest within {AMPLIFIED_SCALE_ULPS:.0f}"
        )
        lines.append(f"    rule: {rule} (tripwire.bitwise.magnitude)")
        if self.unmeasured:
            lines.append(f"    not measured (values not kept or not comparable): {', '.join(self.unmeasured[:4])}")
        if self.growth:
            lines.append(f"    growth: {format_growth(self.growth)}")
        return lines


def _spread_line(deltas: Sequence[TensorDelta]) -> str:
    floats = sorted(delta.scale_ulps for delta in deltas if delta.floating)
    median = floats[len(floats) // 2] if floats else math.nan
    within = sum(1 for delta in deltas if delta.drift)
    return f"    within drift: {within} of {len(deltas)} tensors (median {_count(median)} ULPs of scale)"


def format_growth(points: Sequence[GrowthPoint], shown: int = 5) -> str:
    """`#3 2.4e-09 (3) -> #9 1.1e-07 (160) -> ... -> #48 0.0031 (4.1e+04)`: max |Δ| (scale ULPs) at some checkpoints."""
    if len(points) > shown:
        step = (len(points) - 1) / (shown - 1)
        points = [points[round(index * step)] for index in range(shown)]
    return " -> ".join(f"#{p.position} {p.max_abs:.2g} ({_count(p.scale_ulps)})" for p in points)


def growth_point(
    position: int, name: str, a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]
) -> GrowthPoint | None:
    """The largest float difference, in scale ULPs, over the tensors both checkpoints kept (max |Δ| and scale only:
    cheaper than `tensor_delta`); None when none is comparable."""
    worst: tuple[float, float] | None = None
    with ignore_syncs():
        for tensor in a.keys() & b.keys():
            left, right = a[tensor], b[tensor]
            if not left.is_floating_point() or left.shape != right.shape or left.dtype != right.dtype:
                continue
            if left.dtype == torch.float64:
                left, right = left.to(torch.float32), right.to(torch.float32)
            gap = (left.to(torch.float64) - right.to(torch.float64)).abs().nan_to_num(0.0, posinf=0.0).max().item()
            unit = spacing(max(_finite_scale(left), _finite_scale(right)), left.dtype)
            scale_ulps = gap / unit if unit > 0 else math.inf
            if worst is None or scale_ulps > worst[1]:
                worst = (float(gap), scale_ulps)
    if worst is None:
        return None
    return GrowthPoint(position, name, worst[0], worst[1])
