"""An instrument on an `async def` leaves it an `async def` to whoever asks.

Frameworks choose how to run what they are handed by asking `inspect.iscoroutinefunction` (or asyncio's): Ray makes
an actor async when one of its methods is, an ASGI server runs a plain endpoint on its thread pool. On Python 3.11
the answer comes from the function's code flags alone, and a stand-in was a plain function: a loop that awaited its
`async def` policy step when alone called it when recorded, and got a coroutine object back instead of the action.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from tripwire.outside.record import record
from tripwire.scenario import Checkpoint, EventCall, Region, Scenario

LOOP = """
import asyncio
import inspect
import json
from pathlib import Path

import torch

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


async def act(w, scale=3):
    await asyncio.sleep(0)
    return (w * scale).sum().item()


class Actor:
    async def step(self, w):
        await asyncio.sleep(0)
        return w.min().item()


def log(tag, value):
    pass


def dispatch(fn, *args):
    # as a framework chooses: an `async def` is awaited, a plain function called on the caller's thread
    if inspect.iscoroutinefunction(fn):
        return ["awaited", asyncio.run(fn(*args))]
    return ["called", repr(type(fn(*args)))]


def main():
    w = torch.ones(2, device=DEVICE)  # on the run's device: a host tensor's reads wait for nothing
    seen = [
        dispatch(act, w),
        dispatch(Actor().step, w),
        [asyncio.iscoroutinefunction(act), inspect.iscoroutinefunction(Actor.step), inspect.iscoroutinefunction(log)],
        [act.__name__, str(inspect.signature(act)), str(inspect.signature(Actor.step))],
    ]
    log("seen", 1)
    Path(__file__).with_name("seen.json").write_text(json.dumps(seen))
"""


def test_an_async_def_target_is_still_one_and_its_body_runs_in_the_region(tmp_path: Path) -> None:
    loop = tmp_path / "loop.py"
    loop.write_text(LOOP, encoding="utf-8")
    runpy.run_path(str(loop))["main"]()
    alone = json.loads((tmp_path / "seen.json").read_text())
    assert alone[:3] == [["awaited", 6.0], ["awaited", 1.0], [True, True, False]]

    scenario = Scenario(
        name="coroutines",
        call="loop:main",
        regions=[Region("loop:act", "act"), Region("loop:Actor.step", "actor"), Region("loop:log", "log")],
        checkpoints=[Checkpoint("loop:act", capture=("arg:w",))],
        event_calls=[EventCall("loop:log", label="tag")],
    )
    result = record(scenario, tmp_path)
    assert result.ok, result.cause
    assert json.loads((tmp_path / "seen.json").read_text()) == alone
    assert result.calls == {"loop:act": 1, "loop:Actor.step": 1, "loop:log": 1}
    rows = sorted((r.region, r.text, r.count) for r in result.syncs.records)
    assert rows == [
        ("act", "return (w * scale).sum().item()", 1),
        ("actor", "return w.min().item()", 1),
    ]


def test_a_plain_function_marked_async_keeps_a_plain_stand_in() -> None:
    """A plain function that returns an awaitable, marked as a coroutine function (`inspect.markcoroutinefunction`,
    Python 3.12 on), is not an `async def`: its stand-in returns what it returns, and carries its mark."""
    import inspect

    from tripwire.outside.stand import stand_in

    job = object()

    def submit() -> object:
        return job

    if hasattr(inspect, "markcoroutinefunction"):
        inspect.markcoroutinefunction(submit)
    stand = stand_in(submit, lambda original, args, kwargs: original(*args, **kwargs))
    assert stand() is job
    assert inspect.iscoroutinefunction(stand) == inspect.iscoroutinefunction(submit)
