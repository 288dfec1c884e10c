"""The refactor-hazard catalogue: each hazard is a small text patch to the source tree and the guardrail for it.

A hazard is applied to a temporary copy of the repository (never to tracked files) by plain text replacement;
every anchor must occur exactly once, so a refactor that moves the code makes the catalogue fail loudly
instead of silently testing nothing. `runner.py` applies each hazard, runs only the guardrails it names, and
checks which of them fired.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Guardrail names, as they appear in the table.
TELEMETRY = "telemetry counts"
SYNC_BUDGET = "sync budget"
TRAJECTORY = "trajectory"
IMPORTS = "import contracts"
BENCH = "bench A/B"
STATIC_AUDIT = "static sync audit"
TELEMETRY_PAYLOAD = "telemetry payload"
CLOCK = "telemetry clock"  # a wall-clock field (duration, rate) against the run's wall time: its unit
CONFIG = "config golden"
LOADS_WITHOUT = "loads without"
COMPILE_BUDGET = "compile budget"
DETERMINISM = "determinism settings"  # a setting the run changed outside the trainer's determinism module
EXERCISED = "changed-line coverage"  # a changed line no scenario ran (`nox -s guardrails -- --against REF`)
NOTHING = "(nothing)"  # a control: a change that changes nothing, which no guardrail may fail
SCENARIO_GUARDRAILS = (TELEMETRY, SYNC_BUDGET, TRAJECTORY, TELEMETRY_PAYLOAD, COMPILE_BUDGET, DETERMINISM, CLOCK)
# Guardrails that necessarily fire beside another: a changed event stream (counts, order, schema) or changed
# numerics (trajectory) change the digests of the event payloads too, so the payload golden firing with them is
# expected, never the wrong guardrail; beside a sync-budget hazard it is (an extra `.item()` changes no value).
IMPLIED = {TELEMETRY: (TELEMETRY_PAYLOAD,), TRAJECTORY: (TELEMETRY_PAYLOAD,)}


class AnchorError(ValueError):
    """A hazard's anchor is missing or ambiguous in the tree it is applied to."""


@dataclass(frozen=True)
class Edit:
    """Replace the single occurrence of `anchor` in `path` (relative to the tree root) with `replacement`."""

    path: str
    anchor: str
    replacement: str


@dataclass(frozen=True)
class Move:
    """Move the top-level function `name` verbatim from `path` to a new module `to` (which gets `path`'s imports),
    and re-export it from `path` where it was: the refactor plans' step, a move that is only a move."""

    path: str
    name: str
    to: str

    @property
    def module(self) -> str:
        return ".".join(Path(self.to).with_suffix("").parts[1:])  # src/esper/x/y.py -> esper.x.y


@dataclass(frozen=True)
class Hazard:
    """One refactor mistake, the guardrail that must catch it, and the ones allowed to fire beside it.

    `run` names the guardrail subset to execute: a scenario name (its telemetry, sync-budget and trajectory
    checks), `imports` (lint-imports), `static` (the static sync audit of the modules the loop reaches), `config`
    (the effective configuration values against the clean copy's), `loads-without` (every module promised to load
    without torch, or another package, imported in a fresh interpreter) or `bench` (the benchmark A/B of
    `bench_filter`); several joined by `+` (`static+a_baseline`) all run. A control (`expected` NOTHING) is a
    change that changes nothing: it passes when nothing fires.
    """

    name: str
    description: str
    edits: tuple[Edit | Move, ...]
    expected: str
    run: str
    tolerated: tuple[str, ...] = ()
    bench_filter: str = ""

    @property
    def control(self) -> bool:
        return self.expected == NOTHING

    @property
    def runs(self) -> tuple[str, ...]:
        return tuple(self.run.split("+"))


