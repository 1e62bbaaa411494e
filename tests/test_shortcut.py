"""A job's waits passed at once when nothing else is due (engine/sim/shortcut.py): fewer SimPy events, the
same run to the byte."""

from __future__ import annotations

import pytest
from clustertop.engine.config import scenario
from clustertop.engine.sim import shortcut
from clustertop.engine.sim.run import Run


def _lines(name: str, duration_s: float, *, waiting: bool, monkeypatch: pytest.MonkeyPatch,
           **kwargs: float) -> list[bytes]:
    with monkeypatch.context() as patch:
        if waiting:                                   # every wait a SimPy timeout, as before the shortcut
            patch.setattr(shortcut, "skip", lambda *args: False)
        return list(Run(scenario.load(name), duration_s=duration_s, **kwargs).lines())


@pytest.mark.parametrize(("name", "duration_s", "sample_s"), [
    ("llama3-405b-16k", 2 * 86400.0, 1200.0),          # one job, sync checkpoints, faults and maintenance
    ("shared-fabric", 4 * 3600.0, 60.0),               # jobs sharing tiers: a neighbour's step wakes a job
    ("hyperion-5gw", 3600.0, 30.0),                    # several jobs, async checkpoints
    ("meta-129k-h100", 6 * 3600.0, 300.0),
])
def test_the_shortcut_writes_the_same_lines_as_waiting(name: str, duration_s: float, sample_s: float,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _lines(name, duration_s, waiting=False, monkeypatch=monkeypatch, sample_s=sample_s)
    slow = _lines(name, duration_s, waiting=True, monkeypatch=monkeypatch, sample_s=sample_s)
    assert len(fast) > 100
    assert fast == slow


def test_a_checkpoint_cycle_takes_no_simpy_event_when_nothing_else_is_due() -> None:
    """The flagship checkpoints every ~4 minutes and samples every 20: most cycles (the wait for the
    checkpoint's step, the write, the site's two looks at its level) run without stepping SimPy."""
    run = Run(scenario.load("llama3-405b-16k"), duration_s=86400.0, sample_s=1200.0)
    env = run.env
    steps = 0
    step = env.step

    def counting() -> None:
        nonlocal steps
        steps += 1
        step()

    env.step = counting                               # type: ignore[method-assign]
    lines = list(run.lines())
    checkpoints = sum(b'"checkpoint_start"' in raw for raw in lines)
    assert checkpoints > 300
    assert steps < 2 * checkpoints                    # waiting: ~5 events a cycle


def test_skip_waits_when_something_is_due_by_then() -> None:
    """Nothing done when another event is due at or before the wait's end, or the end is past the horizon;
    else the pending look runs first and the clock is at now + delay."""
    import simpy

    env = simpy.Environment(initial_time=10.0)
    looked: list[float] = []
    pending = env.timeout(0)
    env.timeout(5.0)                                  # due at 15
    assert not shortcut.skip(env, 5.0, 100.0, pending, lambda: looked.append(env.now))
    assert not shortcut.skip(env, 1.0, 10.5, pending, lambda: looked.append(env.now))   # past the horizon
    assert not shortcut.skip(env, 1.0, 100.0, None, lambda: None)        # the look is due first
    assert looked == [] and env.now == 10.0
    assert shortcut.skip(env, 4.5, 100.0, pending, lambda: looked.append(env.now))
    assert looked == [10.0] and env.now == 14.5 and env.peek() == 15.0
    assert not shortcut.skip(env, 0.5, 100.0, None, lambda: None)        # 15 is due by then (a tie waits)
