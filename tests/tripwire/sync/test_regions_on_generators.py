"""A region placed on a generator function, an `async def` or an async generator covers its body, step by step.

Calling either runs none of the body; before, the region opened and closed around the call, and every sync of the
body counted under `<outside>` while the region read 0. Now each step of the body runs in the region, and the
consumer's own code between steps does not.
"""

from __future__ import annotations

from pathlib import Path

from tripwire.outside.record import record
from tripwire.outside.result import Result
from tripwire.scenario import Region, Scenario

LOOP = """
import asyncio

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def batches(w):
    try:
        for i in range(4):
            got = yield (w * i).sum().item()
            if got is not None:
                (w * got).sum().item()
    finally:
        w.max().item()


@torch.no_grad()
def decorated(w):
    for i in range(2):
        yield (w * i).sum().item()


async def act(w):
    first = (w * 3).sum().item()
    await asyncio.sleep(0)
    return first + w.min().item()


def lazily(w):
    # a plain function, but the generator's body is written here
    return ((w * i).max().item() for i in range(2))


def handed_on(w):
    return batches(w)  # made elsewhere: its steps are `data`'s, not this region's


async def stream(w):
    try:
        for i in range(3):
            await asyncio.sleep(0)  # waiting: other tasks would run here, outside the region
            yield (w * i).sum().item()
    finally:
        w.abs().sum().item()


async def consume(w):
    gen = stream(w)
    async for x in gen:
        w.std().item()  # the consumer's own sync, between steps: not the region's
        if x > 0:
            break
    await gen.aclose()  # runs the body's finally, in the region


def main():
    w = torch.ones(2, device=DEVICE)  # on the run's device: a host tensor's reads wait for nothing
    steps = batches(w)
    next(steps)
    steps.send(5.0)  # sent in: the body's sync on it counts in the region
    for _ in steps:
        w.mean().item()  # the consumer's own sync, between steps: not the region's
        break  # closing runs the body's finally, in the region
    list(decorated(w))
    asyncio.run(act(w))
    asyncio.run(consume(w))
    list(lazily(w))
    next(handed_on(w))
"""


def _record(tmp_path: Path) -> Result:
    (tmp_path / "loop.py").write_text(LOOP, encoding="utf-8")
    regions = [
        Region("loop:batches", "data"),
        Region("loop:decorated", "nograd"),
        Region("loop:act", "act"),
        Region("loop:stream", "stream"),
        Region("loop:lazily", "lazily"),
        Region("loop:handed_on", "handed_on"),
    ]
    result = record(Scenario(name="generators", call="loop:main", regions=regions), tmp_path)
    assert result.ok, result.cause
    return result


def test_a_region_counts_the_steps_of_its_generator_and_coroutine(tmp_path: Path) -> None:
    result = _record(tmp_path)
    rows = sorted((r.region, r.text, r.count) for r in result.syncs.records)
    assert rows == [
        ("<outside>", "w.mean().item()  # the consumer's own sync, between steps: not the region's", 1),
        ("<outside>", "w.std().item()  # the consumer's own sync, between steps: not the region's", 2),
        ("act", "first = (w * 3).sum().item()", 1),
        ("act", "return first + w.min().item()", 1),
        ("data", "(w * got).sum().item()", 1),
        ("data", "got = yield (w * i).sum().item()", 4),
        ("data", "w.max().item()", 2),
        ("lazily", "return ((w * i).max().item() for i in range(2))", 2),
        ("nograd", "yield (w * i).sum().item()", 2),
        ("stream", "w.abs().sum().item()", 1),
        ("stream", "yield (w * i).sum().item()", 2),
    ]
    assert result.calls == {
        "loop:act": 1,
        "loop:batches": 2,
        "loop:decorated": 1,
        "loop:handed_on": 1,
        "loop:lazily": 1,
        "loop:stream": 1,
    }


def test_the_stepped_generator_behaves_as_the_generator_does() -> None:
    """What the consumer sends, throws and closes reaches the body as it would without the region, and the return
    value comes back through `yield from`."""
    from tripwire.outside.instrument import body_in_region
    from tripwire.sync import hot_path

    def body() -> object:
        seen = []
        try:
            while True:
                try:
                    seen.append((yield len(seen)))
                except ValueError as error:
                    seen.append(f"caught {error}")
        except GeneratorExit:
            seen.append("closed")
            raise
        finally:
            log.append(list(seen))

    def drive(gen: object) -> list[object]:
        out = [next(gen), gen.send("a"), gen.throw(ValueError("x")), gen.send("b")]  # type: ignore[attr-defined]
        gen.close()  # type: ignore[attr-defined]
        return out

    log: list[list[object]] = []
    plain = drive(body())
    stepped = drive(body_in_region(body, body(), hot_path("region")))
    assert plain == stepped == [0, 1, 2, 3]
    assert log[0] == log[1] == ["a", "caught x", "b", "closed"]

    def returns() -> object:
        yield 1
        return "done"

    def outer(gen: object) -> object:
        return (yield from gen)  # type: ignore[misc]

    relay = outer(body_in_region(returns, returns(), hot_path("region")))
    assert next(relay) == 1  # type: ignore[call-overload]
    try:
        next(relay)  # type: ignore[call-overload]
    except StopIteration as stop:
        assert stop.value == "done"
    else:
        raise AssertionError("the generator did not end")


def test_the_stepped_async_generator_behaves_as_the_async_generator_does() -> None:
    """The same for an async generator: `asend`, `athrow` and `aclose` reach the body as they would without the
    region, and the region is not held while the body waits (another task's sync then is not the region's)."""
    import asyncio

    from tripwire.outside.instrument import body_in_region
    from tripwire.sync import hot_path
    from tripwire.sync.regions import _current_regions

    async def body() -> object:
        seen = []
        try:
            while True:
                await asyncio.sleep(0)
                waiting.append(_current_regions())
                try:
                    seen.append((yield len(seen)))
                except ValueError as error:
                    seen.append(f"caught {error}")
        except GeneratorExit:
            seen.append("closed")
            raise
        finally:
            log.append(list(seen))

    async def drive(gen: object) -> list[object]:
        other = asyncio.get_running_loop().create_task(beside())
        out = [
            await gen.__anext__(),  # type: ignore[attr-defined]
            await gen.asend("a"),  # type: ignore[attr-defined]
            await gen.athrow(ValueError("x")),  # type: ignore[attr-defined]
            await gen.asend("b"),  # type: ignore[attr-defined]
        ]
        await gen.aclose()  # type: ignore[attr-defined]
        await other
        return out

    async def beside() -> None:
        for _ in range(4):
            others.append(_current_regions())
            await asyncio.sleep(0)

    from tripwire.sync.counter import SyncCounter

    log: list[list[object]] = []
    waiting: list[list[str]] = []
    others: list[list[str]] = []
    plain = asyncio.run(drive(body()))
    with SyncCounter():  # regions are tracked while a counter is active
        stepped = asyncio.run(drive(body_in_region(body, body(), hot_path("region"))))
    assert plain == stepped == [0, 1, 2, 3]
    assert log[0] == log[1] == ["a", "caught x", "b", "closed"]
    assert waiting == [[]] * 4 + [["region"]] * 4  # the body ran in the region (and without it, in none)
    assert others == [[]] * 8  # the task beside it never saw the region, in either run
