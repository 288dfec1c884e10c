"""VectorizedEngine.validate: fused counterfactual validation gives each config's own loss and accuracy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from esper.kasmina import CNNHost, MorphogeneticModel
from esper.leyline import BlueprintAction, GerminationStyle, TempoAction, get_task_spec
from esper.tolaria.engine import EngineConfig, EnvRuntime, VectorizedEngine, alpha_table
from esper.tolaria.epoch import FusedPlan
from esper.tolaria.governor import TolariaGovernor

SLOTS = ("r0c0", "r0c1")
CONFIGS = ((0.6, 1.0), (0.0, 1.0), (0.6, 0.0), (0.0, 0.0))
BATCH = 8


def _runtime(device: torch.device) -> EnvRuntime:
    model = MorphogeneticModel(CNNHost(get_task_spec("cifar_baseline"), init_seed=2), SLOTS)
    for index, slot in enumerate(model.slots()):
        slot.germinate(
            BlueprintAction.CONV_LIGHT, f"s{index}", style=GerminationStyle.LINEAR_ADD, tempo=TempoAction.FAST,
            alpha_target=1.0, init_seed=20 + index,
        )  # fmt: skip
        slot.advance_stage()
        slot.step_epoch()
        slot.advance_stage()
        slot.step_epoch()
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.3)
    model = model.to(device)
    return EnvRuntime(
        env_id=0,
        device=device,
        model=model,
        host_optimizer=torch.optim.SGD(model.host_parameters(), lr=0.01),
        governor=TolariaGovernor(model, num_classes=10),
        stream=torch.cuda.Stream(device) if device.type == "cuda" else None,
    )


def _batches(device: torch.device, n: int = 3) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(4)
    return [
        [
            (
                torch.randn(BATCH, 3, 32, 32, generator=g).to(device),
                torch.randint(0, 10, (BATCH,), generator=g).to(device),
            )
        ]
        for _ in range(n)
    ]


def _alone(
    env: EnvRuntime, batches: list[list[tuple[torch.Tensor, torch.Tensor]]], config: tuple[float, ...]
) -> list[float]:
    for slot, alpha in zip(env.model.slots(), config):
        slot.alpha_controller.force(alpha)
    env.model.eval()
    loss, correct, count = 0.0, 0, 0
    with torch.inference_mode():
        for ((inputs, targets),) in batches:
            logits = env.model(inputs)
            loss += float(F.cross_entropy(logits, targets, reduction="sum"))
            correct += int((logits.argmax(dim=1) == targets).sum())
            count += targets.shape[0]
    return [loss, float(correct), float(count)]


def test_fused_validation_matches_each_config_run_alone() -> None:
    cpu = torch.device("cpu")
    env = _runtime(cpu)
    batches = _batches(cpu)
    (acc,) = VectorizedEngine(EngineConfig()).validate([env], batches, [FusedPlan(SLOTS, CONFIGS)])
    fused = acc.tolist()
    for k, config in enumerate(CONFIGS):
        alone = _alone(env, batches, config)
        assert fused[k][1:] == alone[1:], f"config {k}: correct/count {fused[k][1:]} vs {alone[1:]}"
        assert fused[k][0] == pytest.approx(alone[0], rel=1e-5), f"config {k}"


def test_fused_validation_configs_really_differ() -> None:
    """Guards the comparison above against seeds that do nothing."""
    cpu = torch.device("cpu")
    env = _runtime(cpu)
    (acc,) = VectorizedEngine(EngineConfig()).validate([env], _batches(cpu), [FusedPlan(SLOTS, CONFIGS)])
    losses = acc[:, 0].tolist()
    assert len(set(losses)) == len(CONFIGS)


def test_fused_validation_leaves_batchnorm_statistics_and_train_mode_as_they_were() -> None:
    cpu = torch.device("cpu")
    env = _runtime(cpu)
    env.model.train()
    before = {k: v.clone() for k, v in env.model.state_dict().items() if "running" in k or "num_batches" in k}
    VectorizedEngine(EngineConfig()).validate([env], _batches(cpu), [FusedPlan(SLOTS, CONFIGS)])
    after = env.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert env.model.training


def test_alpha_table_holds_the_plan_row_by_row() -> None:
    table = alpha_table(FusedPlan(SLOTS, CONFIGS), torch.device("cpu"))
    assert table is not None
    assert torch.equal(table, torch.tensor(CONFIGS, dtype=torch.float32))


def test_alpha_table_is_none_without_named_slots() -> None:
    assert alpha_table(FusedPlan((), ()), torch.device("cpu")) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a host-to-device copy only blocks the host on a GPU")
def test_fused_validation_makes_no_host_sync_on_cuda() -> None:
    device = torch.device("cuda")
    env = _runtime(device)
    batches = _batches(device)
    plans = [FusedPlan(SLOTS, CONFIGS)]
    engine = VectorizedEngine(EngineConfig())
    engine.validate([env], batches, plans)  # warm-up: allocator and kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        engine.validate([env], batches, plans)
    finally:
        torch.cuda.set_sync_debug_mode("default")
