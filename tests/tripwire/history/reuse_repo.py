"""A history where most commits change nothing the loop reads, and a few change it in ways only a closure sees.

The loop (`train.py`) imports `helpers` from the tree's root and reads `scale.txt`; `README.md` and
`tools/unused.py` are never read. `STEPS` says, for each commit, whether its result may be another commit's
(`reused_from`, an index into the list) and which kind the walk must name, reused or run.
"""

from __future__ import annotations

from pathlib import Path

from synthetic_repo import git, init

TRAIN = """import torch

import helpers


def train():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with open("scale.txt") as handle:
        scale = float(handle.read())
    x = torch.linspace(-1.0, 1.0, 32).reshape(8, 4) * scale
    for _ in range(5):
        loss = helpers.loss(model(x), x.sum(1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model
"""

HELPERS = "def loss(prediction, target):\n    return ((prediction - target) ** 2).mean()\n"
SHADOW = "def loss(prediction, target):\n    return (prediction - target).abs().mean()\n"
SPAWN = TRAIN.replace("def train():\n", "def train():\n    import subprocess\n    subprocess.run(['true'])\n")

# (subject, files written (None: removed), the index of the commit whose result stands for this one or None, kind)
STEPS: list[tuple[str, dict[str, str | None], int | None, str]] = [
    (
        "base",
        {
            "train.py": TRAIN,
            "helpers.py": HELPERS,
            "scale.txt": "1.0\n",
            "README.md": "a\n",
            "tools/unused.py": "x = 1\n",
        },
        None,
        "base",
    ),
    ("docs: the README", {"README.md": "b\n"}, 0, "bitwise refactor"),
    ("tools: a file nothing imports", {"tools/unused.py": "x = 2\n"}, 0, "bitwise refactor"),
    ("helpers: the loss, reformatted", {"helpers.py": HELPERS.replace("** 2", "**2")}, None, "bitwise refactor"),
    ("data: the scale the loop reads", {"scale.txt": "2.0\n"}, None, "value change"),
    # a package beside helpers.py: `import helpers` now finds it first, though no file the last run read changed
    ("shadow: a helpers package", {"helpers/__init__.py": SHADOW}, None, "value change"),
    ("docs: the README again", {"README.md": "c\n"}, 5, "bitwise refactor"),
    ("spawn: the loop starts a process", {"train.py": SPAWN}, None, "bitwise refactor"),
    ("docs: after a run that started a process", {"README.md": "d\n"}, None, "bitwise refactor"),
]

SCENARIO = """from tripwire.scenario import Checkpoint, Scenario

scenario = Scenario(name="reuse-loop", call="train:train", cwd="root", checkpoints=[Checkpoint("train:train")])
"""


def build(repo: Path) -> list[str]:
    """The repository, one commit per step; the shas, oldest first."""
    init(repo)
    shas = []
    for subject, files, _, _ in STEPS:
        for name, text in files.items():
            path = repo / name
            if text is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas
