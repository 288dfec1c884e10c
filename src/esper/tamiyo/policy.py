"""The factored recurrent actor-critic: an LSTM trunk, eight masked action heads and one value head (JAN).

Network (brief 1.10): blueprint indices [K, S] -> `nn.Embedding(14, 4)` per slot, concatenated to the Obs V3
vector -> Linear(hidden_dim) -> LayerNorm -> ReLU -> 1-layer `nn.LSTM` (batch_first, lstm_hidden_dim) -> per
head Linear(h -> 256) -> ReLU -> Linear(256 -> n) (the blueprint head is h -> 512 -> 256 -> 13) and one value
head Linear(h -> 256) -> ReLU -> Linear(256 -> 1).

`forward(obs, blueprint_idx, hidden)` is the network over [K, T] sequences: every head's logits, the values and the
LSTM state after the last step. It is what `torch.compile` compiles (`compile_network`, after the weights are in
place), with the LSTM behind `torch.compiler.disable` (`_recurrent`): dynamo cannot trace an `nn.LSTM`, so the
boundary is stated, as the original keeps `torch.compiler.disable` on the code dynamo must not trace. The verbs
take the network to call (`net`: this module, or its compiled form), as in Stable-Baselines3's policies:
- `get_action` samples one factored action per env for one step (the op first, then the slot under the op's
  `slot_by_op` row, then the other heads), without gradients and without host syncs;
- `evaluate_actions` re-scores stored actions over whole [K, T] sequences for the PPO update, running the LSTM
  from the stored initial state (one episode per env per round, so no mid-sequence resets);
- `predict_values` gives V(s) for the bootstrap of a truncated last step.
Sampling, masking and scoring stay outside the compiled forward: they take the explicit sampling generator.

Parameters are initialised under a forked global RNG seeded from `seed`, so building a policy is deterministic
and does not disturb anyone else's random stream.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from esper.leyline import ACTION_HEAD_NAMES, head_sizes
from esper.tamiyo import aten_lstm
from esper.tamiyo.distributions import MaskedCategorical
from esper.tamiyo.features import BLUEPRINT_EMBED_DIM, NUM_BLUEPRINT_EMBEDDINGS

Hidden = aten_lstm.Hidden
# What `forward` returns: logits per head [K, T, n], values [K, T], the LSTM state after the last step
NetworkOutput = tuple[dict[str, torch.Tensor], torch.Tensor, Hidden]
Network = Callable[[torch.Tensor, torch.Tensor, Hidden], NetworkOutput]  # the policy, or its compiled form

HEAD_HIDDEN_DIM = 256
POLICY_OUTPUT_GAIN = 0.01  # near-uniform initial policy
VALUE_OUTPUT_GAIN = 1.0
# Sampling order: the op decides which slots are valid, the remaining heads follow in contract order.
SAMPLING_ORDER: tuple[str, ...] = ("op", "slot", *(h for h in ACTION_HEAD_NAMES if h not in ("op", "slot")))


@dataclass
class PolicyStep:
    """One batched `get_action` result; every tensor stays on the policy's device."""

    actions: dict[str, torch.Tensor]  # [K] int64 per head, ACTION_HEAD_NAMES order
    log_probs: dict[str, torch.Tensor]  # [K] float32 per head
    values: torch.Tensor  # [K]
    hidden: Hidden  # LSTM state after this step, ([1, K, H], [1, K, H])
    op_probs: torch.Tensor  # [K, 6]
    entropies: dict[str, torch.Tensor]  # [K] normalized entropy per head


def _mlp(sizes: list[int], output_gain: float) -> nn.Sequential:
    """Linears with ReLU between; orthogonal init (gain sqrt 2, `output_gain` for the last), zero bias."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        linear = nn.Linear(fan_in, fan_out)
        is_last = i == len(sizes) - 2
        nn.init.orthogonal_(linear.weight, gain=output_gain if is_last else math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if not is_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def slot_mask_for_op(slot_by_op: torch.Tensor, op: torch.Tensor) -> torch.Tensor:
    """Pick each env's `slot_by_op` row for its op: [..., 6, S] and [...] -> [..., S]."""
    index = op.long()[..., None, None].expand(*op.shape, 1, slot_by_op.shape[-1])
    return slot_by_op.gather(-2, index).squeeze(-2)


