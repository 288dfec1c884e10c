"""The gates a project runs: goldens under one folder, the pytest plugin, the static audit, import promises.

- `goldens`: one baselines folder, checked or regenerated on purpose, no blind pass under CI;
- `pytest_plugin`: fixtures, `--tripwire-update`, `--tripwire-against` and the guardrail table;
- `static_audit`: sync-capable calls per function, read from the source, against a committed budget;
- `loads_without`: promises that a module loads without a heavy package, each checked in a fresh interpreter;
- `loads_seen`: what each module was seen to load without, kept by behaviour however its promise is worded;
- `exercised`: changed lines no scenario ran, from coverage.py's data (`python -m tripwire exercised`), with
  `coverage_data` (what the scenarios ran, read and checked before use), `layout` (the statement and function each
  line belongs to), `import_time` (a statement that runs at import counts as seen only when what it defines was used)
  and `exclusions` (the reviewed list of code no scenario can run);
- `baselines_diff`: what a pull request changed under baselines/, as markdown.

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
