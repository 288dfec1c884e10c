"""A checkpoint carries a digest of its content, written by --save and checked by --resume: a flipped bit in a file
whose zip CRCs were written after the flip (a valid value everywhere else) is refused in one line, exit 2, the file
untouched. A checkpoint from before digests resumes with a one-line note; `--save ck.pt/` is refused before training.

Before the digest, three fuzzed checkpoints with a flipped bit in tensor data, saved again, resumed with exit 0.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from reliability_helpers import SMALL_POLICY, TINY

from esper.scripts import train
from esper.simic.training import checkpoint_digest
from esper.simic.training.checkpoint import PAYLOAD_SPEC, state_spec
from esper.simic.training.checkpoint_digest import DIGEST_KEY, content_digest
from esper.simic.training.checkpoint_schema import problem
from esper.simic.training.config import TrainingConfig
from esper.simic.training.wiring import build_policy_client
from run_helpers import replaced
from tripwire.sync.counter import SyncCounter

RUN = ("ppo", "--task", "cifar_baseline", "--envs", "2", *TINY, *SMALL_POLICY, "--quiet", "--rounds", "2")
AGENT = ("state", "client", "agent")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("digest") / "good.pt"
    assert quiet_main(*RUN[:-1], "1", "--save", str(path))[0] == 0
    return path, torch.load(path, weights_only=True)


def quiet_main(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = train.main(list(argv))
    return code, err.getvalue().splitlines()


def flipped(tensor: torch.Tensor, index: int = 0, bit: int = 0) -> torch.Tensor:
    """`tensor` with one bit of one element flipped (bit 0 of a float32: the last mantissa bit, a valid value)."""
    copy = tensor.clone()
    bits = copy.reshape(-1).view(torch.int32 if copy.element_size() == 4 else torch.uint8)
    bits[index] ^= 1 << bit
    return copy


def first_weight(payload: dict[str, Any]) -> str:
    return next(iter(payload["state"]["client"]["agent"]["policy"]))


@pytest.mark.parametrize(
    "where",
    ["policy weight", "Adam moment", "sampling generator", "round accuracy", "rounds completed"],
)
def test_a_flipped_bit_saved_again_with_valid_crcs_is_refused_in_one_line_and_left_untouched(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path, where: str
) -> None:
    _, payload = saved
    weight = first_weight(payload)
    keys, value = {
        "policy weight": ((*AGENT, "policy", weight), None),
        "Adam moment": ((*AGENT, "optimizer", "state", 0, "exp_avg"), None),
        "sampling generator": (("state", "client", "generator"), None),
        "round accuracy": (("state", "trainer", "round_accuracies", 0), 12.5),
        "rounds completed": (("rounds_completed",), 0),  # 1 -> 0: a valid count
    }[where]
    holder: Any = payload
    for key in keys:
        holder = holder[key]
    damaged = replaced(payload, keys, flipped(holder) if value is None else value)
    target = tmp_path / "flipped.pt"
    torch.save(damaged, target)
    with zipfile.ZipFile(target) as archive:
        assert archive.testzip() is None  # the zip CRCs pass: they were written after the flip
    client = build_policy_client(TrainingConfig(lstm_hidden_dim=32), "ppo", 1, torch.device("cpu"))
    assert problem(damaged, PAYLOAD_SPEC) is None and problem(damaged["state"], state_spec(client.state_spec())) is None
    before = target.read_bytes()
    code, lines = quiet_main(*RUN, "--resume", str(target), "--save", str(target))
    assert code == 2 and len(lines) == 1, (code, lines)
    assert lines[0].startswith(f"train: error: checkpoint {target} does not hold what --save wrote: its content no ")
    assert target.read_bytes() == before


def test_the_checkpoint_as_saved_resumes(saved: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """The control: the same file, saved again unchanged (the digest travels with it), trains on."""
    _, payload = saved
    target = tmp_path / "same.pt"
    torch.save(payload, target)
    assert quiet_main(*RUN, "--resume", str(target)) == (0, [])


def test_a_checkpoint_without_a_digest_resumes_with_a_one_line_note(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    _, payload = saved
    old = {key: value for key, value in payload.items() if key != DIGEST_KEY}
    target = tmp_path / "old.pt"
    torch.save(old, target)
    code, lines = quiet_main(*RUN, "--resume", str(target))
    assert code == 0 and lines == [
        f"train: note: checkpoint {target} records no digest (written by an older esper): resuming without checking "
        "that its content is what --save wrote (silent corruption)"
    ]


def test_the_digest_covers_every_value_a_resume_reads_but_not_the_kernel_flags(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    _, payload = saved
    digest = payload[DIGEST_KEY]
    assert digest == content_digest(payload) and digest.startswith("sha256:")
    group = (*AGENT, "optimizer", "param_groups", 0)
    other_device = replaced(replaced(payload, (*group, "fused"), None), (*group, "foreach"), True)
    assert content_digest(other_device) == digest  # the resuming run's own flags replace them
    assert content_digest(replaced(payload, (*group, "lr"), 3e-4 + 1e-12)) != digest
    assert content_digest(replaced(payload, ("state", "trainer", "events"), "other/events.jsonl")) != digest


def test_computing_the_digest_adds_no_sync_to_the_runs_accounting(saved: tuple[Path, dict[str, Any]]) -> None:
    """Tensor bytes are read in place (DLPack): saving and resuming keep every sync budget as it was."""
    _, payload = saved
    with SyncCounter() as counter:
        content_digest(payload)
    assert list(counter.events) == []


def test_save_into_a_folder_name_is_refused_before_training(tmp_path: Path) -> None:
    target = tmp_path / "ck.pt"
    code, lines = quiet_main(*RUN, "--save", f"{target}/")
    assert code == 2 and lines == [
        f"train: error: --save {target}/ ends in '/', so it names a folder: pass a file path such as "
        f"{target / 'run.ckpt'}, or {target} without the '/'"
    ]
    assert not target.exists()  # the run's checkpoint would have gone to ck.pt while the line named ck.pt/


def test_a_host_copy_gives_the_digest_a_resume_computes(saved: tuple[Path, dict[str, Any]]) -> None:
    """A GPU run's state is digested from its one host copy (`host_copy`, through torch.save and back, as a resume
    reads it): the same digest. Shown on the CPU tensors of a saved checkpoint sent down the same path."""
    _, payload = saved
    assert content_digest(checkpoint_digest.host_copy(payload)) == payload[DIGEST_KEY]


class _OnCuda(torch.Tensor):
    """A host tensor that says it is on a GPU, as a device tensor of a GPU run would (no GPU here)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", 0)


def test_a_device_tensor_is_refused_not_digested_as_an_error_name() -> None:
    """DLPack cannot hand numpy a device tensor: before the check its bytes were hashed as `<BufferError>`, so two
    different device states had one digest."""
    on_gpu = torch.zeros(3).as_subclass(_OnCuda)
    with pytest.raises(ValueError, match=r"content_digest reads host memory, not cuda:0: digest host_copy\(payload\)"):
        content_digest({"state": {"x": on_gpu}})


def test_saving_copies_each_device_storage_to_the_host_once_and_the_cpu_run_counts_each(tmp_path: Path) -> None:
    """On a GPU, torch.save copies each device storage to the host, one wait each. The state is copied once
    (`host_copy`), then digested and written from host memory: the CPU run counts one `save` per storage the GPU run
    copies, all at `host_copy`, none at the write (before, a GPU run saved twice: once to digest, once to write, and
    the CPU run counted only the second)."""
    target = tmp_path / "ck.pt"
    with SyncCounter() as counter:
        assert quiet_main(*RUN[:-1], "1", "--save", str(target))[0] == 0
    saves = [event for event in counter.events if event.kind == "save"]
    assert {(event.site.split(":")[0], event.function) for event in saves} == {
        ("src/esper/simic/training/checkpoint_digest.py", "host_copy")
    }
    payload = torch.load(target, weights_only=True)
    client = payload["state"]["client"]
    optimizer = client["agent"]["optimizer"]
    fused = optimizer["param_groups"][0]["fused"]  # a fused Adam keeps its step counters on the device
    moments = [tensor for per in optimizer["state"].values() for key, tensor in per.items() if key != "step" or fused]
    policy = [value for value in client["agent"]["policy"].values() if isinstance(value, torch.Tensor)]
    normalizer = [value for value in client["obs_normalizer"].values() if isinstance(value, torch.Tensor)]
    # the sampling generator's state is host memory on every device: not a wait
    assert len(saves) == len(policy) + len(moments) + len(normalizer) > 100
