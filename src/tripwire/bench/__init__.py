"""Throughput benchmarks and their noise-aware gate (`python -m tripwire.bench`; see docs/benchmarks.md).

- `cli`: `python -m tripwire.bench`: run a pytest-benchmark suite, save a baseline or gate against one;
- `ab`: `python -m tripwire bench-ab`: the paired base-vs-head A/B on one machine (the pull-request gate);
- `paired`: its driver: two persistent worker processes, units in ABBA blocks, fresh instances per block;
- `paired_spec`, `paired_stats`, `paired_report`: what a paired benchmark is, its interval verdict, its reports;
- `worker`: the persistent worker process of one side;
- `plots`: PNG and SVG plots of the A/B and of the stored-baseline comparison;
- `history`: a baseline file's committed versions, read from git, for the baseline-history plot;
- `fixture`: the `tripwire_bench` pytest fixture: CUDA-event/perf_counter timing, proxies, gate settings;
- `gate`: the verdict per benchmark (calibration-normalized, Mann-Whitney U and a threshold);
- `ops`: exact proxies: aten ops and syncs per measured call;
- `instructions`, `instructions_inner`: instruction counts under valgrind (the driver, and the side that runs under
  valgrind);
- `report`: terminal table, markdown and JSON reports;
- `store`: checksummed, device-keyed baseline files.

Internal, as every module outside `tripwire.PUBLIC_MODULES`: run it through its commands.
"""

from tripwire.bench.cli import main

__all__ = ["main"]
