"""Counterfactual evaluation: which alpha configurations fused validation runs, and what they attribute.

Every configuration is a subset of the *active* slots (a seed present with alpha > 0) left enabled at its
current alpha, the others switched off. Subsets are deduplicated, so each distinct configuration runs once:
- main (index 0): every active slot on;
- solo: one per active slot, with that slot off (its contribution c_i = f(all) - f(all minus i));
- all_off: every active slot off (the improvement imp = f(all) - f(none));
- with 2-4 active slots, the pairs and singletons needed for interactions I_ij = f(ij) - f(i) - f(j) + f(none);
- committed: only fossilized seeds on (the accuracy the host keeps if every live seed were pruned).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from esper.kasmina.model import MorphogeneticModel
from esper.leyline import SeedStage
from esper.tolaria.epoch import FusedPlan, ValidationStats

MAX_INTERACTION_SLOTS = 4


@dataclass(frozen=True)
class CounterfactualLayout:
    """The fused plan of one env plus the meaning of each configuration index."""

    plan: FusedPlan
    active: tuple[str, ...]
    fossilized: tuple[str, ...]
    subset_index: dict[frozenset[str], int]

    def index(self, enabled: frozenset[str]) -> int | None:
        return self.subset_index.get(enabled)


@dataclass(frozen=True)
class CounterfactualResult:
    """Accuracies (percent) and attributions of one env's fused validation."""

    val_acc: float
    val_loss: float
    config_accs: tuple[float, ...]
    contributions: dict[str, float]
    all_off_acc: float | None
    committed_acc: float
    interactions: dict[str, float]  # "r0c0+r0c1" -> I_ij
    interaction_sums: dict[str, float]


def _required_subsets(active: tuple[str, ...], fossilized: tuple[str, ...]) -> list[frozenset[str]]:
    everything = frozenset(active)
    subsets = [everything]
    subsets += [everything - {slot} for slot in active]
    if active:
        subsets.append(frozenset())
    if 2 <= len(active) <= MAX_INTERACTION_SLOTS:
        subsets += [frozenset(pair) for pair in itertools.combinations(active, 2)]
        subsets += [frozenset({slot}) for slot in active]
    subsets.append(frozenset(fossilized))
    ordered: list[frozenset[str]] = []
    for subset in subsets:
        if subset not in ordered:
            ordered.append(subset)
    return ordered


def build_layout(model: MorphogeneticModel) -> CounterfactualLayout:
    """The configurations fused validation must run for `model`'s current seeds."""
    alphas: dict[str, float] = {}
    fossilized: list[str] = []
    for slot_id, slot in model.seed_slots.items():
        if slot.state is not None and slot.alpha > 0.0:
            alphas[slot_id] = float(slot.alpha)
            if slot.stage is SeedStage.FOSSILIZED:
                fossilized.append(slot_id)
    active = tuple(alphas)
    if not active:
        return CounterfactualLayout(FusedPlan((), ()), (), (), {frozenset(): 0})
    subsets = _required_subsets(active, tuple(fossilized))
    rows = tuple(tuple(alphas[s] if s in subset else 0.0 for s in active) for subset in subsets)
    return CounterfactualLayout(
        plan=FusedPlan(active, rows),
        active=active,
        fossilized=tuple(fossilized),
        subset_index={subset: i for i, subset in enumerate(subsets)},
    )


def _acc_of(layout: CounterfactualLayout, accs: list[float], enabled: frozenset[str]) -> float | None:
    index = layout.index(enabled)
    return None if index is None else accs[index]


def attribute(layout: CounterfactualLayout, validation: Sequence[ValidationStats]) -> CounterfactualResult:
    """Turn each configuration's validation sums (in the layout's order) into accuracies and attributions."""
    accs = [stats.accuracy for stats in validation[: layout.plan.num_configs]]
    val_loss = validation[0].mean_loss
    everything = frozenset(layout.active)
    val_acc = accs[0]
    contributions = {}
    for slot in layout.active:
        ablated = _acc_of(layout, accs, everything - {slot})
        if ablated is not None:
            contributions[slot] = val_acc - ablated
    all_off = _acc_of(layout, accs, frozenset()) if layout.active else None
    committed = _acc_of(layout, accs, frozenset(layout.fossilized))
    interactions: dict[str, float] = {}
    sums = dict.fromkeys(layout.active, 0.0)
    if all_off is not None:
        for a, b in itertools.combinations(layout.active, 2):
            f_ab = _acc_of(layout, accs, frozenset({a, b}))
            f_a = _acc_of(layout, accs, frozenset({a}))
            f_b = _acc_of(layout, accs, frozenset({b}))
            if f_ab is None or f_a is None or f_b is None:
                continue
            value = f_ab - f_a - f_b + all_off
            interactions[f"{a}+{b}"] = value
            sums[a] += value
            sums[b] += value
    return CounterfactualResult(
        val_acc=val_acc,
        val_loss=val_loss,
        config_accs=tuple(accs),
        contributions=contributions,
        all_off_acc=all_off,
        committed_acc=val_acc if committed is None else committed,
        interactions=interactions,
        interaction_sums=sums,
    )
