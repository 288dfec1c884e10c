"""Crafted checkpoints on --resume (issue 36): a file in the right format whose fields hold the wrong types, shapes or
values is refused in one line naming the field, before any of it is used.

Without the check, such files ended in tracebacks mid-run, and one (an Adam moment of another shape and dtype) made
fused Adam write past its buffers: the process died of heap corruption ("free(): invalid size"). Every field of a
real checkpoint is replaced by each of a dozen hostile values; a refused one must name the field, an accepted one
must resume and train.
"""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from reliability_helpers import SMALL_POLICY, TINY, child_env

from esper.scripts import train
from esper.simic.training.checkpoint import PAYLOAD_SPEC, state_spec
from esper.simic.training.checkpoint_digest import DIGEST_KEY, content_digest
from esper.simic.training.checkpoint_schema import problem
from esper.simic.training.config import TrainingConfig
from esper.simic.training.wiring import build_policy_client
from run_helpers import replaced

RUN = ("ppo", "--task", "cifar_baseline", "--envs", "2", *TINY, *SMALL_POLICY, "--quiet", "--rounds", "2")

HOSTILE: dict[str, Any] = {
    "a string": "x",
    "None": None,
    "a list": [1],
    "a dict": {"a": 1},
    "a negative int": -3,
    "NaN": float("nan"),
    "a huge int": 10**30,
    "True": True,
    "a float64 vector": torch.zeros(3, dtype=torch.float64),
    "a meta tensor": torch.empty(2, device="meta"),
    "a sparse tensor": torch.zeros(2, 2).to_sparse(),
    "a scalar tensor": torch.tensor(1.0),
}

