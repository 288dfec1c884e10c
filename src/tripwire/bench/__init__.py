"""Throughput benchmarks and their noise-aware gate (`python -m tripwire.bench`; see docs/benchmarks.md).

cli       `python -m tripwire.bench`: run a pytest-benchmark suite, save a baseline or gate against one
ab        `python -m tripwire.bench.ab`: interleaved base-vs-head A/B on one machine
fixture   the `tripwire_bench` pytest fixture: CUDA-event/perf_counter timing, proxies, gate settings
gate      the verdict per benchmark (calibration-normalized, Mann-Whitney U and a threshold)
ops       exact proxies: aten ops and syncs per measured call
report    terminal table, markdown and JSON reports
store     checksummed, device-keyed baseline files
"""

from tripwire.bench.cli import main

__all__ = ["main"]
