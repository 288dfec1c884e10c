"""TelemetryHub: stamps events, queues them on a bounded queue and hands them to every backend in order.

Guarantees:
- lossless: `emit` never drops an event. When the queue is full it blocks until the worker has room
  (back-pressure), so a slow backend slows the trainer instead of losing data;
- ordered: one worker thread delivers events to every backend in emission order;
- `flush()` returns only after every event emitted before it reached every backend and the backends
  flushed; `close()` flushes, stops the worker and closes the backends.

A backend that raises stops delivery: the error is re-raised from the next `emit`, `flush` or `close`
rather than silently swallowed.

Two options serve a run sharded over ranks: `annotate` is applied to every event on the emitting thread, at
`emit` (it stamps the rank and the merge key, which must be read where the loop is, not where the worker is),
and `synchronous=True` writes each event to the backends inside `emit`, with no queue and no worker, so a
rank that dies (even by SIGKILL) has lost no event it emitted.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from esper.leyline import EVENT_LEVEL, TelemetryEvent, TelemetryEventType, TelemetryLevel
from esper.nissa.backends import TelemetryBackend, TelemetryWriteError

DEFAULT_QUEUE_SIZE = 1000
_STOP = object()


def make_run_name(now: datetime | None = None) -> str:
    """`telemetry_YYYY-MM-DD_HHMMSS` (UTC); the directory backend adds `_NNN` if the name is taken."""
    moment = now or datetime.now(UTC)
    return moment.strftime("telemetry_%Y-%m-%d_%H%M%S")


class TelemetryHub:
    """Fan-out of telemetry events to backends through one bounded queue and one worker thread."""

    def __init__(
        self,
        level: TelemetryLevel = TelemetryLevel.NORMAL,
        *,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        annotate: Callable[[TelemetryEvent], TelemetryEvent] | None = None,
        synchronous: bool = False,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be positive, got {queue_size}")
        self.level = level
        self.queue_size = queue_size
        self.backends: list[TelemetryBackend] = []
        self.emitted = 0
        self.delivered = 0
        self.max_queue_depth = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._error: BaseException | None = None
        self._closed = False
        self._annotate = annotate
        self.synchronous = synchronous
        self._worker = threading.Thread(target=self._deliver, name="nissa-hub", daemon=True)
        if not synchronous:
            self._worker.start()

    def add_backend(self, backend: TelemetryBackend) -> None:
        self.flush()
        self.backends.append(backend)

    def enabled_for(self, event_type: TelemetryEventType) -> bool:
        """Whether the hub's level lets events of this type through (unlisted types need MINIMAL)."""
        if self.level is TelemetryLevel.OFF:
            return False
        return self.level >= EVENT_LEVEL.get(event_type, TelemetryLevel.MINIMAL)

    def emit(self, event: TelemetryEvent) -> None:
        """Stamp `event` with an id and a UTC timestamp and queue it; blocks while the queue is full."""
        self._raise_pending()
        if self._closed:
            raise RuntimeError("telemetry hub is closed: emit before close()")
        stamped = dataclasses.replace(
            event,
            event_id=event.event_id or uuid.uuid4().hex,
            timestamp=event.timestamp or datetime.now(UTC).isoformat(),
        )
        if self._annotate is not None:
            stamped = self._annotate(stamped)
        if self.synchronous:
            for backend in self.backends:
                backend.write(stamped)
            self.emitted += 1
            self.delivered += 1
            return
        self._queue.put(stamped)  # blocks when full: back-pressure, never a drop
        self.emitted += 1
        depth = self._queue.qsize()
        if depth > self.max_queue_depth:
            self.max_queue_depth = depth

    def flush(self) -> None:
        """Wait until every queued event reached every backend, then flush the backends."""
        if not self._closed and not self.synchronous:
            self._queue.join()
        self._raise_pending()
        for backend in self.backends:
            backend.flush()

    def close(self) -> None:
        """Deliver what is queued, stop the worker, close every backend (even after a failure), then re-raise it."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if not self.synchronous:
                self._queue.put(_STOP)
                self._worker.join()
            for backend in self.backends:
                backend.close()
        self._raise_pending()

    def __enter__(self) -> TelemetryHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, TelemetryWriteError):  # already one line naming the file and the fix
                raise error
            raise RuntimeError(f"telemetry backend failed: {error}") from error

    def _deliver(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                if self._error is None and isinstance(item, TelemetryEvent):
                    for backend in self.backends:
                        backend.write(item)
                    self.delivered += 1
            except BaseException as error:  # re-raised on the caller's thread
                self._error = error
            finally:
                self._queue.task_done()
