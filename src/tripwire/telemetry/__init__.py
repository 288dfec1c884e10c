"""Telemetry events as goldens: counts and order, payload schemas, payload value digests, syrupy snapshots.

- `counts`: an event stream reduced to per-type, per-round and per-env counts and one round's order;
- `schema`: per event label, every field's dotted path and the JSON types seen there;
- `payloads`: a digest of every field of every event, compared with a context-bound golden;
- `clock`: wall-clock fields (durations, rates) by their scale against the run's wall time, so a unit changed shows;
- `snapshot`: the syrupy extension storing counts and schemas under the baselines folder.

Internal, as every module outside `tripwire.PUBLIC_MODULES`: import the public names from `tripwire`.
"""