class FactoredRecurrentActorCritic(nn.Module):
    """LSTM actor-critic over the factored action space (8 heads) with a single value head."""

    def __init__(
        self,
        state_dim: int,
        num_slots: int,
        *,
        hidden_dim: int = 512,
        lstm_hidden_dim: int = 512,
        head_hidden_dim: int = HEAD_HIDDEN_DIM,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.state_dim = state_dim
        self.num_slots = num_slots
        self.hidden_dim = hidden_dim
        self.lstm_hidden_dim = lstm_hidden_dim
        self.head_sizes = head_sizes(num_slots)
        input_dim = state_dim + BLUEPRINT_EMBED_DIM * num_slots
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.blueprint_embedding = nn.Embedding(NUM_BLUEPRINT_EMBEDDINGS, BLUEPRINT_EMBED_DIM)
            trunk_linear = nn.Linear(input_dim, hidden_dim)
            nn.init.orthogonal_(trunk_linear.weight, gain=math.sqrt(2.0))
            nn.init.zeros_(trunk_linear.bias)
            self.trunk = nn.Sequential(trunk_linear, nn.LayerNorm(hidden_dim), nn.ReLU())
            self.lstm = nn.LSTM(hidden_dim, lstm_hidden_dim, num_layers=1, batch_first=True)
            self._init_lstm()
            self.heads = nn.ModuleDict(
                {name: self._build_head(name, n, head_hidden_dim) for name, n in self.head_sizes.items()}
            )
            self.value_head = _mlp([lstm_hidden_dim, head_hidden_dim, 1], VALUE_OUTPUT_GAIN)

    def _build_head(self, name: str, size: int, head_hidden_dim: int) -> nn.Sequential:
        if name == "blueprint":
            widths = [self.lstm_hidden_dim, 2 * head_hidden_dim, head_hidden_dim, size]
        else:
            widths = [self.lstm_hidden_dim, head_hidden_dim, size]
        return _mlp(widths, POLICY_OUTPUT_GAIN)

    def _init_lstm(self) -> None:
        """Orthogonal weights, zero biases except the forget gate's input bias of 1 (remember by default)."""
        h = self.lstm_hidden_dim
        with torch.no_grad():
            for name, param in self.lstm.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param)
                else:
                    param.zero_()
                if name.startswith("bias_ih"):
                    param[h : 2 * h].fill_(1.0)  # gate order i, f, g, o

    def initial_hidden(self, batch: int, device: torch.device | str) -> Hidden:
        """Zero LSTM state for `batch` envs: ([1, batch, H], [1, batch, H])."""
        shape = (1, batch, self.lstm_hidden_dim)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def _encode(self, obs: torch.Tensor, blueprint_idx: torch.Tensor) -> torch.Tensor:
        """Obs [..., D] and blueprint indices [..., S] -> trunk features [..., hidden_dim]."""
        embedded = self.blueprint_embedding(blueprint_idx.long()).flatten(-2)
        features: torch.Tensor = self.trunk(torch.cat([obs, embedded], dim=-1))
        return features

    @torch.compiler.disable  # type: ignore[untyped-decorator]  # torch's decorator is untyped
    def _recurrent(self, features: torch.Tensor, hidden: Hidden) -> tuple[torch.Tensor, Hidden]:
        """The LSTM over [K, T] features from `hidden`, always eager: dynamo cannot trace an `nn.LSTM` (and would
        unroll the CPU loop once per sequence length), so a compiled forward calls it across a stated boundary (one
        graph before, one after) instead of breaking wherever dynamo meets the module. On CPU it runs on ATen's
        kernels, not oneDNN's, whose bits change with the CPU model (`aten_lstm`)."""
        if features.device.type == "cpu":  # the policy builds only an LSTM `lstm_on_aten` computes
            return aten_lstm.lstm_on_aten(self.lstm, features, hidden)
        out, (h, c) = self.lstm(features, hidden)
        return out, (h, c)

    def forward(self, obs: torch.Tensor, blueprint_idx: torch.Tensor, hidden: Hidden) -> NetworkOutput:
        """Obs [K, T, D] (or one step, [K, D]), blueprint indices [K, T, S] (or [K, S]) and the LSTM state ->
        (logits per head [K, T, n] (or [K, n]), values [K, T] (or [K]), the LSTM state after the last step)."""
        features = self._encode(obs, blueprint_idx)
        one_step = features.dim() == 2
        out, new_hidden = self._recurrent(features.unsqueeze(1) if one_step else features, hidden)
        if one_step:
            out = out.squeeze(1)
        logits = {name: self.heads[name](out) for name in ACTION_HEAD_NAMES}
        values = self.value_head(out).squeeze(-1)
        return logits, values, (new_hidden[0], new_hidden[1])

    @torch.no_grad()
    def get_action(
        self,
        obs: torch.Tensor,
        blueprint_idx: torch.Tensor,
        masks: dict[str, torch.Tensor],
        hidden: Hidden,
        *,
        generator: torch.Generator | None,
        deterministic: bool = False,
        net: Network | None = None,
    ) -> PolicyStep:
        """Sample (or, when `deterministic`, take the mode of) one factored action per env for one step."""
        logits, values, new_hidden = (self if net is None else net)(obs, blueprint_idx, hidden)
        actions: dict[str, torch.Tensor] = {}
        log_probs: dict[str, torch.Tensor] = {}
        entropies: dict[str, torch.Tensor] = {}
        op_probs = torch.empty(0)
        for name in SAMPLING_ORDER:
            mask = slot_mask_for_op(masks["slot_by_op"], actions["op"]) if name == "slot" else masks[name]
            dist = MaskedCategorical(logits[name], mask)
            action = dist.mode() if deterministic else dist.sample(generator)
            actions[name] = action
            log_probs[name] = dist.log_prob(action)
            entropies[name] = dist.entropy()
            if name == "op":
                op_probs = dist.probs
        return PolicyStep(
            actions={name: actions[name] for name in ACTION_HEAD_NAMES},
            log_probs={name: log_probs[name] for name in ACTION_HEAD_NAMES},
            values=values,
            hidden=new_hidden,
            op_probs=op_probs,
            entropies={name: entropies[name] for name in ACTION_HEAD_NAMES},
        )

    @torch.no_grad()
    def predict_values(
        self, obs: torch.Tensor, blueprint_idx: torch.Tensor, hidden: Hidden, *, net: Network | None = None
    ) -> torch.Tensor:
        """V(s) for one step of K envs ([K]), e.g. the bootstrap value of a truncated last step."""
        _, values, _ = (self if net is None else net)(obs, blueprint_idx, hidden)
        return values

    def evaluate_actions(
        self,
        obs: torch.Tensor,
        blueprint_idx: torch.Tensor,
        masks: dict[str, torch.Tensor],
        actions: dict[str, torch.Tensor],
        hidden0: Hidden,
        *,
        net: Network | None = None,
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]:
        """Re-score stored [K, T] actions: (log_probs [K, T], normalized entropies [K, T], values [K, T])."""
        logits, values, _ = (self if net is None else net)(obs, blueprint_idx, hidden0)
        log_probs: dict[str, torch.Tensor] = {}
        entropies: dict[str, torch.Tensor] = {}
        for name in ACTION_HEAD_NAMES:
            mask = slot_mask_for_op(masks["slot_by_op"], actions["op"]) if name == "slot" else masks[name]
            dist = MaskedCategorical(logits[name], mask)
            log_probs[name] = dist.log_prob(actions[name])
            entropies[name] = dist.entropy()
        return log_probs, entropies, values
