"""tripwire on nanoGPT's own `train.py` (karpathy/nanoGPT at 3adf61e), fetched and left unedited (docs/tripwire.md).

nanoGPT is not an RL loop: a GPT trained from a memory-mapped token file, with gradient accumulation, a cosine
learning rate set by hand in each iteration, a periodic evaluation and `torch.save` checkpoints. Its data step
downloads Shakespeare; here any text will do. From a checkout of nanoGPT, in an environment with torch and tripwire:

    cp any_text.txt data/shakespeare_char/input.txt          # prepare.py downloads only when input.txt is missing
    python data/shakespeare_char/prepare.py                  # writes train.bin, val.bin and meta.pkl, nanoGPT's way
    python -m tripwire run examples/nanogpt/train_scenario.py --root path/to/nanoGPT --out results/base

The run's folder is the checkout itself (`cwd="root"`: the script reads `configurator.py`, its config file and
`data/` by relative path, and writes `out-shakespeare-char/ckpt.pt` there). The regions are the batch loader, the
model's forward pass, AdamW's step and the evaluation; an iteration starts at each `get_lr` call (once per
iteration); checkpoints digest AdamW (its parameters, moments and settings) and the evaluated losses; each
`torch.save` is an event, named where torch defines it (`torch.serialization:save`: the loop calls `torch.save`).

Seen on 2026-12-03 (torch 2.14.1, 2-core Xeon): `ok in 1.3 s: 14 checkpoints, 976 syncs, 2 events`; a second run
compares `identical`; an `.item()` added to `GPT.forward` is `NEW 'forward' model.py:183 in GPT.forward x46 [item]`
with the trajectory identical; `beta2` 0.99 -> 0.98 in the config is a value change from the first AdamW step, its
report naming `plain values that differ: self.state_dict.param_groups.0.betas [0.9, 0.99] -> [0.9, 0.98], ...`.
With `--compile=True` (2026-12-07, torch 2.14.1) the run records with every region: the compiled module runs
`GPT.forward` as a frame of its own, so the region runs at each of its 46 calls and holds the 5 compilation events (a
frame and a graph in the evaluation, then a recompile on grad mode in training), the graphs, ops and breaks torch
counts without tripwire. (Before, the region made dynamo compile the module through a wrapper frame that ran the
forward inside its graph, and the run failed with `instrument never fired: model:GPT.forward`.)

Of the 976 syncs then, 752 were in `data` and 165 were AdamW reading its step counters. Since 2026-12-04 a read of
host memory is not counted (on a GPU it waits for nothing): AdamW's counters live in host memory, so its reads are
gone. Since 2026-12-05 what Python's operators and reductions make of host tensors alone is host memory too: in
`data`, `data[i:i+block_size]` reads `i`, a row of a host tensor of indices, and `i+block_size`, neither counted (564
reads counted before), nor the evaluation's reads of `losses.mean()`. Seen on 2026-12-05: 144 syncs, 94 of them the
CPU branch's blocking `x.to(device)` in `data` (a GPU run takes the pinned, non-blocking branch).
"""

from tripwire.scenario import Checkpoint, EventCall, Iteration, Region, Scenario

# 10 iterations of a 2-layer, 32-wide GPT on 4 x 32 characters, 2 micro-batches each, an evaluation every 5, on CPU
ARGV = [
    "config/train_shakespeare_char.py",
    "--device=cpu",
    "--compile=False",
    "--eval_iters=4",
    "--eval_interval=5",
    "--log_interval=1",
    "--block_size=32",
    "--batch_size=4",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=32",
    "--max_iters=10",
    "--lr_decay_iters=10",
    "--dropout=0.0",
    "--gradient_accumulation_steps=2",
    "--warmup_iters=2",
]

scenario = Scenario(
    name="nanogpt",
    script="train.py",
    argv=ARGV,
    cwd="root",
    regions=[
        Region("__main__:get_batch", "data"),
        Region("model:GPT.forward", "forward"),
        Region("torch.optim:AdamW.step", "optimizer"),
        Region("__main__:estimate_loss", "eval"),
    ],
    iteration=Iteration("__main__:get_lr"),
    checkpoints=[
        Checkpoint("torch.optim:AdamW.step", capture=("self",)),
        Checkpoint("__main__:estimate_loss", capture=("return",)),
    ],
    event_calls=[EventCall("torch.serialization:save", label="checkpoint")],
)
