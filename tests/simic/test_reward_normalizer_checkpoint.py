"""Normalizer state survives a checkpoint: torch.save, then torch.load(weights_only=True), then load_state_dict."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from esper.simic.rewards.normalizers import (
    OBS_NORMALIZER_PREFIX,
    REWARD_NORMALIZER_PREFIX,
    RewardNormalizer,
    RunningMeanStd,
)
from esper.simic.training.checkpoint import CheckpointLayout, load_checkpoint, save_checkpoint
from esper.simic.training.checkpoint_schema import Plain


def round_trip(obj: object) -> object:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_reward_normalizer_metadata_survives_weights_only_load() -> None:
    source = RewardNormalizer(clip=10.0)
    source.mean, source.m2, source.count = 1.23, 4.56, 7

    restored = RewardNormalizer(clip=3.0)
    restored.load_state_dict(round_trip(source.state_dict(REWARD_NORMALIZER_PREFIX)), REWARD_NORMALIZER_PREFIX)

    assert (restored.clip, restored.mean, restored.m2, restored.count) == (10.0, 1.23, 4.56, 7)


def test_reward_normalizer_checkpoint_keys_carry_the_prefix() -> None:
    keys = set(RewardNormalizer().state_dict(REWARD_NORMALIZER_PREFIX))

    assert keys == {f"reward_normalizer_{k}" for k in ("mean", "m2", "count", "clip")}


def test_restored_reward_normalizer_normalizes_like_the_original() -> None:
    source = RewardNormalizer()
    for reward in (0.5, -1.0, 2.0, 0.25):
        source.update(reward)

    restored = RewardNormalizer()
    restored.load_state_dict(round_trip(source.state_dict()))

    assert restored.normalize(1.5) == source.normalize(1.5)


def test_obs_normalizer_statistics_survive_weights_only_load() -> None:
    source = RunningMeanStd((3,))
    source.update(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]))
    source.update(torch.tensor([[0.0, 0.0, 9.0]]))

    restored = RunningMeanStd((3,))
    restored.load_state_dict(round_trip(source.state_dict(OBS_NORMALIZER_PREFIX)), OBS_NORMALIZER_PREFIX)

    x = torch.tensor([[2.0, -1.0, 4.0]])
    assert torch.equal(restored.normalize(x), source.normalize(x))
    assert restored.count == source.count == 3.0


def test_reward_normalizer_state_in_a_checkpoint_file_round_trips(tmp_path: Path) -> None:
    layout = CheckpointLayout(n_envs=2, slot_ids=("r0c1",), task="cifar_baseline", controller="ppo")
    source = RewardNormalizer(clip=10.0)
    source.mean, source.m2, source.count = 1.23, 4.56, 7
    save_checkpoint(tmp_path / "c.pt", layout=layout, rounds_completed=3, state={"rn": source.state_dict()})

    rounds, state = load_checkpoint(tmp_path / "c.pt", layout=layout, state=Plain())
    restored = RewardNormalizer()
    restored.load_state_dict(state["rn"])

    assert rounds == 3
    assert (restored.clip, restored.mean, restored.m2, restored.count) == (10.0, 1.23, 4.56, 7)


def test_a_state_missing_a_statistic_is_refused_naming_the_key() -> None:
    with pytest.raises(KeyError, match="'m2'"):
        RewardNormalizer().load_state_dict({"mean": 0.0, "count": 1})
