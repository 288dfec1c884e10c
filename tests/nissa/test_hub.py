"""TelemetryHub: lossless and ordered under a burst with a tiny queue and a slow backend; bounded queue depth."""

from __future__ import annotations

import threading
import time

import pytest

from esper.leyline import TelemetryEvent, TelemetryEventType
from esper.nissa import InMemoryBackend, TelemetryHub

BURST = 100_000
SMALL_QUEUE = 64


class SlowBackend(InMemoryBackend):
    """Keeps every event but pauses 1 ms every `every` writes, so the producer outruns it."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = every

    def write(self, event: TelemetryEvent) -> None:
        super().write(event)
        if len(self.events) % self.every == 0:
            time.sleep(0.001)


class GatedBackend(InMemoryBackend):
    """Blocks every write until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def write(self, event: TelemetryEvent) -> None:
        self.gate.wait()
        super().write(event)


class FailingBackend(InMemoryBackend):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def write(self, event: TelemetryEvent) -> None:
        raise OSError("disk full")

    def close(self) -> None:
        self.closed = True


def _event(i: int) -> TelemetryEvent:
    return TelemetryEvent(TelemetryEventType.EPOCH_COMPLETED, data={"i": i}, env_id=i % 4, epoch=i)


@pytest.fixture(scope="module")
def burst() -> tuple[TelemetryHub, SlowBackend]:
    hub = TelemetryHub(queue_size=SMALL_QUEUE)
    backend = SlowBackend(every=250)
    hub.add_backend(backend)
    for i in range(BURST):
        hub.emit(_event(i))
    hub.close()
    return hub, backend


def test_a_burst_through_a_small_queue_arrives_complete(burst: tuple[TelemetryHub, SlowBackend]) -> None:
    hub, backend = burst
    assert len(backend.events) == BURST
    assert hub.emitted == hub.delivered == BURST


def test_a_burst_through_a_small_queue_arrives_in_order(burst: tuple[TelemetryHub, SlowBackend]) -> None:
    _, backend = burst
    assert [event.data["i"] for event in backend.events] == list(range(BURST))


def test_queue_depth_never_exceeds_the_queue_size(burst: tuple[TelemetryHub, SlowBackend]) -> None:
    hub, _ = burst
    assert hub.max_queue_depth <= SMALL_QUEUE


def test_a_slow_backend_fills_the_queue(burst: tuple[TelemetryHub, SlowBackend]) -> None:
    """The burst really ran into back-pressure (else the ordering and depth checks above prove little)."""
    hub, _ = burst
    assert hub.max_queue_depth >= SMALL_QUEUE - 1


def test_emit_blocks_while_the_queue_is_full_and_resumes_without_loss() -> None:
    hub = TelemetryHub(queue_size=4)
    backend = GatedBackend()
    hub.add_backend(backend)
    done = threading.Event()

    def produce() -> None:
        for i in range(20):
            hub.emit(_event(i))
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(0.2)
    blocked_at = hub.emitted
    assert not done.is_set()  # the producer waits: back-pressure, not a drop
    assert blocked_at <= 4 + 1  # queue full plus the one event the worker holds
    backend.gate.set()
    producer.join(timeout=5)
    hub.close()
    assert [event.data["i"] for event in backend.events] == list(range(20))


def test_every_event_is_stamped_with_an_id_and_a_utc_timestamp() -> None:
    backend = InMemoryBackend()
    with TelemetryHub() as hub:
        hub.add_backend(backend)
        hub.emit(_event(0))
        hub.emit(_event(1))
    first, second = backend.events
    assert first.event_id and second.event_id and first.event_id != second.event_id
    assert first.timestamp.endswith("+00:00")


def test_flush_returns_after_every_event_reached_the_backend() -> None:
    hub = TelemetryHub(queue_size=8)
    backend = SlowBackend(every=10)
    hub.add_backend(backend)
    for i in range(100):
        hub.emit(_event(i))
    hub.flush()
    assert len(backend.events) == 100
    hub.close()


def test_a_failing_backend_error_is_raised_not_swallowed() -> None:
    hub = TelemetryHub()
    hub.add_backend(FailingBackend())
    hub.emit(_event(0))
    with pytest.raises(RuntimeError, match="telemetry backend failed: disk full"):
        hub.flush()
    hub.close()


def test_close_after_a_backend_failure_still_stops_the_worker_and_closes_backends() -> None:
    hub = TelemetryHub()
    backend = FailingBackend()
    hub.add_backend(backend)
    hub.emit(_event(0))
    with pytest.raises(RuntimeError, match="disk full"):
        hub.close()
    assert backend.closed
    assert not hub._worker.is_alive()


def test_emit_after_close_is_an_error() -> None:
    hub = TelemetryHub()
    hub.close()
    with pytest.raises(RuntimeError, match="closed"):
        hub.emit(_event(0))


def test_queue_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="queue_size must be positive"):
        TelemetryHub(queue_size=0)
