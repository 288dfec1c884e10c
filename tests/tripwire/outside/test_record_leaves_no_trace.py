"""A recording leaves the process as it found it: after `record()` of a loop that compiles itself (the sync counter,
the compile counter, the vendor-op watch, the child watch and the settings guard all installed), a wide fingerprint
of process-wide state is what it was before. The loop first runs once without tripwire (its first imports and torch's
lazy set-up are the loop's doing, not a residue), then three recordings run between the two fingerprints.

Each entry was chosen because something installed during a recording could leave it changed: logger levels and
handlers (the compile counter's DEBUG), warning filters and the record of warnings shown once per line, trace and
profile functions, excepthooks, signal handlers, the environment, gc callbacks, the working folder, `sys.path` and the
import finders, multiprocessing's start and what it sends a spawned child (the child watch's and the vendor watch's
wrappers), torch's thread counts, determinism, default dtype, grad and anomaly modes, dispatcher kernels (the sync
counter's, the vendor watch's and the draw watch's overrides), the code of torch's seeding functions (watched while a
loop runs), torch function and dispatch mode stacks, live threads, open file descriptors and torch's own
attributes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

LOOPS = Path(__file__).resolve().parents[1] / "loops"

PROBE = r"""
import gc, json, logging, multiprocessing.process, multiprocessing.spawn, os, runpy, signal, sys, threading, warnings
from pathlib import Path

import torch

from tripwire.outside.record import record
from tripwire.scenario import load_scenario

# a level and a handler of the loop's own on dynamo's trace logger (torch leaves it at DEBUG, with a handler of its own
# when TORCH_TRACE is set): a compile counter must put the level back
logging.getLogger("torch.__trace").setLevel(logging.WARNING)
logging.getLogger("torch.__trace").addHandler(logging.NullHandler())


# torch's trace handler removes itself at the first trace record when TORCH_TRACE is unset (it never wrote anything);
# the compile counter lets records through the loop's WARNING, so that first record comes during a recording
LAZY = {"LazyTraceHandler"}


# a warning of the loop's, shown once per line (Python's default for a UserWarning): shown again only where something
# told `warnings` its filters changed, which clears every module's record of what it showed
SHOWN = []
warnings.showwarning = lambda message, *rest, **kwargs: SHOWN.append(str(message))


def loop_warning():
    warnings.warn("the loop's own", UserWarning)
    return SHOWN.count("the loop's own")


def state():
    manager = logging.root.manager
    return {
        "warnings shown once per line": loop_warning(),
        "loggers": {
            name: [logger.level, [type(h).__name__ for h in logger.handlers if type(h).__name__ not in LAZY],
                   logger.propagate, logger.disabled]
            for name, logger in manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
        },
        "root logger": [logging.root.level, [type(h).__name__ for h in logging.root.handlers]],
        "warnings": [repr(entry) for entry in warnings.filters],
        "trace": [repr(f) for f in (sys.gettrace(), sys.getprofile(), threading.gettrace(), threading.getprofile())],
        "hooks": [repr(h) for h in (sys.excepthook, threading.excepthook, sys.unraisablehook, sys.displayhook)],
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)},
        "environ": dict(os.environ),
        "gc": [len(gc.callbacks), gc.isenabled(), gc.get_threshold()],
        "cwd": os.getcwd(),
        "path": list(sys.path),
        "import finders": [repr(finder) for finder in sys.meta_path] + [repr(hook) for hook in sys.path_hooks],
        "multiprocessing": [
            repr(multiprocessing.spawn.get_preparation_data), repr(multiprocessing.process.BaseProcess.start),
        ],
        "torch": [
            torch.get_num_threads(), torch.get_num_interop_threads(), torch.are_deterministic_algorithms_enabled(),
            str(torch.get_default_dtype()), torch.is_grad_enabled(), torch.is_anomaly_enabled(),
            torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack(),
        ],
        "dispatch": {
            op: torch._C._dispatch_dump(op)
            for op in (
                "aten::sqrt", "aten::sqrt.out", "aten::nonzero", "aten::_local_scalar_dense", "aten::add.Tensor",
                "aten::uniform_", "aten::normal_", "aten::multinomial",
            )
        },
        "seeding code": [
            f.__code__.co_filename for f in (torch.random.manual_seed, torch.random.seed, torch.random.set_rng_state)
        ],
        "threads": sorted(thread.name for thread in threading.enumerate()),
        "descriptors": len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0,
        "torch attributes": sorted(name for name, value in vars(torch).items() if "tripwire" in repr(value)),
    }


