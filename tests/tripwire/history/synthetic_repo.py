"""A tiny trainer's history, built commit by commit in a throwaway git repository, one kind of step per commit.

Each step rewrites `train.py` from the base text with some edits; `STEPS` names what kind of step each commit is,
as the history walk must classify it. The scenario (`SCENARIO`, written beside the repository, never inside it)
reads the loop's JSONL events, takes a checkpoint at every optimizer step and at the model's construction, and
carries the one adapter the last commit needs (the model factory was renamed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

BASE = """import json

import torch
from torch import nn


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def train(steps=20, log="events.jsonl"):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1.0, 1.0, 64 * 8).reshape(64, 8)
    y = torch.sin(x.sum(1, keepdim=True))
    with open(log, "w") as events:
        for step in range(steps):
            loss = ((model(x) - y) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 5 == 4:
                events.write(json.dumps({"event_type": "STEP", "data": {"loss": loss.item()}}) + "\\n")
    return model
"""

# (subject, kind the walk must name, edits applied to the text of the commit before it)
STEPS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("base: a tiny trainer", "base", []),
    (
        "refactor: the loss in a function of its own",
        "bitwise refactor",
        [
            ("def train(", "def loss_of(model, x, y):\n    return ((model(x) - y) ** 2).mean()\n\n\ndef train("),
            ("            loss = ((model(x) - y) ** 2).mean()", "            loss = loss_of(model, x, y)"),
        ],
    ),
    (
        "perf: sum the features in two halves",
        "low-bit drift",
        [
            (
                "torch.sin(x.sum(1, keepdim=True))",
                "torch.sin(x[:, :3].sum(1, keepdim=True) + x[:, 3:].sum(1, keepdim=True))",
            )
        ],
    ),
    ("tune: learning rate 0.1 -> 0.11", "value change", [("lr=0.1)", "lr=0.11)")]),
    (
        "feat: stop early on a diverging loss",
        "syncs",
        [
            (
                "            optimizer.step()\n",
                "            optimizer.step()\n            if loss.item() > 1e6:\n                break\n",
            )
        ],
    ),
    (
        "telemetry: the step in every STEP event",
        "telemetry",
        [('{"loss": loss.item()}', '{"loss": loss.item(), "step": step}')],
    ),
    (
        "wip: half-renamed optimizer",
        "crash",
        [("            optimizer.zero_grad()", "            optimiser.zero_grad()")],
    ),
    (
        "fix: the optimizer's name",
        "bitwise refactor",
        [("            optimiser.zero_grad()", "            optimizer.zero_grad()")],
    ),
    (
        "refactor: make_model -> build_model (the scenario's adapter covers it)",
        "bitwise refactor",
        [("def make_model():", "def build_model():"), ("    model = make_model()", "    model = build_model()")],
    ),
]

SCENARIO = """from tripwire.scenario import Adapter, Checkpoint, Iteration, Region, Scenario

scenario = Scenario(
    name="toy-trainer",
    call="train:train",
    regions=[Region("train:train", "loop")],
    iteration=Iteration("torch.optim:SGD.step", at="end"),
    checkpoints=[
        Checkpoint("train:make_model", capture=("return",)),
        Checkpoint("torch.optim:SGD.step", capture=("self",), every=5),
    ],
    events="events.jsonl",
    adapters=[%s],
)
"""
ADAPTER = (
    'Adapter(when=lambda tree: "def build_model" in tree.read("train.py"), '
    'targets={"train:make_model": "train:build_model"})'
)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def init(repo: Path) -> None:
    """An empty repository at `repo` (created), with a committer of its own."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "tests@example.invalid")
    git(repo, "config", "user.name", "tripwire tests")


def build(repo: Path) -> list[str]:
    """The repository with one commit per step; returns the shas, oldest first."""
    init(repo)
    text, shas = BASE, []
    for subject, _, edits in STEPS:
        for old, new in edits:
            assert old in text, (subject, old)
            text = text.replace(old, new)
        (repo / "train.py").write_text(text, encoding="utf-8")
        git(repo, "add", "train.py")
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def write_scenario(folder: Path, *, adapter: bool = True) -> Path:
    """The scenario file in `folder`, beside a `random.py` and a `bisect.py` that must never be imported."""
    folder.mkdir(parents=True, exist_ok=True)
    for shadow in ("random.py", "bisect.py"):
        (folder / shadow).write_text('raise ImportError("the scenario folder shadowed the standard library")\n')
    path = folder / ("scenario.py" if adapter else "scenario_without_adapter.py")
    path.write_text(SCENARIO % (ADAPTER if adapter else ""), encoding="utf-8")
    return path
