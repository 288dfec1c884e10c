"""An instrument on a generator function (or an async one) leaves it one to whoever asks.

Frameworks choose how to run what they are handed by asking `inspect.isgeneratorfunction` or `isasyncgenfunction`:
Ray streams what a generator task yields, pytest drives a generator fixture to its `yield` and finishes it after.
On Python 3.11 the answer comes from the function's code flags alone, and a stand-in was a plain function: a loop
that iterated its generator step when alone called it when recorded. What a consumer sends, throws or closes goes
through the stand-in to the original, and a `types.coroutine` generator stays awaitable.
"""

from __future__ import annotations

import inspect
import json
import runpy
import types
from pathlib import Path

from tripwire.outside.record import record
from tripwire.outside.stand import stand_in
from tripwire.scenario import Checkpoint, EventCall, Region, Scenario

LOOP = """
import asyncio
import inspect
import json
import types
from pathlib import Path

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def batches(w, n):
    total = 0.0
    try:
        for i in range(n):
            got = yield (w * i).sum().item()
            total += got or 0.0
    finally:
        total += 100.0
    return total


class Sampler:
    def draw(self, w):
        try:
            yield w.max().item()
        except ValueError as error:
            yield f"caught {error}"


async def stream(w, n):
    for i in range(n):
        await asyncio.sleep(0)
        got = yield (w + i).min().item()
        if got is not None:
            yield f"sent {got}"


@types.coroutine
def tick():
    got = yield "tick"
    return got


async def ticks():
    return await tick()


def run(fn, *args):
    # as a framework chooses: a generator function is iterated, an async one iterated in an event loop
    if inspect.isasyncgenfunction(fn):
        async def drain():
            return [item async for item in fn(*args)]

        return ["async iterated", asyncio.run(drain())]
    if inspect.isgeneratorfunction(fn):
        return ["iterated", list(fn(*args))]
    return ["called", repr(type(fn(*args)))]


def main():
    w = torch.ones(2, device=DEVICE)  # on the run's device: a host tensor's reads wait for nothing
    seen = [run(batches, w, 3), run(Sampler().draw, w), run(stream, w, 2)]
    steps = batches(w, 3)
    first = next(steps)
    second = steps.send(5.0)
    try:
        steps.send(7.0)
        steps.send(1.0)
    except StopIteration as stop:
        seen.append(["sent", first, second, stop.value])
    drawn = Sampler().draw(w)
    seen.append(["thrown", next(drawn), drawn.throw(ValueError("no"))])
    closed = batches(w, 5)
    next(closed)
    closed.close()
    seen.append(["closed", inspect.getgeneratorstate(closed)])

    async def chat():
        agen = stream(w, 2)
        first = await agen.__anext__()
        reply = await agen.asend("hi")
        await agen.aclose()
        return [first, reply]

    seen.append(["async sent", asyncio.run(chat())])
    coroutine = ticks()
    seen.append(["types.coroutine", coroutine.send(None)])
    try:
        coroutine.send("done")
    except StopIteration as stop:
        seen.append(["returned", stop.value])
    seen.append(
        [
            inspect.isgeneratorfunction(batches),
            inspect.isgeneratorfunction(Sampler.draw),
            inspect.isasyncgenfunction(stream),
            inspect.isgeneratorfunction(tick),
            batches.__name__,
            str(inspect.signature(batches)),
        ]
    )
    Path(__file__).with_name("seen.json").write_text(json.dumps(seen))
"""


def test_a_generator_target_is_still_one_and_what_goes_in_goes_through(tmp_path: Path) -> None:
    loop = tmp_path / "loop.py"
    loop.write_text(LOOP, encoding="utf-8")
    runpy.run_path(str(loop))["main"]()
    alone = json.loads((tmp_path / "seen.json").read_text())
    assert alone[:3] == [["iterated", [0.0, 2.0, 4.0]], ["iterated", [1.0]], ["async iterated", [1.0, 2.0]]]
    assert alone[3:] == [
        ["sent", 0.0, 2.0, 113.0],
        ["thrown", 1.0, "caught no"],
        ["closed", "GEN_CLOSED"],
        ["async sent", [1.0, "sent hi"]],
        ["types.coroutine", "tick"],
        ["returned", "done"],
        [True, True, True, True, "batches", "(w, n)"],
    ]

    scenario = Scenario(
        name="generators",
        call="loop:main",
        regions=[
            Region("loop:batches", "batches"),
            Region("loop:Sampler.draw", "draw"),
            Region("loop:stream", "stream"),
            Region("loop:tick", "tick"),
        ],
        checkpoints=[Checkpoint("loop:batches", capture=("arg:w",))],
        event_calls=[EventCall("loop:Sampler.draw", label="draw")],
    )
    result = record(scenario, tmp_path)
    assert result.ok, result.cause
    assert json.loads((tmp_path / "seen.json").read_text()) == alone
    # each one iterated (a generator never iterated is never called)
    assert result.calls == {"loop:batches": 3, "loop:Sampler.draw": 2, "loop:stream": 2, "loop:tick": 1}
    rows = sorted((r.region, r.text, r.count) for r in result.syncs.records)
    assert rows == [
        ("batches", "got = yield (w * i).sum().item()", 3 + 3 + 1),
        ("draw", "yield w.max().item()", 2),
        ("stream", "got = yield (w + i).min().item()", 2 + 1),
    ]


def test_a_generator_never_iterated_runs_no_instrument() -> None:
    calls: list[str] = []

    def numbers():
        yield 1

    stand = stand_in(numbers, lambda original, args, kwargs: calls.append("ran") or original(*args, **kwargs))
    unstarted = stand()
    assert inspect.isgenerator(unstarted) and calls == []
    assert list(unstarted) == [1] and calls == ["ran"]
    assert inspect.isgeneratorfunction(stand) and not inspect.isgeneratorfunction(stand_in(len, lambda *a: None))
    awaitable = types.coroutine(numbers)
    assert inspect.isawaitable(stand_in(awaitable, lambda original, args, kwargs: original(*args, **kwargs))())
