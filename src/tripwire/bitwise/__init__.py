"""Bitwise state and what a difference is: digests, kept values, trajectories, structure and size.

- `digest`: sha256 digests of tensors, state dicts, RNG states and plain values;
- `fields`: an object's numbers, found by descending into its fields, and NumPy values as torch's: what is digested;
- `values`: the numbers behind the digests, kept once per distinct tensor and read back lazily;
- `trajectory`: ordered, named checkpoints of digests, recorded during a run and compared to a golden;
- `tensor_diff`: what changed inside one checkpoint, structure (added, removed, renamed, reshaped) apart from values;
- `settings`: the determinism settings a run changes, each with the line that changed it;
- `magnitude`: how big a value difference is (max |Δ|, ULPs, growth) and the one rule for low-bit drift;
- `vendor_ops`: the CPU ops whose bits follow the CPU's vendor under the portable pin, noted with their lines;
- `draws`: the threads that draw from torch's default generator, whose draws the OS's scheduling orders;
- `child_start`: what a spawned or fork-server child runs to join the `vendor_ops` watch (stdlib only).

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
