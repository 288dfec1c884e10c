"""TolariaGovernor: watches one env's validation loss and rolls the host back to its last good snapshot.

Panic rules, checked once per epoch on the fused validation loss (`check_vital_signs`):
- NaN or Inf: immediate panic;
- "lobotomy": the loss jumps back to chance level, |loss - ln C| < 0.065 ln C, after the recent mean had
  fallen below 0.6 ln C (needs at least LOBOTOMY_MIN_HISTORY samples): immediate panic;
- statistical: loss above the absolute threshold (12), above mean + 6 sigma and above 3 x mean of the
  rolling window (20 samples, at least 10), for 3 consecutive epochs. Anomalous values never enter the window.

Snapshots (host plus fossilized seeds, cloned on the model's device: no host sync) are taken every
SNAPSHOT_EVERY epochs and after each fossilization. A rollback restores the last snapshot, prunes every live
seed and reports what it pruned; the caller clears optimizer state and emits GOVERNOR_ROLLBACK.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass

from torch import Tensor

from esper.kasmina.model import MorphogeneticModel
from esper.tolaria.devices import synchronize

SENSITIVITY_SIGMA = 6.0
MULTIPLIER = 3.0
ABSOLUTE_THRESHOLD = 12.0
DEATH_PENALTY = 10.0
WINDOW = 20
MIN_SAMPLES = 10
CONSECUTIVE_PANICS = 3
SNAPSHOT_EVERY = 5
LOBOTOMY_MEAN_FRACTION = 0.6
LOBOTOMY_TOLERANCE = 0.065
LOBOTOMY_MIN_HISTORY = 3


@dataclass(frozen=True)
class Verdict:
    """The outcome of one vital-signs check; `reason` is empty when there is no panic."""

    panic: bool
    reason: str = ""


@dataclass(frozen=True)
class RollbackReport:
    epoch: int
    reason: str
    snapshot_epoch: int
    pruned_seed_ids: tuple[str, ...]  # the seeds' own ids (SeedState.seed_id), not their slot ids


class TolariaGovernor:
    """One per env: snapshot, vital signs and rollback of a `MorphogeneticModel`."""

    def __init__(self, model: MorphogeneticModel, *, num_classes: int, death_penalty: float = DEATH_PENALTY) -> None:
        self.model = model
        self.chance_loss = math.log(num_classes)
        self.death_penalty = death_penalty
        self.history: deque[float] = deque(maxlen=WINDOW)
        self.consecutive_anomalies = 0
        self.rollbacks = 0
        self._snapshot: dict[str, Tensor] = {}
        self.snapshot_epoch = 0
        self.snapshot(0)

    def snapshot(self, epoch: int) -> None:
        """Clone host and fossilized state on the model's device (no host sync)."""
        self._snapshot = self.model.snapshot_state()
        self.snapshot_epoch = epoch

    def maybe_snapshot(self, epoch: int) -> None:
        if epoch > 0 and epoch % SNAPSHOT_EVERY == 0:
            self.snapshot(epoch)

    def check_vital_signs(self, val_loss: float) -> Verdict:
        if not math.isfinite(val_loss):
            self.consecutive_anomalies = 0
            return Verdict(True, f"non-finite validation loss ({val_loss})")
        if self._is_lobotomy(val_loss):
            self.consecutive_anomalies = 0
            return Verdict(True, f"lobotomy: loss {val_loss:.4f} fell back to chance level {self.chance_loss:.4f}")
        if self._is_statistical_anomaly(val_loss):
            self.consecutive_anomalies += 1
            if self.consecutive_anomalies >= CONSECUTIVE_PANICS:
                self.consecutive_anomalies = 0
                return Verdict(True, f"loss {val_loss:.4f} anomalous for {CONSECUTIVE_PANICS} consecutive epochs")
            return Verdict(False)
        self.consecutive_anomalies = 0
        self.history.append(val_loss)
        return Verdict(False)

    def _is_lobotomy(self, loss: float) -> bool:
        if len(self.history) < LOBOTOMY_MIN_HISTORY:
            return False
        mean = statistics.fmean(self.history)
        near_chance = abs(loss - self.chance_loss) < LOBOTOMY_TOLERANCE * self.chance_loss
        return mean < LOBOTOMY_MEAN_FRACTION * self.chance_loss and near_chance

    def _is_statistical_anomaly(self, loss: float) -> bool:
        if len(self.history) < MIN_SAMPLES:
            return False
        mean = statistics.fmean(self.history)
        sigma = statistics.pstdev(self.history)
        return loss > ABSOLUTE_THRESHOLD and loss > mean + SENSITIVITY_SIGMA * sigma and loss > MULTIPLIER * mean

    def execute_rollback(self, epoch: int, reason: str) -> RollbackReport:
        """Restore the last snapshot and prune every live seed."""
        synchronize(next(self.model.parameters()).device)
        self.model.load_snapshot(self._snapshot)
        seed_ids = {slot.slot_id: slot.state.seed_id for slot in self.model.slots() if slot.state is not None}
        pruned_slots = self.model.prune_live_seeds(reason="governor_rollback")
        self.rollbacks += 1
        return RollbackReport(epoch, reason, self.snapshot_epoch, tuple(seed_ids[slot_id] for slot_id in pruned_slots))
