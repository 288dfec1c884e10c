"""What torch.compile does, counted like syncs: graph breaks, recompiles, frames, graphs and eager fallbacks.

- `trace`: dynamo's structured trace read into notes (kind, the user line, the function, the reason);
- `counter`: `CompileCounter`, which records them per region, per source line with callers, and per iteration, in
  the same event log as `tripwire.sync.counter.SyncCounter`, so budgets, results and reports read both alike;
- `traced`: `TracedLines`, the source lines dynamo traced into graphs, added to a running coverage.py measurement
  (which cannot see a graph run) by `add_to_coverage` (tripwire's `coverage` extra).

This package loads no torch (its modules say the same of themselves).

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
