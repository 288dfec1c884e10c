"""The alpha controller: a seed's blend weight, ramped monotonically toward a target over whole ticks.

Pure Python (no tensors): one tick per epoch, driven by `SeedSlot.step_epoch`. Curves:
LINEAR `t`, COSINE `0.5(1 - cos(pi t))`, SIGMOID a logistic of steepness `k` rescaled so curve(0) = 0 and
curve(1) = 1. `retarget` is only allowed from HOLD; the last tick snaps exactly onto the target.
"""

from __future__ import annotations

import math

from esper.leyline import AlphaCurve, AlphaMode

DEFAULT_STEEPNESS = 12.0


def _logistic(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def curve_value(curve: AlphaCurve, t: float, steepness: float = DEFAULT_STEEPNESS) -> float:
    """Progress of `curve` at time fraction `t` (clamped to [0, 1]); 0 at t=0 and 1 at t=1 for every curve."""
    t = min(1.0, max(0.0, t))
    if curve == AlphaCurve.LINEAR:
        return t
    if curve == AlphaCurve.COSINE:
        return 0.5 * (1.0 - math.cos(math.pi * t))
    if curve == AlphaCurve.SIGMOID:
        low = _logistic(-0.5 * steepness)
        high = _logistic(0.5 * steepness)
        return (_logistic(steepness * (t - 0.5)) - low) / (high - low)
    raise ValueError(f"unknown alpha curve {curve!r}: choose one of {[c.name for c in AlphaCurve]}")


class AlphaController:
    """Alpha and its schedule: HOLD (still), or UP/DOWN (ramping from `start` to `target` over ticks)."""

    def __init__(self, alpha: float = 0.0) -> None:
        self.alpha = float(alpha)
        self.mode = AlphaMode.HOLD
        self.target = self.alpha
        self.start = self.alpha
        self.curve = AlphaCurve.LINEAR
        self.steepness = DEFAULT_STEEPNESS
        self.steps_total = 0
        self.steps_done = 0
        self._velocity = 0.0

    def __repr__(self) -> str:
        return (
            f"AlphaController(alpha={self.alpha:.4f}, mode={self.mode.name}, target={self.target}, "
            f"step={self.steps_done}/{self.steps_total}, curve={self.curve.name})"
        )

    def retarget(
        self,
        target: float,
        steps: int,
        curve: AlphaCurve = AlphaCurve.LINEAR,
        steepness: float = DEFAULT_STEEPNESS,
    ) -> bool:
        """Start a ramp to `target` over `steps` ticks. Refused (False) unless in HOLD.

        `steps == 0` jumps to the target at once and stays in HOLD. A target equal to the current alpha is
        accepted and leaves the controller in HOLD.
        """
        if self.mode != AlphaMode.HOLD:
            return False
        if steps < 0:
            raise ValueError(f"alpha ramp steps must be >= 0, got {steps}")
        target = float(target)
        self.curve = AlphaCurve(curve)
        self.steepness = float(steepness)
        self.start = self.alpha
        self.target = target
        self.steps_done = 0
        if steps == 0 or target == self.alpha:
            self._velocity = target - self.alpha
            self.alpha = target
            self.start = target
            self.steps_total = 0
            return True
        self.steps_total = int(steps)
        self.mode = AlphaMode.UP if target > self.alpha else AlphaMode.DOWN
        return True

    def step(self) -> float:
        """Advance one tick and return the new alpha. In HOLD nothing moves (velocity 0)."""
        if self.mode == AlphaMode.HOLD:
            self._velocity = 0.0
            return self.alpha
        previous = self.alpha
        self.steps_done += 1
        if self.steps_done >= self.steps_total:
            new_alpha = self.target
            self.mode = AlphaMode.HOLD
        else:
            progress = curve_value(self.curve, self.steps_done / self.steps_total, self.steepness)
            new_alpha = self.start + (self.target - self.start) * progress
            # Monotone and never past the target, whatever rounding does.
            if self.mode == AlphaMode.UP:
                new_alpha = min(self.target, max(previous, new_alpha))
            else:
                new_alpha = max(self.target, min(previous, new_alpha))
        self.alpha = new_alpha
        self._velocity = new_alpha - previous
        return self.alpha

    def force(self, alpha: float) -> None:
        """Set alpha at once and hold there (used on entering HOLDING/FOSSILIZED and on prune)."""
        alpha = float(alpha)
        self._velocity = alpha - self.alpha
        self.alpha = alpha
        self.start = alpha
        self.target = alpha
        self.mode = AlphaMode.HOLD
        self.steps_total = 0
        self.steps_done = 0

    @property
    def time_to_target(self) -> int:
        """Ticks left before the ramp reaches its target (0 in HOLD)."""
        if self.mode == AlphaMode.HOLD:
            return 0
        return self.steps_total - self.steps_done

    @property
    def velocity(self) -> float:
        """Change of alpha over the last tick (or the last jump)."""
        return self._velocity

    def state_dict(self) -> dict[str, float | int]:
        return {
            "alpha": self.alpha,
            "mode": int(self.mode),
            "target": self.target,
            "start": self.start,
            "curve": int(self.curve),
            "steepness": self.steepness,
            "steps_total": self.steps_total,
            "steps_done": self.steps_done,
            "velocity": self._velocity,
        }

    def load_state_dict(self, state: dict[str, float | int]) -> None:
        self.alpha = float(state["alpha"])
        self.mode = AlphaMode(int(state["mode"]))
        self.target = float(state["target"])
        self.start = float(state["start"])
        self.curve = AlphaCurve(int(state["curve"]))
        self.steepness = float(state["steepness"])
        self.steps_total = int(state["steps_total"])
        self.steps_done = int(state["steps_done"])
        self._velocity = float(state.get("velocity", 0.0))
