"""Training-signal tracking: loss/accuracy history, plateau detection and the stabilization latch.

One `SignalTracker` per env. The loop feeds it each epoch's validation loss and accuracy and gets back a
frozen `TrainingSignals` record for the feature builder. Pure Python: it loads no torch, torchvision or numpy.

- **History**: the last `history` (5) values, oldest first, left-padded with 0.0 until enough epochs exist
  (the Obs V3 convention of esper-lite's `_pad_history`).
- **Plateau**: the accuracy moved by less than `plateau_threshold` percentage points over the last 3
  epochs, i.e. `|acc[t] - acc[t-3]| < plateau_threshold` (needs 4 epochs of history; False before that).
- **Stable** (the TAMIYO_INITIATED rule, esper-lite `tamiyo/tracker.py`): an epoch is "stable" when the
  loss did not get worse, improved by less than 3 % relative to the previous epoch, and did not spike (< 1.5x
  the previous loss). After 3 consecutive stable epochs the latch closes and stays closed; `initiated_now` is
  True only on the update that closed it, so the loop emits TAMIYO_INITIATED exactly once per tracker.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

PLATEAU_WINDOW = 3  # epochs over which the accuracy change is measured
STABILIZATION_THRESHOLD = 0.03  # relative loss improvement below which an epoch counts as stable
STABILIZATION_EPOCHS = 3  # consecutive stable epochs that close the latch
DIVERGENCE_FACTOR = 1.5  # a loss this many times the previous one is a spike, never "stable"


@dataclass(frozen=True)
class TrainingSignals:
    """One env's training state after an epoch (accuracies in percent, histories oldest first)."""

    epoch: int
    max_epochs: int
    val_loss: float
    val_acc: float
    loss_history: tuple[float, ...]
    acc_history: tuple[float, ...]
    plateau: bool
    stable: bool


class SignalTracker:
    """Tracks one env's validation loss and accuracy across the epochs of an episode."""

    def __init__(self, max_epochs: int, *, plateau_threshold: float = 0.5, history: int = 5) -> None:
        if max_epochs < 1:
            raise ValueError(f"max_epochs must be >= 1, got {max_epochs}")
        if history < 1:
            raise ValueError(f"history must be >= 1, got {history}")
        self.max_epochs = max_epochs
        self.plateau_threshold = plateau_threshold
        self.history = history
        # Keep enough accuracies for the plateau window even when `history` is shorter.
        self._losses: deque[float] = deque(maxlen=history)
        self._accs: deque[float] = deque(maxlen=max(history, PLATEAU_WINDOW + 1))
        self._prev_loss: float | None = None
        self._stable_count = 0
        self._stable = False
        self._initiated_now = False

    @property
    def initiated_now(self) -> bool:
        """True only right after the update that closed the stabilization latch."""
        return self._initiated_now

    @property
    def stable(self) -> bool:
        return self._stable

    def update(self, epoch: int, val_loss: float, val_acc: float) -> TrainingSignals:
        """Record one epoch's validation results and return the signals the controller observes."""
        self._initiated_now = False
        if not self._stable:
            self._update_stability(val_loss)
        self._prev_loss = val_loss
        self._losses.append(val_loss)
        self._accs.append(val_acc)
        return TrainingSignals(
            epoch=epoch,
            max_epochs=self.max_epochs,
            val_loss=val_loss,
            val_acc=val_acc,
            loss_history=_left_pad(list(self._losses), self.history),
            acc_history=_left_pad(list(self._accs)[-self.history :], self.history),
            plateau=self._is_plateau(),
            stable=self._stable,
        )

    def _update_stability(self, val_loss: float) -> None:
        prev = self._prev_loss
        if prev is None or not math.isfinite(prev) or prev <= 1e-8:
            return
        improvement = prev - val_loss
        is_stable_epoch = (
            improvement >= 0.0 and improvement / prev < STABILIZATION_THRESHOLD and val_loss < prev * DIVERGENCE_FACTOR
        )
        self._stable_count = self._stable_count + 1 if is_stable_epoch else 0
        if self._stable_count >= STABILIZATION_EPOCHS:
            self._stable = True
            self._initiated_now = True

    def _is_plateau(self) -> bool:
        if len(self._accs) <= PLATEAU_WINDOW:
            return False
        change = self._accs[-1] - self._accs[-1 - PLATEAU_WINDOW]
        return abs(change) < self.plateau_threshold

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state (safe for `torch.load(weights_only=True)`)."""
        return {
            "max_epochs": self.max_epochs,
            "plateau_threshold": self.plateau_threshold,
            "history": self.history,
            "losses": list(self._losses),
            "accs": list(self._accs),
            "prev_loss": self._prev_loss,
            "stable_count": self._stable_count,
            "stable": self._stable,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["history"]) != self.history:
            raise ValueError(f"history mismatch: tracker has {self.history}, state has {state['history']}")
        self.max_epochs = int(state["max_epochs"])
        self.plateau_threshold = float(state["plateau_threshold"])
        self._losses = deque((float(v) for v in state["losses"]), maxlen=self._losses.maxlen)
        self._accs = deque((float(v) for v in state["accs"]), maxlen=self._accs.maxlen)
        prev = state["prev_loss"]
        self._prev_loss = None if prev is None else float(prev)
        self._stable_count = int(state["stable_count"])
        self._stable = bool(state["stable"])
        self._initiated_now = False


def _left_pad(values: list[float], length: int) -> tuple[float, ...]:
    if len(values) >= length:
        return tuple(values[-length:])
    return (0.0,) * (length - len(values)) + tuple(values)