def _move(root: Path, move: Move) -> None:
    """Apply a `Move` under `root` (module docstring of `Move`)."""
    source_path = root / move.path
    text = source_path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == move.name]
    if len(found) != 1:
        raise AnchorError(
            f"{move.path}: top-level function {move.name!r} found {len(found)} times (need exactly 1); "
            "update the hazard in tests/hazards/catalogue.py to the refactored code"
        )
    lines = text.splitlines(keepends=True)
    node = found[0]
    start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
    function = "".join(lines[start : node.end_lineno])
    imports = [
        ast.get_source_segment(text, statement) or ""
        for statement in tree.body
        if isinstance(statement, ast.Import)
        or (isinstance(statement, ast.ImportFrom) and statement.module != "__future__")
    ]
    header = f'"""`{move.name}`, moved here from {move.path}."""\n\nfrom __future__ import annotations\n\n'
    (root / move.to).write_text(header + "\n".join(imports) + "\n\n\n" + function, encoding="utf-8")
    re_export = f"from {move.module} import {move.name}  # noqa: E402  (moved; re-exported where it was)\n"
    source_path.write_text("".join([*lines[:start], re_export, *lines[node.end_lineno :]]), encoding="utf-8")


def apply_edits(root: Path, edits: tuple[Edit | Move, ...]) -> None:
    """Apply every edit under `root`; raises AnchorError naming the file when an anchor is not found exactly once."""
    for edit in edits:
        if isinstance(edit, Move):
            _move(root, edit)
            continue
        target = root / edit.path
        text = target.read_text(encoding="utf-8")
        found = text.count(edit.anchor)
        if found != 1:
            raise AnchorError(
                f"{edit.path}: anchor {edit.anchor.strip()[:60]!r} found {found} times (need exactly 1); "
                "update the hazard in tests/hazards/catalogue.py to the refactored code"
            )
        target.write_text(text.replace(edit.anchor, edit.replacement), encoding="utf-8")


ENGINE = "src/esper/tolaria/engine.py"
TRAINER = "src/esper/simic/training/trainer.py"
_PROBE_LINE = (
    "        if parts.probe is not None:  # after the epoch's one transfer, so a probe adds no sync inside the pass\n"
)
CLIENT = "src/esper/simic/training/policy_client.py"
SHARDING = "src/esper/simic/training/sharding.py"
BUFFER = "src/esper/simic/agent/buffer.py"
WIRING = "src/esper/simic/training/wiring.py"
OBSERVATIONS = "src/esper/simic/training/observations.py"
POLICY = "src/esper/tamiyo/policy.py"
FORWARD = "    def forward(self, obs: torch.Tensor, blueprint_idx: torch.Tensor, hidden: Hidden) -> NetworkOutput:"
HOST_COPY = '        self.values[:, step].copy_(values.to(torch.device("cpu")))\n'

