"""SeedSlot: one injection point of the host and the seed it holds, through the seed's whole lifecycle.

Lifecycle: DORMANT -germinate-> GERMINATED -ADVANCE(G1)-> TRAINING -ADVANCE(G2)-> BLENDING
-ADVANCE(G3)-> HOLDING -FOSSILIZE(G5)-> FOSSILIZED. Any live seed can be pruned; a pruned slot then cools
down PRUNED -> EMBARGOED (5 epochs) -> RESETTING (1 epoch) -> DORMANT. Every change is reported through the
`on_event` callback as (event_type, slot_id, seed_id, data).

Forward: inactive slots return `h`. The seed reads `h.detach()` while gradients are isolated
(TRAINING, BLENDING). TRAINING at alpha 0 uses the straight-through estimator; otherwise the seed is blended
by its algorithm (ADD, MULTIPLY, GATE) at the controller's alpha or at a per-sample `alpha_override`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from esper.kasmina.alpha import DEFAULT_STEEPNESS, AlphaController
from esper.kasmina.blending import (
    AlphaGate,
    ScalarAlphaCache,
    blend_add,
    blend_gate,
    blend_multiply,
    straight_through,
)
from esper.kasmina.blueprints import create_blueprint
from esper.kasmina.building import built_on
from esper.kasmina.events import (
    fossilized_payload,
    gate_payload,
    germinated_payload,
    pruned_payload,
    stage_changed_payload,
)
from esper.kasmina.gates import ADVANCE_TARGETS, GateResult, evaluate_gate, refuse
from esper.kasmina.state import (
    VELOCITY_DECAY,
    LifecycleCallback,
    LifecycleError,
    SeedState,
    grad_health_from_norm,
)
from esper.leyline import (
    ACTIVE_STAGES,
    ADVANCEABLE_STAGES,
    ALPHA_TARGET_VALUES,
    FAILURE_STAGES,
    LIVE_STAGES,
    STYLE_ALGORITHM,
    STYLE_CURVE,
    TEMPO_EPOCHS,
    AlphaAlgorithm,
    AlphaCurve,
    AlphaMode,
    BlueprintAction,
    GerminationStyle,
    SeedStage,
    TelemetryEventType,
    TempoAction,
    is_valid_transition,
)
from esper.leyline.stages import EMBARGO_EPOCHS, RESETTING_EPOCHS

__all__ = ["GateResult", "LifecycleCallback", "LifecycleError", "SeedSlot", "SeedState"]

_ISOLATED_STAGES = frozenset({SeedStage.TRAINING, SeedStage.BLENDING})
_SETTABLE_TARGETS = frozenset(ALPHA_TARGET_VALUES.values())


class SeedSlot(nn.Module):
    """One slot of a MorphogeneticModel: an optional seed module, its `SeedState` and its alpha controller."""

    seed: nn.Module | None
    gate: AlphaGate | None
    _device_anchor: Tensor

    def __init__(
        self,
        slot_id: str,
        channels: int,
        *,
        permissive_gates: bool = True,
        on_event: LifecycleCallback | None = None,
    ) -> None:
        super().__init__()
        self.slot_id = slot_id
        self.channels = channels
        self.permissive_gates = permissive_gates
        self.on_event = on_event
        self.seed = None
        self.gate = None
        self.state: SeedState | None = None
        self.alpha_controller = AlphaController(0.0)
        self._optimizer: torch.optim.SGD | None = None
        self._alpha_cache = ScalarAlphaCache()
        # Follows the slot through .to(device) so an empty slot still knows where to build its seed.
        self.register_buffer("_device_anchor", torch.empty(0), persistent=False)

    def extra_repr(self) -> str:
        return f"slot_id={self.slot_id!r}, channels={self.channels}, stage={self.stage.name}"

    # ------------------------------------------------------------------ read-only views

    @property
    def stage(self) -> SeedStage:
        return self.state.stage if self.state is not None else SeedStage.DORMANT

    @property
    def alpha(self) -> float:
        return self.alpha_controller.alpha

    @property
    def is_active(self) -> bool:
        """True when the slot holds a seed whose output can affect the forward pass."""
        return self.seed is not None and self.state is not None and self.state.stage in ACTIVE_STAGES

    @property
    def isolate_gradients(self) -> bool:
        """True in TRAINING and BLENDING: the seed reads a detached copy of the host features (CNN)."""
        return self.state is not None and self.state.stage in _ISOLATED_STAGES

    @property
    def seed_trainable(self) -> bool:
        """False when empty, failed (pruned and cooling down), or while alpha ramps DOWN (params frozen)."""
        return (
            self.seed is not None
            and self.state is not None
            and self.state.stage not in FAILURE_STAGES
            and self.alpha_controller.mode != AlphaMode.DOWN
        )

    def seed_parameters(self) -> list[nn.Parameter]:
        """The seed's parameters (and its learned gate's), [] when empty."""
        params: list[nn.Parameter] = []
        if self.seed is not None:
            params.extend(self.seed.parameters())
        if self.gate is not None:
            params.extend(self.gate.parameters())
        return params

    @property
    def seed_param_count(self) -> int:
        return sum(p.numel() for p in self.seed_parameters())

    def seed_optimizer(self, lr: float, momentum: float) -> torch.optim.SGD | None:
        """The seed's own SGD, created on first use after germination; None when there is nothing to train."""
        if self._optimizer is None:
            params = self.seed_parameters()
            if not params:
                return None
            self._optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
        return self._optimizer

    def clear_optimizer_state(self) -> None:
        """Drop the seed optimizer's momentum, if it has one (never creates an optimizer)."""
        if self._optimizer is not None:
            self._optimizer.state.clear()

    # ------------------------------------------------------------------ lifecycle operations

    def germinate(
        self,
        blueprint: BlueprintAction,
        seed_id: str,
        *,
        style: GerminationStyle,
        tempo: TempoAction,
        alpha_target: float,
        init_seed: int,
        acc_at_germination: float | None = None,
    ) -> None:
        """Plant a new seed (DORMANT -> GERMINATED), initialised deterministically from `init_seed`."""
        if self.state is not None:
            raise LifecycleError(f"slot {self.slot_id} is {self.stage.name}: germinate needs an empty (DORMANT) slot")
        if not seed_id:
            raise LifecycleError(f"slot {self.slot_id}: G0 failed, a seed_id is required")
        if not 0.0 < alpha_target <= 1.0:
            raise ValueError(f"alpha_target must be in (0, 1], got {alpha_target}")
        blueprint = BlueprintAction(blueprint)
        algorithm = STYLE_ALGORITHM[GerminationStyle(style)]
        # built on the slot's device from an explicitly seeded RNG: a germination uploads nothing (kasmina.building)
        with built_on(self._device_anchor.device, init_seed):
            seed = create_blueprint(blueprint, self.channels)
            gate = AlphaGate(self.channels) if algorithm == AlphaAlgorithm.GATE else None
        self.seed = seed.train(self.training)
        self.gate = gate.train(self.training) if gate is not None else None
        self.alpha_controller = AlphaController(0.0)
        self._optimizer = None
        self.state = SeedState(
            seed_id=seed_id,
            blueprint=blueprint,
            style=GerminationStyle(style),
            tempo=TempoAction(tempo),
            alpha_target=float(alpha_target),
            algorithm=algorithm,
            acc_at_germination=acc_at_germination,
            seed_params=self.seed_param_count,
            init_seed=init_seed,
        )
        self._emit(TelemetryEventType.SEED_GERMINATED, seed_id, germinated_payload(self.state))

    def advance_stage(self, target: SeedStage | None = None) -> GateResult:
        """Try the gated move to `target` (default: the next stage of GERMINATED/TRAINING/BLENDING).

        FOSSILIZE is `advance_stage(SeedStage.FOSSILIZED)` from HOLDING. SEED_GATE_EVALUATED is emitted for
        every call; on a pass the slot moves and emits SEED_STAGE_CHANGED (and SEED_FOSSILIZED).
        """
        state = self.state
        if state is None:
            result = refuse(target or SeedStage.UNKNOWN, f"slot {self.slot_id} is empty")
        elif target is None and state.stage not in ADVANCEABLE_STAGES:
            result = refuse(SeedStage.UNKNOWN, f"no ADVANCE out of {state.stage.name}")
        else:
            resolved = target if target is not None else ADVANCE_TARGETS[state.stage]
            result = evaluate_gate(state, resolved, self.alpha_controller, permissive=self.permissive_gates)
        seed_id = state.seed_id if state is not None else None
        self._emit(TelemetryEventType.SEED_GATE_EVALUATED, seed_id, gate_payload(result, self.stage))
        if result.passed:
            self._transition(result.target)
        return result

    def start_blending(self) -> None:
        """Ramp alpha to the germination target over the tempo's epochs, on the style's curve."""
        if self.state is None:
            return
        self.alpha_controller.retarget(
            self.state.alpha_target, TEMPO_EPOCHS[self.state.tempo], STYLE_CURVE[self.state.style]
        )

    def prune(self, *, reason: str = "policy", auto: bool = False) -> bool:
        """Remove a live seed now (-> PRUNED). FOSSILIZED, empty and cooling-down slots refuse (False)."""
        state = self.state
        if state is None or state.stage not in LIVE_STAGES:
            return False
        state.auto_pruned = auto
        state.prune_reason = reason
        state.scheduled_prune = False
        params = self.seed_param_count
        self._release_seed()
        self.alpha_controller.force(0.0)
        self._transition(SeedStage.PRUNED)
        self._emit(TelemetryEventType.SEED_PRUNED, state.seed_id, pruned_payload(state, params))
        return True

    def schedule_prune(
        self, ticks: int, curve: AlphaCurve, steepness: float = DEFAULT_STEEPNESS, *, reason: str = "policy"
    ) -> bool:
        """Ramp alpha to 0 over `ticks` epochs, then prune automatically (auto_pruned=True).

        `ticks == 0`, or a seed that has no alpha yet, is pruned at once. HOLDING goes back to BLENDING.
        Refused while alpha is still ramping. The seed's parameters are frozen during the ramp.
        """
        state = self.state
        if state is None or state.stage not in LIVE_STAGES:
            return False
        if ticks <= 0 or self.alpha <= 0.0:
            return self.prune(reason=reason)
        if self.alpha_controller.mode != AlphaMode.HOLD:
            return False
        if state.stage == SeedStage.HOLDING:
            self._transition(SeedStage.BLENDING)
        self.alpha_controller.retarget(0.0, ticks, curve, steepness)
        state.scheduled_prune = True
        state.prune_reason = reason
        self._sync_requires_grad()
        return True

    def set_alpha_target(
        self, target: float, ticks: int, curve: AlphaCurve, steepness: float = DEFAULT_STEEPNESS
    ) -> bool:
        """Retarget alpha (BLENDING/HOLDING, controller in HOLD) to 0.5, 0.7 or 1.0 over `ticks` epochs.

        A partial target from HOLDING re-enters BLENDING (HOLDING is full-amplitude only).
        """
        state = self.state
        if state is None or state.stage not in (SeedStage.BLENDING, SeedStage.HOLDING):
            return False
        if self.alpha_controller.mode != AlphaMode.HOLD or target not in _SETTABLE_TARGETS or ticks < 0:
            return False
        if state.stage == SeedStage.HOLDING and target < 1.0:
            self._transition(SeedStage.BLENDING)
        self.alpha_controller.retarget(target, ticks, curve, steepness)
        state.alpha_target = float(target)
        self._sync_requires_grad()
        return True

    def step_epoch(self) -> None:
        """The per-epoch tick, after the action: age the seed, move alpha, run the cool-down chain."""
        state = self.state
        if state is None:
            return
        if state.stage in FAILURE_STAGES:
            self._step_cooldown(state)
            return
        state.age_epochs += 1
        state.epochs_in_stage += 1
        if state.stage != SeedStage.BLENDING:
            return
        self.alpha_controller.step()
        self._sync_requires_grad()
        finished = self.alpha_controller.mode == AlphaMode.HOLD and self.alpha <= 0.0
        if state.scheduled_prune and finished:
            self.prune(reason=state.prune_reason or "scheduled_prune", auto=True)

    def _step_cooldown(self, state: SeedState) -> None:
        if state.stage == SeedStage.PRUNED:
            self._transition(SeedStage.EMBARGOED)
            return
        state.epochs_in_stage += 1
        if state.stage == SeedStage.EMBARGOED and state.epochs_in_stage >= EMBARGO_EPOCHS:
            self._transition(SeedStage.RESETTING)
        elif state.stage == SeedStage.RESETTING and state.epochs_in_stage >= RESETTING_EPOCHS:
            self._transition(SeedStage.DORMANT)

    # ------------------------------------------------------------------ measurements fed back by the trainer

    def record_contribution(self, contribution: float) -> None:
        """Store the counterfactual contribution (pp); its velocity is an EMA (0.7 / 0.3) of the change."""
        if self.state is None:
            return
        previous = self.state.contribution
        change = 0.0 if previous is None else contribution - previous
        self.state.contribution_velocity = (
            VELOCITY_DECAY * self.state.contribution_velocity + (1.0 - VELOCITY_DECAY) * change
        )
        self.state.contribution = float(contribution)

    def record_grad_norm(self, norm: float) -> None:
        """Store the seed's gradient norm of the epoch (after the epoch sync) and score its health."""
        if self.state is None:
            return
        self.state.grad_norm = float(norm)
        self.state.grad_health = grad_health_from_norm(float(norm))

    def record_accuracy(self, accuracy: float) -> None:
        """Store the latest validation accuracy (pp); only strict G2 reads it."""
        if self.state is not None:
            self.state.current_accuracy = float(accuracy)

    # ------------------------------------------------------------------ forward

    def structure_key(self) -> tuple[object, ...]:
        """Everything `forward` branches on in training, as plain values: equal keys, the same traced code.

        A compiled train step keeps one graph cache per model key (`esper.tolaria.engine.CompiledStep`) instead of
        trusting dynamo's guards on this state: on torch 2.14 they missed stage changes (`stage in <frozenset>` is
        not guarded), so a graph captured at one stage ran at another (docs/measurements.md).
        """
        state, seed = self.state, self.seed
        return (
            None if seed is None else type(seed).__qualname__,
            None if state is None else (int(state.stage), int(state.algorithm)),
            self.gate is not None,
            state is not None and state.stage == SeedStage.TRAINING and self.alpha_controller.alpha == 0.0,
        )

    def refresh_alpha_input(self) -> Tensor:
        """Fill the alpha tensor a compiled train step reads (`ScalarAlphaCache.refresh`), before the step, and
        return it."""
        return self._alpha_cache.refresh(self.alpha_controller.alpha, self._device_anchor.device)

    def forward(self, h: Tensor, alpha_override: Tensor | None = None) -> Tensor:
        """Blend the seed into `h`; `alpha_override` [N,1,1,1] replaces the scalar alpha (fused eval)."""
        seed, state = self.seed, self.state
        if seed is None or state is None or state.stage not in ACTIVE_STAGES:
            return h
        seed_input = h.detach() if state.stage in _ISOLATED_STAGES else h
        s = seed(seed_input)
        if s.dtype != h.dtype:  # e.g. GroupNorm runs in float32 under autocast
            s = s.to(h.dtype)
        if alpha_override is None:
            if state.stage == SeedStage.TRAINING and self.alpha_controller.alpha == 0.0:
                return straight_through(h, s)
            a = self._alpha_cache.get(self.alpha_controller.alpha, h)
        else:
            a = alpha_override.to(dtype=h.dtype)
        if state.algorithm == AlphaAlgorithm.ADD:
            return blend_add(h, s, a)
        if state.algorithm == AlphaAlgorithm.MULTIPLY:
            return blend_multiply(h, s, a, seed_input)
        if self.gate is None:
            raise LifecycleError(f"slot {self.slot_id}: GATE blending without a gate module")
        return blend_gate(h, s, a, self.gate(seed_input))

    # ------------------------------------------------------------------ internals

    def _transition(self, new_stage: SeedStage) -> None:
        state = self.state
        if state is None or not is_valid_transition(state.stage, new_stage):
            raise LifecycleError(f"slot {self.slot_id}: illegal move {self.stage.name} -> {new_stage.name}")
        old_stage = state.stage
        state.previous_stage, state.previous_epochs_in_stage = old_stage, state.epochs_in_stage
        state.stage, state.epochs_in_stage = new_stage, 0
        if new_stage == SeedStage.BLENDING and old_stage == SeedStage.TRAINING:
            self.start_blending()
        elif new_stage in (SeedStage.HOLDING, SeedStage.FOSSILIZED):
            self.alpha_controller.force(1.0)
        elif new_stage == SeedStage.DORMANT:
            self._clear()
        self._sync_requires_grad()
        self._emit(TelemetryEventType.SEED_STAGE_CHANGED, state.seed_id, stage_changed_payload(state, self.alpha))
        if new_stage == SeedStage.FOSSILIZED:
            payload = fossilized_payload(state, self.seed_param_count, self.alpha)
            self._emit(TelemetryEventType.SEED_FOSSILIZED, state.seed_id, payload)

    def _sync_requires_grad(self) -> None:
        """Freeze the seed's parameters while alpha ramps DOWN; the forward graph stays intact."""
        trainable = self.alpha_controller.mode != AlphaMode.DOWN
        for param in self.seed_parameters():
            if param.requires_grad != trainable:
                param.requires_grad_(trainable)

    def _release_seed(self) -> None:
        self.seed = None
        self.gate = None
        self._optimizer = None
        self._alpha_cache.clear()

    def _clear(self) -> None:
        self._release_seed()
        self.state = None
        self.alpha_controller = AlphaController(0.0)

    def _emit(self, event_type: TelemetryEventType, seed_id: str | None, data: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event_type, self.slot_id, seed_id, data)
