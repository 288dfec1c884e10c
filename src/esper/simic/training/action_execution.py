"""Action execution: decode a sampled factored action, validate it, apply it to the slot, and reward it.

An invalid action (e.g. FOSSILIZE on a slot that is not HOLDING) changes nothing and is rewarded as WAIT; the
buffer keeps both the chosen op and the effective op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from esper.kasmina.slot import SeedSlot
from esper.leyline import (
    ACTION_HEAD_NAMES,
    ALPHA_CURVE_SPEC,
    ALPHA_SPEED_TICKS,
    ALPHA_TARGET_VALUES,
    ActionOutcome,
    ActionSpec,
    AlphaCurveAction,
    AlphaSpeedAction,
    AlphaTargetAction,
    BlueprintAction,
    GerminationStyle,
    LifecycleOp,
    RewardInputs,
    SeedStage,
    SlotConfig,
    SlotRewardState,
    TempoAction,
)
from esper.leyline.seeding import derive_seed
from esper.simic.rewards import RewardConfig, RewardMode, compute_reward
from esper.simic.training.observations import mask_state
from esper.simic.training.parallel_env_state import ParallelEnvState
from esper.tamiyo.features import LastAction
from esper.tamiyo.masks import slot_allows


@dataclass(frozen=True)
class ExecutionContext:
    """Run-level facts action execution needs (no hidden closure state)."""

    round_idx: int
    epoch: int
    max_epochs: int
    run_seed: int
    slot_config: SlotConfig
    reward_mode: RewardMode
    reward_config: RewardConfig
    max_seeds: int | None
    # Set when the governor rolled this env back this epoch: the step's reward is then -penalty, whatever the
    # action earned (the shaped reward is still computed, so stateful reward modes such as escrow stay in step).
    rollback_penalty: float | None = None


def _resolve_target_slot(slot_index: int, slot_config: SlotConfig) -> tuple[str, bool]:
    """Map a slot head index to a slot id; out of range falls back to the first slot and is flagged invalid."""
    return slot_config.resolve(slot_index)


def decode_action(heads: Sequence[int], slot_config: SlotConfig) -> ActionSpec:
    """Turn head indices (ACTION_HEAD_NAMES order) into a typed ActionSpec."""
    value = dict(zip(ACTION_HEAD_NAMES, heads))
    slot_id, in_range = _resolve_target_slot(value["slot"], slot_config)
    return ActionSpec(
        op=LifecycleOp(value["op"]),
        slot_index=value["slot"],
        slot_id=slot_id,
        slot_in_range=in_range,
        blueprint=BlueprintAction(value["blueprint"]),
        style=GerminationStyle(value["style"]),
        tempo=TempoAction(value["tempo"]),
        alpha_target=AlphaTargetAction(value["alpha_target"]),
        alpha_speed=AlphaSpeedAction(value["alpha_speed"]),
        alpha_curve=AlphaCurveAction(value["alpha_curve"]),
    )


def is_action_valid(spec: ActionSpec, slot: SeedSlot, *, seeds_used: int, max_seeds: int | None) -> bool:
    """Validity for reward purposes: the same per-slot rules the action masks apply, plus the seed cap."""
    if not spec.slot_in_range:
        return spec.op is LifecycleOp.WAIT
    if spec.op is LifecycleOp.WAIT:
        return True
    if spec.op is LifecycleOp.GERMINATE:
        under_cap = max_seeds is None or seeds_used < max_seeds
        if not under_cap or spec.blueprint is BlueprintAction.NOOP:
            return False
    return slot_allows(spec.op, mask_state(slot))  # the same per-slot rules the action masks apply


def _apply(env: ParallelEnvState, spec: ActionSpec, slot: SeedSlot, ctx: ExecutionContext) -> bool:
    """Carry out a valid action on its slot; returns whether it took effect (a gate may refuse ADVANCE)."""
    op = spec.op
    if op is LifecycleOp.WAIT:
        return True
    if op is LifecycleOp.GERMINATE:
        n = env.seeds_germinated
        slot.germinate(
            spec.blueprint,
            f"ep{ctx.round_idx}_env{env.env_id}_seed_{n}",
            style=spec.style,
            tempo=spec.tempo,
            alpha_target=ALPHA_TARGET_VALUES[spec.alpha_target],
            init_seed=derive_seed(ctx.run_seed, "seed", ctx.round_idx, env.env_id, n),
            acc_at_germination=env.val_acc,
        )
        env.seeds_germinated += 1
        return True
    if op is LifecycleOp.ADVANCE:
        return slot.advance_stage().passed
    if op is LifecycleOp.FOSSILIZE:
        passed = slot.advance_stage(SeedStage.FOSSILIZED).passed
        if passed:
            env.runtime.governor.snapshot(ctx.epoch)
        return passed
    curve, steepness = ALPHA_CURVE_SPEC[spec.alpha_curve]
    ticks = ALPHA_SPEED_TICKS[spec.alpha_speed]
    if op is LifecycleOp.PRUNE:
        if ticks == 0:
            return slot.prune(reason="policy")
        return slot.schedule_prune(ticks, curve, steepness)
    return slot.set_alpha_target(ALPHA_TARGET_VALUES[spec.alpha_target], ticks, curve, steepness)


def _slot_snapshot(slot: SeedSlot) -> tuple[SeedStage, int, float]:
    state = slot.state
    return slot.stage, (0 if state is None else state.epochs_in_stage), float(slot.alpha)


def _seed_params(slot: SeedSlot) -> int:
    return sum(p.numel() for p in slot.seed_parameters())


def _slot_reward_states(
    env: ParallelEnvState, before: dict[str, tuple[SeedStage, int, float]]
) -> tuple[list[SlotRewardState], int, int]:
    """Every slot before and after the action, the fossils' parameter count and how many fossils contribute."""
    slot_states = []
    fossil_params = 0
    contributing = 0
    for slot_id, slot in env.model.seed_slots.items():
        stage_after, epochs_after, alpha_after = _slot_snapshot(slot)
        params = _seed_params(slot)
        contribution = None if slot.state is None else slot.state.contribution
        if stage_after is SeedStage.FOSSILIZED:
            fossil_params += params
            contributing += int(contribution is not None and contribution > 0.0)
        slot_states.append(
            SlotRewardState(
                slot_id=slot_id,
                stage_before=before[slot_id][0],
                stage_after=stage_after,
                epochs_in_stage_before=before[slot_id][1],
                epochs_in_stage_after=epochs_after,
                alpha_before=before[slot_id][2],
                alpha_after=alpha_after,
                seed_params=params,
                contribution=contribution,
            )
        )
    return slot_states, fossil_params, contributing