# Fields a run only records, or whose hostile value is still a valid one: accepted, and shown to resume below.
ACCEPTED = {
    r"state\.client\.agent\.config(\..*)?": "the agent's config is recorded, never used (the run keeps its own)",
    r"state\.client\.agent\.optimizer\.param_groups\[0\]\.(fused|foreach|capturable)": "replaced by this run's own",
    r"state\.client\.agent\.optimizer\.state\.\d+\.step": "a non-negative scalar step is a valid one",
    r"state\.client\.reward_normalizer\.mean": "any finite mean is valid",
    r"state\.trainer\.round_accuracies": "an empty or other history of accuracies is valid",
    r"state\.trainer\.events": "a path or None",
    r"state\.data\.dataset": "a name; compared with this run's data afterwards",
    r"state\.determinism\..*": "recorded; a resume under other settings is noted, never refused",
    r"(format|version|slot_ids\[0\]|task|controller)": "checked by value after the schema (not an esper checkpoint, "
    "another version, another layout)",
    r"digest": "any string; compared with the content after the schema (test_checkpoint_digest.py)",
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("crafted") / "good.pt"
    assert quiet_main(*RUN[:-1], "1", "--save", str(path))[0] == 0
    return path, torch.load(path, weights_only=True)


def sealed(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with its digest written again, as a crafter who knows the format would: what is tested here is the
    schema, past the digest (`test_checkpoint_digest.py` tests the digest)."""
    return {**payload, DIGEST_KEY: content_digest(payload)}


def quiet_main(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = train.main(list(argv))
    return code, err.getvalue().splitlines()


def field_paths(value: Any, where: str = "") -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(dotted name as the checkpoint check writes it, key path) of every field, the first two items of lists."""
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{where}.{key}" if where else str(key)
            yield name, (key,)
            for inner, keys in field_paths(item, name):
                yield inner, (key, *keys)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value[:2]):
            name = f"{where}[{index}]"
            yield name, (index,)
            for inner, keys in field_paths(item, name):
                yield inner, (index, *keys)


def test_every_hostile_field_is_refused_naming_it_or_is_one_a_run_can_use(saved: tuple[Path, dict[str, Any]]) -> None:
    _, payload = saved
    client = build_policy_client(TrainingConfig(lstm_hidden_dim=32), "ppo", 1, torch.device("cpu"))
    spec = state_spec(client.state_spec())
    assert problem(payload, PAYLOAD_SPEC) is None and problem(payload["state"], spec, "state") is None
    tried = refused = 0
    unexpected = []
    for name, keys in field_paths(payload):
        for label, hostile in HOSTILE.items():
            tried += 1
            mutated = replaced(payload, keys, hostile)
            found = problem(mutated, PAYLOAD_SPEC) or problem(mutated["state"], spec, "state")
            if found is None:
                if not any(re.fullmatch(pattern, name) for pattern in ACCEPTED):
                    unexpected.append(f"{name} = {label} accepted")
                continue
            refused += 1
            if "\n" in found:
                unexpected.append(f"{name} = {label}: not one line: {found!r}")
            parent = name
            while parent and not found.startswith(parent):  # the message names the field or a field above it
                parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            if not parent:
                unexpected.append(f"{name} = {label}: names another field: {found}")
    assert not unexpected, "\n".join(unexpected[:20])
    assert tried > 3000 and refused > 0.9 * tried, (tried, refused)


def accepted_cases(payload: dict[str, Any]) -> Iterator[tuple[str, tuple[Any, ...], str, Any]]:
    """One accepted mutation per (field pattern, hostile value): the ones to show resuming."""
    client = build_policy_client(TrainingConfig(lstm_hidden_dim=32), "ppo", 1, torch.device("cpu"))
    spec = state_spec(client.state_spec())
    seen = set()
    for name, keys in field_paths(payload):
        pattern = next((p for p in ACCEPTED if re.fullmatch(p, name)), None)
        if pattern is None or pattern.startswith("(format"):  # refused by value after the schema: tested elsewhere
            continue
        for label, hostile in HOSTILE.items():
            mutated = replaced(payload, keys, hostile)
            if (pattern, label) in seen or problem(mutated["state"], spec, "state") is not None:
                continue
            seen.add((pattern, label))
            yield name, keys, label, hostile


def test_each_accepted_kind_of_field_resumes_and_trains_or_is_refused_by_value(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """...or, where the value itself is checked later (the data signature), is refused in one line."""
    _, payload = saved
    cases = list(accepted_cases(payload))
    failed, trained = [], 0
    for name, keys, label, hostile in cases:
        target = tmp_path / "accepted.pt"
        torch.save(sealed(replaced(payload, keys, hostile)), target)
        code, lines = quiet_main(*RUN, "--resume", str(target))
        trained += code == 0
        if not (code == 0 or (code == 2 and len(lines) == 1)) or any("Traceback" in line for line in lines):
            failed.append(f"{name} = {label}: exit {code}: {lines[-3:]}")
    assert not failed, "\n".join(failed)
    assert trained >= 10, trained


@pytest.mark.parametrize(
    ("keys", "hostile", "message"),
    [
        (
            ("state", "client", "agent", "optimizer", "state", 1, "exp_avg"),
            torch.zeros(3, dtype=torch.float64),
            "state.client.agent.optimizer.state.1.exp_avg: a float64 tensor of shape (3,), expected a dense "
            "float32 tensor of shape (512, 58)",
        ),
        (
            ("state", "client", "agent", "optimizer", "param_groups", 0, "amsgrad"),
            True,
            "state.client.agent.optimizer.param_groups[0].amsgrad: differs from this run's False",
        ),
        (("rounds_completed",), "3", "rounds_completed: a str, expected an int"),
        (("state", "client", "generator"), torch.zeros(5056).to_sparse(), "state.client.generator: a sparse_coo"),
        (("state", "trainer", "round_accuracies", 0), float("nan"), "expected a finite number"),
        (("state", "trainer", "events"), 7, "state.trainer.events: an int, expected a str"),
    ],
)
def test_a_crafted_checkpoint_ends_in_one_line_exit_2_from_the_command_line(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path, keys: tuple[Any, ...], hostile: Any, message: str
) -> None:
    """In a child process: before the check, the first of these corrupted the heap and killed the interpreter."""
    _, payload = saved
    target = tmp_path / "crafted.pt"
    torch.save(sealed(replaced(payload, keys, hostile)), target)
    result = subprocess.run(
        [sys.executable, "-m", "esper.scripts.train", *RUN, "--resume", str(target)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
        check=False,
    )
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1, (result.returncode, result.stderr[-2000:])
    assert lines[0].startswith(f"train: error: checkpoint {target} does not hold what this trainer saves (")
    assert message in lines[0]
    assert lines[0].endswith("resume from a file written by --save, or start without --resume")


def test_a_checkpoint_from_a_run_with_other_adam_kernels_resumes_with_this_runs_own(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """fused / foreach / capturable choose a kernel (a checkpoint may come from another device): the resumed
    optimizer keeps the resuming run's."""
    _, payload = saved
    group = ("state", "client", "agent", "optimizer", "param_groups", 0)
    other = replaced(replaced(payload, (*group, "fused"), None), (*group, "foreach"), True)
    client = build_policy_client(TrainingConfig(lstm_hidden_dim=32), "ppo", 1, torch.device("cpu"))
    own = {flag: client.agent.optimizer.param_groups[0][flag] for flag in ("fused", "foreach", "capturable")}
    client.load_state_dict(other["state"]["client"])
    assert {flag: client.agent.optimizer.param_groups[0][flag] for flag in own} == own
    target = tmp_path / "other_kernels.pt"
    torch.save(other, target)
    assert quiet_main(*RUN, "--resume", str(target))[0] == 0