HAZARDS: tuple[Hazard, ...] = (
    Hazard(
        "per_env_mask_uploads",
        "the action masks uploaded one env's row at a time (views of the host batch): K uploads per mask and step on a "
        "GPU where there was one; a CPU run moves nothing, and the gate used to count none of either",
        (
            Edit(
                OBSERVATIONS,
                "    device_masks = {key: value.to(device) for key, value in host_masks.items()}\n",
                "    device_masks = {\n"
                "        key: torch.cat([row.to(device) for row in value.split(1)])"
                " for key, value in host_masks.items()\n"
                "    }\n",
            ),
        ),
        SYNC_BUDGET,
        "b_lifecycle",
    ),
    Hazard(
        "cudnn_benchmark_in_setup",
        "`torch.backends.cudnn.benchmark = True` added to the run's set-up for speed: a no-op on the CPU the gate runs "
        "on, autotuned kernels that differ run to run on every GPU",
        (
            Edit(
                WIRING,
                "    determinism = make_reproducible(devices, config.deterministic)  # before any CUDA kernel runs\n",
                "    determinism = make_reproducible(devices, config.deterministic)  # before any CUDA kernel runs\n"
                "    torch.backends.cudnn.benchmark = True  # let cuDNN pick the fastest convolutions\n",
            ),
        ),
        DETERMINISM,
        "a_baseline",
    ),
    Hazard(
        "round_time_in_milliseconds",
        "the round's train time handed on in milliseconds, into `train_time_s` (the `/ 1000.0` lost when the timer "
        "moved): the payload golden leaves wall-clock fields out, so nothing the gate kept changed",
        (
            Edit(
                TRAINER,
                "        summary = self.summarize(outcomes, round_idx, sum(epoch_ms) / 1000.0)\n",
                "        summary = self.summarize(outcomes, round_idx, sum(epoch_ms))\n",
            ),
        ),
        CLOCK,
        "a_baseline",
    ),
    Hazard(
        "update_time_in_seconds",
        "the PPO update's duration written in seconds into `update_time_ms` (the `* 1000.0` dropped): a smaller "
        "number no bound on the run's length can catch, only its scale against the run's wall time",
        (
            Edit(
                "src/esper/simic/agent/ppo.py",
                "            update_time_ms=(time.perf_counter() - start) * 1000.0,\n",
                "            update_time_ms=time.perf_counter() - start,\n",
            ),
        ),
        CLOCK,
        "a_baseline",
    ),
    Hazard(
        "item_in_env_loop",
        "extra `.item()` per env in the train pass (a debug read left in)",
        (
            Edit(
                ENGINE,
                "                    self.train_batch(env, acc, inputs, targets)\n",
                "                    self.train_batch(env, acc, inputs, targets)\n"
                "                    acc.stats[0].item()\n",
            ),
        ),
        SYNC_BUDGET,
        "a_baseline",
    ),
    Hazard(
        "item_on_a_thread_the_loop_starts",
        "a per-epoch weight-norm log moved onto a thread the trainer starts (off the main thread, still a sync)",
        (
            Edit(
                TRAINER,
                _PROBE_LINE,
                "        import threading\n\n"
                "        log = threading.Thread(target=lambda: [env.model.host_parameters()[0].norm().item()"
                " for env in envs])\n"
                "        log.start()\n"
                "        log.join()\n" + _PROBE_LINE,
            ),
        ),
        SYNC_BUDGET,
        "a_baseline",
    ),
    Hazard(
        "cpu_per_env_in_actions",
        "extra `.cpu()` per env in action selection",
        (
            Edit(
                CLIENT,
                "            rows = packed.cpu().tolist()\n",
                "            rows = packed.cpu().tolist()\n"
                "            _per_env = [packed[i].cpu() for i in range(packed.shape[0])]\n",
            ),
        ),
        SYNC_BUDGET,
        "a_baseline",
    ),
    Hazard(
        "env_order_reversed",
        "the per-env loop of the epoch walks the envs in reverse",
        (
            Edit(
                TRAINER,
                "        for env, rollback in zip(envs, rolled_back):\n",
                "        for env, rollback in reversed(list(zip(envs, rolled_back))):\n",
            ),
        ),
        TRAJECTORY,
        "a_two_envs",
        tolerated=(TELEMETRY,),
    ),
    Hazard(
        "rng_draw_moved",
        "the synthetic data's phase draw moved before its period draw (same generator)",
        (
            Edit(
                "src/esper/data/synthetic.py",
                "    period = torch.empty(n).uniform_(*PERIOD_RANGE, generator=g)\n"
                "    phase = torch.empty(n).uniform_(0.0, 2 * math.pi, generator=g)\n",
                "    phase = torch.empty(n).uniform_(0.0, 2 * math.pi, generator=g)\n"
                "    period = torch.empty(n).uniform_(*PERIOD_RANGE, generator=g)\n",
            ),
        ),
        TRAJECTORY,
        "a_baseline",
        tolerated=(TELEMETRY,),
    ),
    Hazard(
        "event_dropped",
        "the last env's EPISODE_OUTCOME is dropped (off-by-one in the emit loop)",
        (
            Edit(
                TRAINER,
                "        for env in envs:\n            emitters.emit_episode_outcome(hub, env, round_idx)\n",
                "        for env in envs[:-1]:\n            emitters.emit_episode_outcome(hub, env, round_idx)\n",
            ),
        ),
        TELEMETRY,
        "a_baseline",
    ),
    Hazard(
        "event_emitted_twice",
        "EPOCH_COMPLETED emitted twice per env per epoch (old call left after a move)",
        (
            Edit(
                TRAINER,
                "            emitters.emit_epoch_completed(parts.hub, env, round_idx, epoch)\n",
                "            emitters.emit_epoch_completed(parts.hub, env, round_idx, epoch)\n"
                "            emitters.emit_epoch_completed(parts.hub, env, round_idx, epoch)\n",
            ),
        ),
        TELEMETRY,
        "a_baseline",
    ),
    Hazard(
        "all_reduce_per_env",
        "an extra all-reduce per env in the epoch loop of a sharded run (a debugging cross-rank check left in)",
        (
            Edit(
                TRAINER,
                "            env.model.step_epoch()\n",
                "            env.model.step_epoch()\n"
                "            if torch.distributed.is_initialized():\n"
                "                torch.distributed.all_reduce(torch.zeros(1))\n",
            ),
        ),
        SYNC_BUDGET,
        "e_distributed",
    ),
    Hazard(
        "barrier_from_a_new_caller",
        "the trainer calls the shard's existing barrier helper once more per round (a new caller, not a new helper)",
        (
            Edit(
                TRAINER,
                "        self.shard.check_replicas(self.parts.policy.state_dict, round_idx)\n",
                "        self.shard.check_replicas(self.parts.policy.state_dict, round_idx)\n"
                "        self.shard.barrier()  # wait for every rank before the next round\n",
            ),
        ),
        SYNC_BUDGET,
        "e_distributed",
    ),
    Hazard(
        "import_back_into_vectorized",
        "action_execution.py imports simic.training.vectorized (the split grows back)",
        (
            Edit(
                "src/esper/simic/training/action_execution.py",
                "\nfrom __future__ import annotations\n",
                "\nfrom __future__ import annotations\n\nimport esper.simic.training.vectorized  # noqa: F401\n",
            ),
        ),
        IMPORTS,
        "imports",
    ),
    Hazard(
        "leyline_module_imports_torch",
        "esper/leyline/seeding.py (not imported by the package init) imports torch at module level",
        (
            Edit(
                "src/esper/leyline/seeding.py",
                "\nimport hashlib\n",
                "\nimport hashlib\n\nimport torch  # noqa: F401\n",
            ),
        ),
        IMPORTS,
        "imports",
    ),
    Hazard(
        "device_sync_behind_is_cuda",
        "a torch.cuda.synchronize() behind `if ... is_cuda:` in the train pass (never runs on a CPU machine)",
        (
            Edit(
                ENGINE,
                "                    self.train_batch(env, acc, inputs, targets)\n",
                "                    self.train_batch(env, acc, inputs, targets)\n"
                "                    if inputs.is_cuda:  # a debugging wait left in: never runs on a CPU machine\n"
                "                        torch.cuda.synchronize()\n",
            ),
        ),
        STATIC_AUDIT,
        "static",
    ),
    Hazard(
        "host_copy_in_rollout_buffer",
        'a blocking `.to(torch.device("cpu"))` of the values once per epoch in the rollout buffer (a GPU stall)',
        (Edit(BUFFER, "        self.values[:, step].copy_(values)\n", HOST_COPY),),
        SYNC_BUDGET,
        "a_baseline",
    ),
    Hazard(
        "host_copy_in_rollout_buffer_static",
        "the same host copy, for the static audit: the buffer is audited because the loop reaches it, not listed",
        (Edit(BUFFER, "        self.values[:, step].copy_(values)\n", HOST_COPY),),
        STATIC_AUDIT,
        "static",
    ),
    Hazard(
        "default_changed_under_presets",
        "TrainingConfig's entropy_coef default 0.05 -> 0.04 (every PPO preset overrides it, so no scenario runs it)",
        (
            Edit(
                "src/esper/simic/training/config.py",
                '    entropy_coef: float = option(0.05, "entropy bonus weight", "ppo", minimum=0.0)\n',
                '    entropy_coef: float = option(0.04, "entropy bonus weight", "ppo", minimum=0.0)\n',
            ),
        ),
        CONFIG,
        "config",
    ),
    Hazard(
        "task_spec_changed",
        "the built-in task cifar_scale's n_blocks 5 -> 4 in the module-level TASKS literal (it runs at import, so "
        "coverage calls the line seen; no scenario trains that task)",
        (Edit("src/esper/leyline/tasks.py", "            n_blocks=5,\n", "            n_blocks=4,\n"),),
        CONFIG,
        "config",
    ),
    Hazard(
        "torch_free_promise_worded_otherwise",
        '`import torch` added to the sync-budget reader, whose docstring words its promise as no check reads it ("it '
        'needs nothing of the tensor library") and which no declared module imports: every declared promise holds',
        (
            Edit(
                "src/tripwire/sync/budget.py",
                '"""Sync budgets: committed per-region sync counts, checked against a `SyncCounter`\'s counts.\n',
                '"""Sync budgets: committed per-region sync counts, checked against a `SyncCounter`\'s counts '
                "(it needs nothing of the tensor library).\n",
            ),
            Edit(
                "src/tripwire/sync/budget.py",
                "from __future__ import annotations\n\nimport json\n",
                "from __future__ import annotations\n\nimport json\n\nimport torch  # noqa: F401\n",
            ),
        ),
        LOADS_WITHOUT,
        "loads-without",
    ),
    Hazard(
        "torch_imported_by_config",
        "`import torch` at the top of the training config module, whose docstring promises it loads without torch",
        (
            Edit(
                "src/esper/simic/training/config.py",
                "import dataclasses\n",
                "import dataclasses\n\nimport torch  # noqa: F401  (a convenience import left in)\n",
            ),
        ),
        LOADS_WITHOUT,
        "loads-without",
    ),
    Hazard(
        "reward_constant_1pct",
        "germinate_cost changed by 1 % (-0.02 -> -0.0202)",
        (
            Edit(
                "src/esper/simic/rewards/config.py",
                "germinate_cost: float = -0.02\n",
                "germinate_cost: float = -0.0202\n",
            ),
        ),
        TRAJECTORY,
        "a_baseline",
    ),
    Hazard(
        "closure_stale_loop_variable",
        "deferred episode-outcome emitters are lambdas capturing the loop variable (all report the last env)",
        (
            Edit(
                TRAINER,
                "        for env in envs:\n            emitters.emit_episode_outcome(hub, env, round_idx)\n",
                "        pending = [lambda: emitters.emit_episode_outcome(hub, env, round_idx) for env in envs]\n"
                "        for emit_outcome in pending:\n            emit_outcome()\n",
            ),
        ),
        TELEMETRY,
        "a_two_envs",
    ),
    Hazard(
        "reward_normalizer_updated_twice",
        "the reward normalizer absorbs each step's rewards twice (an update left behind when record() moved)",
        (
            Edit(
                CLIENT,
                "        normalized = [self.reward_normalizer.update_and_normalize(r) for r in rewards]\n",
                "        for r in rewards:\n"
                "            self.reward_normalizer.update(r)\n"
                "        normalized = [self.reward_normalizer.update_and_normalize(r) for r in rewards]\n",
            ),
        ),
        TRAJECTORY,
        "a_baseline",
        tolerated=(TELEMETRY,),
    ),
    Hazard(
        "payload_field_renamed",
        "EPOCH_COMPLETED's `val_loss` payload field renamed `validation_loss` (every count unchanged)",
        (
            Edit(
                "src/esper/simic/training/emitters.py",
                '            "val_loss": env.val_loss,\n',
                '            "validation_loss": env.val_loss,\n',
            ),
        ),
        TELEMETRY,
        "a_baseline",
    ),
    Hazard(
        "compile_disable_dropped_in_a_move",
        "the LSTM step's `torch.compiler.disable` left behind (a move that copied the body, not the decorator)",
        (
            Edit(
                POLICY,
                "    @torch.compiler.disable  # type: ignore[untyped-decorator]  # torch's decorator is untyped\n"
                "    def _recurrent(",
                "    def _recurrent(",
            ),
        ),
        COMPILE_BUDGET,
        "f_compiled",
    ),
    Hazard(
        "timer_in_compiled_forward",
        "a wall-clock timer read inside the compiled forward (a graph break, no sync, no value changed)",
        (
            Edit(POLICY, "import itertools\n", "import itertools\nimport time\n"),
            Edit(
                POLICY,
                "        features = self._encode(obs, blueprint_idx)\n",
                "        started = time.perf_counter()\n        features = self._encode(obs, blueprint_idx)\n",
            ),
        ),
        COMPILE_BUDGET,
        "f_compiled",
    ),
    Hazard(
        "python_int_into_compiled_forward",
        "the epoch's step, a Python int, passed into the compiled forward and branched on (it recompiles)",
        (
            Edit(POLICY, FORWARD, FORWARD.replace("hidden: Hidden)", "hidden: Hidden, step: int = 0)")),
            Edit(
                POLICY,
                "        features = self._encode(obs, blueprint_idx)\n",
                "        if step == 0:  # an episode's first step: a fresh copy of the initial state\n"
                "            hidden = (hidden[0].clone(), hidden[1].clone())\n"
                "        features = self._encode(obs, blueprint_idx)\n",
            ),
            Edit(
                POLICY,
                "        net: Network | None = None,\n    ) -> PolicyStep:",
                "        net: Network | None = None,\n        step: int = 0,\n    ) -> PolicyStep:",
            ),
            Edit(
                POLICY,
                "        logits, values, new_hidden = (self if net is None else net)(obs, blueprint_idx, hidden)",
                "        logits, values, new_hidden = (self if net is None else net)(obs, blueprint_idx, hidden, step)",
            ),
            Edit(
                CLIENT,
                "generator=self.generator, net=self.agent.network",
                "generator=self.generator, net=self.agent.network, step=len(self.raw_obs)",
            ),
        ),
        COMPILE_BUDGET,
        "f_compiled",
    ),
    Hazard(
        "compiled_state_dict_saved",
        "the agent's state dict taken from the compiled module (`_orig_mod.` keys in checkpoints and trajectories)",
        (
            Edit(
                "src/esper/simic/agent/ppo.py",
                '            "policy": self.policy.state_dict(),\n',
                '            "policy": self.network.state_dict(),  # type: ignore[attr-defined]\n',
            ),
        ),
        TRAJECTORY,
        "f_compiled",
    ),
    Hazard(
        "display_copy_in_action_pull",
        "the action pull's `.cpu().tolist()` became `.tolist()`, and a `float(...)` for a progress display came in: "
        "a second device-to-host copy on a GPU (before the read of a host copy was left out, counted 2 and 2: a swap "
        "the total missed, and the per-line budget caught)",
        (
            Edit(
                CLIENT,
                "            rows = packed.cpu().tolist()\n",
                "            rows = packed.tolist()\n"
                "            shown = float(packed[0, 0])  # for a progress display\n",
            ),
        ),
        SYNC_BUDGET,
        "a_baseline",
    ),
    Hazard(
        "barrier_imported_by_name",
        "a debugging barrier imported by name at the module's top (`from torch.distributed import barrier`) and "
        "called in the per-epoch stop agreement",
        (
            Edit(
                SHARDING,
                "from torch.distributed import Store  # type: ignore[attr-defined]  # not in its __all__\n",
                "from torch.distributed import Store  # type: ignore[attr-defined]  # not in its __all__\n"
                "from torch.distributed import barrier as debug_barrier\n",
            ),
            Edit(
                SHARDING,
                '        """True on every rank when any rank\'s flag is True (one all-reduce)."""\n',
                '        """True on every rank when any rank\'s flag is True (one all-reduce)."""\n'
                "        debug_barrier()  # left in from chasing a hang\n",
            ),
        ),
        SYNC_BUDGET,
        "e_distributed",
    ),
    Hazard(
        "blocking_upload_replaces_pinned_copy",
        "fused validation's alpha table built with `torch.tensor(alphas, device=device)`, a blocking host-to-device "
        "copy, instead of the pinned, non-blocking one",
        (
            Edit(
                ENGINE,
                "    table = torch.tensor(plan.alphas, dtype=torch.float32)\n"
                '    if device.type == "cuda":\n'
                "        table = table.pin_memory()\n"
                "    return table.to(device, non_blocking=True)\n",
                "    return torch.tensor(plan.alphas, dtype=torch.float32, device=device)\n",
            ),
        ),
        SYNC_BUDGET,
        "b_lifecycle",
    ),
    Hazard(
        "non_blocking_dropped",
        "`non_blocking=True` dropped from the alpha table's copy to the device (it now blocks the host)",
        (Edit(ENGINE, "    return table.to(device, non_blocking=True)\n", "    return table.to(device)\n"),),
        SYNC_BUDGET,
        "b_lifecycle",
    ),
    Hazard(
        "changed_line_no_scenario_runs",
        "the sparse reward's clamp dropped in a cleanup: training under `--reward-mode sparse` changes, and no "
        "scenario runs that mode, so every behaviour check stays green",
        (
            Edit(
                "src/esper/simic/rewards/simple.py",
                "        sparse = config.sparse_scale * clip(base, -1.0, 1.0)\n",
                "        sparse = config.sparse_scale * base\n",
            ),
        ),
        EXERCISED,
        "exercised",
    ),
    Hazard(
        "constant_only_an_unrun_path_reads",
        "the checkpoint errors' quoted-reason length 160 -> 80 at module level: the line runs at import, so coverage "
        "called it run, though only failure paths no scenario takes read it",
        (
            Edit(
                "src/esper/simic/training/checkpoint.py",
                "REASON_CHARACTERS = 160  # of an exception's message quoted in a one-line error\n",
                "REASON_CHARACTERS = 80  # of an exception's message quoted in a one-line error\n",
            ),
        ),
        EXERCISED,
        "exercised",
    ),
    Hazard(
        "control_verbatim_move_with_re_export",
        "control: `gather_rows` moved verbatim to a new module and re-exported from the old one (a move, no change)",
        (Move("src/esper/tolaria/epoch.py", "gather_rows", "src/esper/tolaria/transfer.py"),),
        NOTHING,
        "static+a_baseline+exercised",
    ),
    Hazard(
        "control_loop_to_comprehension",
        "control: `weights_copy`'s loop turned into the equivalent dict comprehension (the same syncs, reworded)",
        (
            Edit(
                TRAINER,
                "    copies: dict[str, torch.Tensor] = {}\n"
                "    for name, value in module.state_dict().items():\n"
                '        copies[f"{prefix}{name}"] = value.detach().to("cpu", copy=True)\n'
                "    return copies\n",
                '    return {f"{prefix}{name}": value.detach().to("cpu", copy=True) '
                "for name, value in module.state_dict().items()}\n",
            ),
        ),
        NOTHING,
        "static+a_baseline+exercised",
    ),
    Hazard(
        "train_pass_10pct_slower",
        "10 % more CPU work in every train pass (busy work proportional to the pass, no op and no sync added)",
        (
            Edit(ENGINE, "import queue\n", "import queue\nimport time\n"),
            Edit(
                ENGINE,
                "        accs = [self.new_accumulators(env) for env in envs]\n",
                "        accs = [self.new_accumulators(env) for env in envs]\n        _start = time.process_time()\n",
            ),
            Edit(
                ENGINE,
                "            join_streams(envs)\n        return accs\n",
                "            join_streams(envs)\n"
                "        _deadline = time.process_time() + 0.1 * (time.process_time() - _start)\n"
                "        while time.process_time() < _deadline:\n"
                "            pass\n"
                "        return accs\n",
            ),
        ),
        BENCH,
        "bench",
        bench_filter="train_pass",
    ),
)
