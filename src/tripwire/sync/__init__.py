"""Sync-point accounting. A trainer imports only the regions (`from tripwire.sync import hot_path, carried`);
the gates import the rest by module:

- `tripwire.sync.regions`: `hot_path`, `carried`, `ignore_syncs`, `sync_kind`, `record_sync` (no torch);
- `tripwire.sync.counter`: `SyncCounter`, which records every host sync per region, with call sites;
- `tripwire.sync.hooks`: the torch modes and patches the counter installs while it is active;
- `tripwire.sync.budget`: per-region budgets keyed by call site, and the scaling check;
- `tripwire.sync.state`: the region stacks and active counters they share (no torch).

Importing this package loads the regions and the shared state only: no torch, no counter, no budget.
"""

from tripwire.sync.regions import OUTSIDE, SyncEvent, carried, hot_path, ignore_syncs, record_sync, sync_kind

__all__ = ["OUTSIDE", "SyncEvent", "carried", "hot_path", "ignore_syncs", "record_sync", "sync_kind"]