scenario, root = load_scenario(sys.argv[1]), Path(sys.argv[2])
# the loop run once without tripwire: its first imports and torch's first-use set-up (dynamo drops torch's own trace
# handler at the first compile, sympy adds a warning filter) are the loop's doing, not a recording's
argv, sys.argv = sys.argv, [str(root / scenario.script), *scenario.argv]
runpy.run_path(str(root / scenario.script), run_name="__main__")
sys.argv = argv
before = state()
for _ in range(3):
    result = record(scenario, root)
    assert result.ok, result.cause
after = state()


def changes(before, after):
    changed = {}
    for key, was in before.items():
        now = after[key]
        if isinstance(was, dict):
            names = set(was) | set(now)
            now = {name: (was.get(name), now.get(name)) for name in names if was.get(name) != now.get(name)}
            if now:
                changed[key] = now
        elif was != now:
            changed[key] = [was, now]
    return changed


print("FINGERPRINT " + json.dumps(changes(before, after), default=str))
"""


def _changed(tmp_path: Path) -> dict[str, object]:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(LOOPS / "compiled_script.py", tree)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    command = [sys.executable, str(probe), str(LOOPS / "compiled_script_scenario.py"), str(tree)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("FINGERPRINT "))
    return dict(json.loads(line.removeprefix("FINGERPRINT ")))


@pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/self/fd")
def test_recordings_leave_every_process_wide_setting_as_they_found_it(tmp_path: Path) -> None:
    """Failed before the compile counter kept the trace logger's level from before the first counter: the loop's
    WARNING stayed DEBUG, because another handler (the loop's) was still on the logger."""
    assert _changed(tmp_path) == {}


WRAPPED_BY_TORCH = r"""
import json, sys
import torch
from tripwire.outside.record import record
from tripwire.scenario import Checkpoint, Scenario

own = torch.optim.Adamax.step  # no Adamax made yet in this process: torch has not wrapped it
step = Checkpoint("torch.optim:Adamax.step", capture=("self",))
scenario = Scenario(name="wrapped", script="loop.py", checkpoints=[step])
result = record(scenario, sys.argv[1])
step = torch.optim.Adamax.step
cells = [cell.cell_contents for cell in step.__closure__ or ()]
print("STATE " + json.dumps({
    "status": result.status + (f": {result.cause}" if result.status != "ok" else ""),
    "hooked": bool(getattr(step, "hooked", False)),
    "wraps own": own in cells and step.__wrapped__ is own,
    "tripwire left": [repr(value) for value in cells if "tripwire" in getattr(value, "__module__", "") or ""],
}))
"""


def test_a_wrapper_torch_puts_on_a_checkpointed_method_keeps_wrapping_the_original(tmp_path: Path) -> None:
    """torch's optimizer wraps its class's `step` for the profiler at the first optimizer made (`profile_hook_step`),
    during the recording: it wrapped the checkpoint's stand-in. After the recording torch's wrapper stays, as with no
    recording, around the original: no stand-in outlives it."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "loop.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 1)\noptimizer = torch.optim.Adamax(model.parameters())\n"
        "for _ in range(3):\n    optimizer.zero_grad()\n    model(torch.ones(1, 2)).sum().backward()\n"
        "    optimizer.step()\n",
        encoding="utf-8",
    )
    probe = tmp_path / "probe.py"
    probe.write_text(WRAPPED_BY_TORCH, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(probe), str(tree)], capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("STATE "))
    assert json.loads(line.removeprefix("STATE ")) == {
        "status": "ok",
        "hooked": True,
        "wraps own": True,
        "tripwire left": [],
    }
