"""CUDATimer: per-phase wall time from CUDA events recorded on the stream that does the work.

On CUDA, `start()` and `stop()` record `torch.cuda.Event(enable_timing=True)` on the given stream (the current
stream by default), so the elapsed time covers the kernels queued on that stream between the two records,
not the host's launch time. `stop()` waits on the end event (one real sync, recorded by tripwire's sync
counter as `timer_sync`) and returns milliseconds. Call it at a point where the loop synchronizes anyway
(the epoch boundary), never per batch.

On CPU (or `device=None`) it falls back to `time.perf_counter`, and `stop()` still reports the `timer_sync` the same
code has on a GPU, so a gate running on CPU counts it where the GPU will wait.

The original recorded its events on the default stream while the work ran on per-env streams, and called
`stop()` once per round after starting every epoch, so only the last epoch was timed. Here a timer refuses to
start twice or stop unstarted (`TimerStateError`), and `elapsed_ms` sums every start/stop interval.
"""

from __future__ import annotations

import time

import torch

from tripwire.common.errors import TimerStateError
from tripwire.sync import kinds, record_sync, sync_kind


class CUDATimer:
    """Times intervals with CUDA events on `device` (a stream may be given), else with perf_counter."""

    def __init__(self, device: torch.device | str | None = None, stream: torch.cuda.Stream | None = None) -> None:
        resolved = torch.device(device) if device is not None else torch.device("cpu")
        self.uses_cuda = resolved.type == "cuda" and torch.cuda.is_available()
        self.device = resolved
        self.stream = stream
        self.intervals_ms: list[float] = []
        self._start_event: torch.cuda.Event | None = None
        self._start_time: float | None = None

    @property
    def kind(self) -> str:
        return "cuda_event" if self.uses_cuda else "perf_counter"

    @property
    def running(self) -> bool:
        return self._start_event is not None or self._start_time is not None

    def _stream(self) -> torch.cuda.Stream:
        return self.stream if self.stream is not None else torch.cuda.current_stream(self.device)

    def start(self) -> None:
        if self.running:
            raise TimerStateError("CUDATimer.start() called twice without stop()")
        if self.uses_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(self._stream())
            self._start_event = event
        else:
            self._start_time = time.perf_counter()

    def stop(self) -> float:
        """End the interval and return its length in milliseconds."""
        if not self.running:
            raise TimerStateError("CUDATimer.stop() called without start()")
        if self._start_event is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record(self._stream())
            with sync_kind(kinds.TIMER_SYNC):
                end.synchronize()
            elapsed = float(self._start_event.elapsed_time(end))
            self._start_event = None
        else:
            assert self._start_time is not None
            elapsed = (time.perf_counter() - self._start_time) * 1000.0
            self._start_time = None
            record_sync(kinds.TIMER_SYNC)  # what this stop is on a GPU: a CPU run reports the sync the GPU run has
        self.intervals_ms.append(elapsed)
        return elapsed

    @property
    def elapsed_ms(self) -> float:
        """Sum of every completed interval."""
        return float(sum(self.intervals_ms))

    def __enter__(self) -> CUDATimer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