def build_reward_inputs(
    env: ParallelEnvState,
    spec: ActionSpec,
    effective_op: LifecycleOp,
    valid: bool,
    before: dict[str, tuple[SeedStage, int, float]],
    ctx: ExecutionContext,
) -> RewardInputs:
    """Collect what the reward reads, from the env state before and after the action."""
    slots = env.model.seed_slots
    target = slots[spec.slot_id]
    target_state = target.state
    stage_before, epochs_before, _ = before[spec.slot_id]
    slot_states, fossil_params, contributing = _slot_reward_states(env, before)
    improvement = None if env.all_off_acc is None else env.val_acc - env.all_off_acc
    return RewardInputs(
        op=effective_op,
        action_valid=valid,
        slot_id=spec.slot_id,
        target_stage=stage_before,
        target_age=0 if target_state is None else target_state.age_epochs,
        target_epochs_in_stage=epochs_before,
        contribution=None if target_state is None else target_state.contribution,
        acc_at_germination=None if target_state is None else target_state.acc_at_germination,
        interaction_sum=env.interaction_sums.get(spec.slot_id, 0.0),
        val_acc=env.val_acc,
        total_improvement=improvement,
        host_params=env.model.host_param_count(),
        epoch=ctx.epoch,
        max_epochs=ctx.max_epochs,
        slots=tuple(slot_states),
        committed_acc=env.committed_acc,
        fossil_params=fossil_params,
        n_contributing_fossils=contributing,
        recent_accs=tuple(env.acc_history[-3:]),
    )


def execute_action(env: ParallelEnvState, heads: Sequence[int], ctx: ExecutionContext) -> ActionOutcome:
    """Decode, validate, apply and reward one env's action; updates the env's last action and op counts."""
    spec = decode_action(heads, ctx.slot_config)
    slots = env.model.seed_slots
    slot = slots[spec.slot_id]
    before = {slot_id: _slot_snapshot(s) for slot_id, s in slots.items()}
    valid = is_action_valid(spec, slot, seeds_used=env.seeds_germinated, max_seeds=ctx.max_seeds)
    effective_op = spec.op if valid else LifecycleOp.WAIT
    success = _apply(env, spec, slot, ctx) if valid else False
    inputs = build_reward_inputs(env, spec, effective_op, valid, before, ctx)
    breakdown = compute_reward(ctx.reward_mode, inputs, ctx.reward_config, env.escrow)
    components = dict(breakdown.components)
    reward = breakdown.total
    if ctx.rollback_penalty is not None:
        reward = -ctx.rollback_penalty
        components = {"governor_rollback": reward}
    env.last_action = LastAction(op=spec.op, success=success)
    env.op_counts[spec.op.name] += 1
    env.episode_rewards.append(reward)
    return ActionOutcome(
        env_id=env.env_id,
        spec=spec,
        valid=valid,
        effective_op=effective_op,
        reward=reward,
        reward_components=components,
        truncated=ctx.epoch >= ctx.max_epochs,
    )
