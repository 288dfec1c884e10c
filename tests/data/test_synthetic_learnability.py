"""The synthetic task rewards structure: an impaired host plus a FOSSILIZED conv_light seed clearly beats the host.

`cifar_impaired` is built of 1x1 convolutions: it cannot tell a pattern from its transposed or mirrored copy, so
it is capped at telling the colour group (at best 50 %). A 3x3 conv_light seed in slot r0c0 sees orientation.
Both models start from the same host weights, see the same data in the same order and train with the trainer's
optimizer settings (SGD, momentum 0.9, gradient clipping 1.0); only the seed differs.

Measured (torch 2.14.1 CPU): host alone 43.1 %, host + fossilized seed 82.6 % (4 epochs, 3000 samples, ~4.5 s on
an idle core).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from esper.data.synthetic import make_synthetic
from esper.kasmina import CNNHost, MorphogeneticModel
from esper.leyline import BlueprintAction, GerminationStyle, TempoAction, get_task_spec
from lifecycle_helpers import fossilize_germinated

TRAIN_SAMPLES = 3000
VAL_SAMPLES = 1000
EPOCHS = 4
BATCH = 50
LR = 0.05
HOST_SEED = 1
MARGIN_POINTS = 10.0


def _fossilize_conv_light(model: MorphogeneticModel, slot_id: str) -> None:
    slot = model.slot(slot_id)
    slot.germinate(
        BlueprintAction.CONV_LIGHT, "structure", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
        alpha_target=1.0, init_seed=HOST_SEED + 3,
    )  # fmt: skip
    fossilize_germinated(slot)


def _train_and_evaluate(with_seed: bool) -> float:
    train = make_synthetic(TRAIN_SAMPLES, seed=0, split="train")
    val = make_synthetic(VAL_SAMPLES, seed=0, split="val")
    model = MorphogeneticModel(CNNHost(get_task_spec("cifar_impaired"), init_seed=HOST_SEED), ("r0c0",))
    if with_seed:
        _fossilize_conv_light(model, "r0c0")
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    order = torch.Generator().manual_seed(HOST_SEED)
    model.train()
    for _ in range(EPOCHS):
        permutation = torch.randperm(TRAIN_SAMPLES, generator=order)
        for start in range(0, TRAIN_SAMPLES, BATCH):
            index = permutation[start : start + BATCH]
            optimizer.zero_grad()
            F.cross_entropy(model(train.images[index]), train.labels[index]).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
    model.eval()
    with torch.no_grad():
        return float((model(val.images).argmax(dim=1) == val.labels).float().mean()) * 100.0


def test_impaired_host_with_a_fossilized_conv_light_seed_beats_the_host_alone() -> None:
    host_alone = _train_and_evaluate(with_seed=False)
    with_seed = _train_and_evaluate(with_seed=True)
    print(f"\nsynthetic val accuracy: impaired host {host_alone:.1f} %, host + fossilized conv_light {with_seed:.1f} %")
    assert host_alone <= 55.0, f"a 1x1 host should be capped near 50 %, got {host_alone:.1f} %"
    assert with_seed >= host_alone + MARGIN_POINTS, f"{with_seed:.1f} % vs {host_alone:.1f} %"
