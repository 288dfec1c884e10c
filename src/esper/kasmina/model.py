"""MorphogeneticModel: a CNN host with seed slots at chosen injection points, plus fused multi-alpha forward.

Slots run in execution order r0c0 -> r1c0 -> r0c1 -> ... (block i, its pre-pool slot, the pool, its
post-pool slot). `seed_slots` is keyed in SlotConfig (row-major) order, the order of the slot action head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from esper.kasmina.host import CNNHost
from esper.kasmina.slot import SeedSlot
from esper.kasmina.state import LifecycleCallback
from esper.leyline import LIVE_STAGES, SeedStage, SlotConfig, SlotIdError
from esper.leyline.slots import ROW_POST_POOL, ROW_PRE_POOL, format_slot_id

_HOST_PREFIX = "host."
_SLOTS_PREFIX = "seed_slots."


class SlotDict(nn.ModuleDict):
    """An `nn.ModuleDict` of SeedSlots, typed so callers need no casts."""

    def __getitem__(self, key: str) -> SeedSlot:
        slot = super().__getitem__(key)
        assert isinstance(slot, SeedSlot)
        return slot

    def values(self) -> list[SeedSlot]:  # type: ignore[override]
        return [self[key] for key in self.keys()]

    def items(self) -> list[tuple[str, SeedSlot]]:  # type: ignore[override]
        return [(key, self[key]) for key in self.keys()]


class MorphogeneticModel(nn.Module):
    """A host plus one SeedSlot per enabled slot id."""

    def __init__(
        self,
        host: CNNHost,
        slot_ids: Sequence[str],
        *,
        permissive_gates: bool = True,
        on_event: LifecycleCallback | None = None,
    ) -> None:
        super().__init__()
        legal = host.injection_channels()
        config = SlotConfig(tuple(slot_ids))
        unknown = [slot_id for slot_id in config.slot_ids if slot_id not in legal]
        if unknown:
            raise SlotIdError(
                f"slot ids {unknown} do not exist on host {host.spec.name!r}: legal ids are {list(legal)}"
            )
        self.host = host
        self.slot_config = config
        self.seed_slots = SlotDict(
            {
                slot_id: SeedSlot(slot_id, legal[slot_id], permissive_gates=permissive_gates, on_event=on_event)
                for slot_id in config.slot_ids
            }
        )
        # Per block: the slot id after the block (pre-pool) and after its pool, or None; built once so the
        # forward does no string work.
        self._pre_pool: list[str | None] = []
        self._post_pool: list[str | None] = []
        for i in range(host.num_blocks):
            pre, post = format_slot_id(ROW_PRE_POOL, i), format_slot_id(ROW_POST_POOL, i)
            self._pre_pool.append(pre if pre in self.seed_slots else None)
            self._post_pool.append(post if post in self.seed_slots else None)
        self._host_params: list[nn.Parameter] | None = None  # host_parameters(), walked once (see there)

    @property
    def slot_ids(self) -> tuple[str, ...]:
        return self.slot_config.slot_ids

    def slot(self, slot_id: str) -> SeedSlot:
        """The SeedSlot for `slot_id` (typed access to `seed_slots`)."""
        return self.seed_slots[slot_id]

    def slots(self) -> list[SeedSlot]:
        """All slots, in SlotConfig (row-major) order."""
        return [self.slot(slot_id) for slot_id in self.slot_config.slot_ids]

    # ------------------------------------------------------------------ forward

    def forward(self, x: Tensor) -> Tensor:
        return self._run(x, None)

    def fused_forward(self, x: Tensor, alpha_overrides: Mapping[str, Tensor]) -> Tensor:
        """Like `forward`, but each slot named in `alpha_overrides` blends at that [N,1,1,1] per-sample alpha.

        Used to evaluate several alpha configurations in one pass over a repeated batch.
        """
        for slot_id in alpha_overrides:
            if slot_id not in self.seed_slots:
                raise SlotIdError(f"alpha override for unknown slot {slot_id!r}: slots are {self.slot_ids}")
        return self._run(x, alpha_overrides)

    def _run(self, x: Tensor, overrides: Mapping[str, Tensor] | None) -> Tensor:
        host = self.host
        h = x
        for i in range(host.num_blocks):
            h = host.forward_block(i, h)
            pre = self._pre_pool[i]
            if pre is not None:
                h = self._apply_slot(pre, h, overrides)
            if host.pools_after(i):
                h = host.pool(h)
                post = self._post_pool[i]
                if post is not None:
                    h = self._apply_slot(post, h, overrides)
        return host.head(h)

    def _apply_slot(self, slot_id: str, h: Tensor, overrides: Mapping[str, Tensor] | None) -> Tensor:
        override = overrides.get(slot_id) if overrides is not None else None
        out: Tensor = self.seed_slots[slot_id](h, override)
        return out

    def structure_key(self) -> tuple[object, ...]:
        """What the training forward branches on, slot by slot (`SeedSlot.structure_key`), and the module's mode."""
        return (self.training, *(slot.structure_key() for slot in self.seed_slots.values()))

    def prepare_compiled_step(self) -> list[Tensor]:
        """Before a compiled train step: every slot's alpha into the tensor the graph reads (see ScalarAlphaCache);
        returns those tensors, slot by slot."""
        return [slot.refresh_alpha_input() for slot in self.seed_slots.values()]

    # ------------------------------------------------------------------ parameters

    def host_parameters(self) -> list[nn.Parameter]:
        """The host's parameters, in `parameters()` order. The host's modules never change after construction, so
        the list is walked once (every batch clips them; docs/measurements.md#why-the-code-is-as-it-is) and walked again
        after anything that may replace parameter objects (`_apply`: `.to()`, `.float()`, ...)."""
        if self._host_params is None:
            self._host_params = list(self.host.parameters())
        return list(self._host_params)

    def _apply(self, fn: Any, recurse: bool = True) -> MorphogeneticModel:
        self._host_params = None
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        return self

    def host_param_count(self) -> int:
        return sum(p.numel() for p in self.host.parameters())

    def seed_param_count(self) -> int:
        """Parameters of every seed currently held (fossilized included)."""
        return sum(slot.seed_param_count for slot in self.slots())

    # ------------------------------------------------------------------ snapshot / rollback

    def _snapshot_keys(self) -> list[str]:
        fossilized = [f"{_SLOTS_PREFIX}{slot.slot_id}." for slot in self.slots() if slot.stage == SeedStage.FOSSILIZED]
        return [
            key
            for key in self.state_dict()
            if key.startswith(_HOST_PREFIX) or any(key.startswith(prefix) for prefix in fossilized)
        ]

    def snapshot_state(self) -> dict[str, Tensor]:
        """Clones, on the model's own device, of the host's parameters and buffers and of every FOSSILIZED seed.

        The original copied snapshots to (pinned) host memory, one blocking device-to-host copy per tensor
        per env; these hosts are a few thousand parameters, so a device-side clone costs no memory worth
        saving and needs no host sync at all. The clone is queued on the current stream like any other op.
        """
        keep = set(self._snapshot_keys())
        state = self.state_dict()
        return {key: state[key].detach().clone() for key in state if key in keep}

    def load_snapshot(self, state: Mapping[str, Tensor]) -> None:
        """Restore a `snapshot_state()` in place (non-strict: live seeds keep their current weights)."""
        with torch.no_grad():
            result = self.load_state_dict(dict(state), strict=False)
        if result.unexpected_keys:
            raise KeyError(
                f"snapshot has entries this model does not hold (was a fossilized seed removed?): "
                f"{sorted(result.unexpected_keys)[:5]}"
            )

    # ------------------------------------------------------------------ lifecycle helpers

    def prune_live_seeds(self, *, reason: str) -> list[str]:
        """Auto-prune every GERMINATED..HOLDING seed (governor rollback); returns the pruned slot ids."""
        pruned: list[str] = []
        for slot in self.slots():
            if slot.stage in LIVE_STAGES and slot.prune(reason=reason, auto=True):
                pruned.append(slot.slot_id)
        return pruned

    def set_event_callback(self, on_event: LifecycleCallback | None) -> None:
        for slot in self.slots():
            slot.on_event = on_event

    def step_epoch(self) -> None:
        """Tick every slot once (after the epoch's action)."""
        for slot in self.slots():
            slot.step_epoch()
