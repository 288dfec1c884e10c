"""ESCROW wired into the trainer: the env's ledger is the one paid, slot resolution, forfeits, invalid actions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from esper.leyline import (
    ACTION_HEAD_NAMES,
    LifecycleOp,
    RewardInputs,
    SeedStage,
    SlotConfig,
    SlotRewardState,
    TelemetryLevel,
    get_task_spec,
)
from esper.nissa import TelemetryHub
from esper.simic.rewards import EscrowLedger, RewardConfig, RewardMode
from esper.simic.rewards.terms import stable_accuracy
from esper.simic.training import action_execution as actions
from esper.simic.training.counterfactual_eval import CounterfactualResult
from esper.simic.training.env_factory import EnvFactory
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.tolaria.engine import AmpMode

SLOTS = SlotConfig(("r0c0", "r0c1"))
MAX_EPOCHS = 5


@pytest.fixture
def escrow_env() -> Iterator[ParallelEnvState]:
    hub = TelemetryHub(TelemetryLevel.OFF)
    factory = EnvFactory(
        task=get_task_spec("cifar_baseline"),
        slot_config=SLOTS,
        devices=[torch.device("cpu")],
        run_seed=3,
        max_epochs=MAX_EPOCHS,
        amp=AmpMode.OFF,
        reward_mode=RewardMode.ESCROW,
        plateau_threshold=0.5,
        permissive_gates=True,
        hub=hub,
    )
    yield factory.create_env(0, 0)
    hub.close()


def context(epoch: int) -> actions.ExecutionContext:
    return actions.ExecutionContext(
        round_idx=0,
        epoch=epoch,
        max_epochs=MAX_EPOCHS,
        run_seed=3,
        slot_config=SLOTS,
        reward_mode=RewardMode.ESCROW,
        reward_config=RewardConfig(),
        max_seeds=None,
    )


def heads(op: LifecycleOp, slot: int = 0) -> list[int]:
    chosen = {name: 0 for name in ACTION_HEAD_NAMES}
    chosen.update(op=int(op), slot=slot, blueprint=1)
    return [chosen[name] for name in ACTION_HEAD_NAMES]


def slot_state(slot_id: str, stage: SeedStage) -> SlotRewardState:
    return SlotRewardState(slot_id, stage, stage, 3, 4, 1.0, 1.0, 1000, 1.0)


def terminal_wait(target: str, slots: tuple[SlotRewardState, ...]) -> RewardInputs:
    return RewardInputs(
        op=LifecycleOp.WAIT,
        action_valid=True,
        slot_id=target,
        target_stage=SeedStage.FOSSILIZED,
        target_age=4,
        target_epochs_in_stage=1,
        contribution=1.0,
        acc_at_germination=50.0,
        interaction_sum=0.0,
        val_acc=60.0,
        total_improvement=1.0,
        host_params=100_000,
        epoch=MAX_EPOCHS,
        max_epochs=MAX_EPOCHS,
        slots=slots,
        recent_accs=(60.0, 60.0, 60.0),
    )


def test_every_escrow_env_gets_its_own_ledger_over_the_enabled_slots(escrow_env: ParallelEnvState) -> None:
    assert escrow_env.escrow is not None
    assert escrow_env.escrow.slot_ids == SLOTS.slot_ids


def test_stable_accuracy_includes_the_current_epoch(escrow_env: ParallelEnvState) -> None:
    escrow_env.acc_history = [70.0, 72.0, 65.0]  # the trainer appends the current accuracy before acting
    escrow_env.counterfactual = CounterfactualResult(
        val_acc=65.0,
        val_loss=1.0,
        config_accs=(65.0,),
        contributions={},
        all_off_acc=None,
        committed_acc=65.0,
        interactions={},
        interaction_sums={},
    )
    spec = actions.decode_action(heads(LifecycleOp.WAIT), SLOTS)
    before = {sid: actions._slot_snapshot(s) for sid, s in escrow_env.model.seed_slots.items()}

    inputs = actions.build_reward_inputs(escrow_env, spec, LifecycleOp.WAIT, True, before, context(3))

    assert inputs.recent_accs == (70.0, 72.0, 65.0)
    assert stable_accuracy(inputs, window=3) == 65.0


def test_fossilized_slot_keeps_its_credit_and_the_others_are_forfeited() -> None:
    ledger = EscrowLedger(SLOTS.slot_ids)
    ledger.load_state_dict({"r0c0": 1.5, "r0c1": 2.0})
    inputs = terminal_wait("r0c0", (slot_state("r0c0", SeedStage.FOSSILIZED), slot_state("r0c1", SeedStage.TRAINING)))

    breakdown = ledger.step(inputs, RewardConfig())

    assert breakdown.components["escrow_forfeit"] == -2.0
    assert (ledger.credit("r0c0"), ledger.credit("r0c1")) == (1.5, 0.0)


def test_forfeit_happens_only_at_the_last_epoch() -> None:
    ledger = EscrowLedger(SLOTS.slot_ids)
    ledger.load_state_dict({"r0c0": 0.0, "r0c1": 2.0})
    early = terminal_wait("r0c0", (slot_state("r0c0", SeedStage.FOSSILIZED), slot_state("r0c1", SeedStage.TRAINING)))
    early = RewardInputs(**{**vars(early), "epoch": MAX_EPOCHS - 1})

    assert ledger.step(early, RewardConfig()).components["escrow_forfeit"] == 0.0
    assert ledger.credit("r0c1") == 2.0


def test_a_slot_index_past_the_enabled_slots_resolves_to_the_first_and_is_flagged() -> None:
    only_r0c1 = SlotConfig(("r0c1",))

    assert actions._resolve_target_slot(1, only_r0c1) == ("r0c1", False)
    assert actions._resolve_target_slot(999, SlotConfig.default()) == ("r0c0", False)
    assert actions._resolve_target_slot(2, SlotConfig.default()) == ("r0c2", True)


def test_a_disabled_slot_is_not_a_ledger_key() -> None:
    ledger = EscrowLedger(SlotConfig(("r0c1",)).slot_ids)

    with pytest.raises(KeyError, match="'r0c2' is not in this escrow ledger"):
        ledger.credit("r0c2")


def test_invalid_prune_is_paid_as_wait_with_no_escrow_move(escrow_env: ParallelEnvState) -> None:
    assert escrow_env.escrow is not None
    escrow_env.escrow.load_state_dict({"r0c0": 0.75, "r0c1": 0.0})

    outcome = actions.execute_action(escrow_env, heads(LifecycleOp.PRUNE, slot=0), context(2))

    assert (outcome.valid, outcome.effective_op) == (False, LifecycleOp.WAIT)
    assert outcome.reward_components["escrow_delta"] == 0.0
    assert outcome.reward == 0.0
    assert escrow_env.escrow.credit("r0c0") == 0.75


def test_out_of_range_slot_makes_a_non_wait_op_invalid(escrow_env: ParallelEnvState) -> None:
    outcome = actions.execute_action(escrow_env, heads(LifecycleOp.GERMINATE, slot=7), context(1))

    assert (outcome.valid, outcome.spec.slot_id, outcome.effective_op) == (False, "r0c0", LifecycleOp.WAIT)
    assert escrow_env.model.seed_slots["r0c0"].stage in (SeedStage.DORMANT, SeedStage.UNKNOWN)
