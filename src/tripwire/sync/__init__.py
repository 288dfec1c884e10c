"""Sync-point accounting. A trainer imports only the regions (`from tripwire.sync import hot_path, carried`); the
rest is tripwire's own (internal: import the public names from `tripwire`).

- `regions`: `hot_path`, `carried`, `ignore_syncs`, `sync_kind`, `record_sync` (no torch);
- `kinds`: every kind of event, what it means, whether it stalls a GPU and who reports it (no torch; public, as the
  package's regions are: `record_sync(kinds.CUDA_SYNCHRONIZE)` reports a sync a CPU run cannot make);
- `counter`: `SyncCounter`, which records every host sync per region, with call sites;
- `crosscheck`: torch's own sync warnings, named at their lines, against the counter's events (on CUDA);
- `hooks`: installs and removes the counter's mechanisms, on the counting thread and the threads it carries;
- `installation`: what one counter installed, and how it is put back;
- `explicit`: `.item()`, `.cpu()`, `bool(t)`, host-bound copies: stand-ins on the watched methods and functions;
- `implicit`: data-dependent aten ops, by kernels over those ops or a dispatch mode;
- `patches`: the synchronize entry points, `torch.distributed`'s collectives, `torch.save` and `torch.load`;
- `saved`: the device storages a `torch.save` copies to the host, and what a `torch.load` puts in host memory;
- `scalers`: a CUDA `GradScaler` a CPU run disabled, counting the reads it makes on a GPU;
- `packed`: a packed sequence's batch sizes and lengths, host memory on every device;
- `watched`: the stand-ins themselves (small, so dynamo traces through them);
- `copies`: which copies are host-bound, and which host-to-device copies block the host;
- `spelling`: what a line of source says about the host (no torch);
- `swaps`: a function's code swapped, so references taken before a counter started count too;
- `threads`: the threads and pool tasks the counted code starts, counted like the thread that started them;
- `dynamo`: tripwire's frames kept out of what torch.compile traces;
- `state`: the region stacks and active counters they share, and where a call site is found (no torch);
- `sites`: a site identified across edits; `log`: a counter's events, per region, site and iteration;
- `budget`: per-region budgets keyed by call site, and the scaling check; `rows`: the NEW, GREW, GONE and MOVED rows.

Importing this package loads the regions and the shared state only: no torch, no counter, no budget.
"""

from tripwire.sync.regions import OUTSIDE, SyncEvent, carried, hot_path, ignore_syncs, record_sync, sync_kind

__all__ = ["OUTSIDE", "SyncEvent", "carried", "hot_path", "ignore_syncs", "record_sync", "sync_kind"]
