"""Live mode with a real engine child process (`record --control`, the fast fake planner): the dashboard's
clock drives the engine, a pause stops it, and a fault lands at the time on screen."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.playback import format_clock
from clustertop.tui.sources.live import LiveSource
from test_control import QUIET


@pytest.fixture
def live_source(scenario_file: Any, texts: Any, fake_cli: Any) -> Iterator[LiveSource]:
    """The small scenario, quiet, live: `record --control` for 2 h in a child process with the fake planner;
    closed (the child stopped) when the test ends."""
    path = scenario_file(texts.small + QUIET)
    source = LiveSource(path, command=fake_cli.command("record", path, "-o", "-", "--control", "--duration",
                                                       "2h"))
    yield source
    source.close()


def faults(source: LiveSource) -> list[dict[str, object]]:
    with source.index.lock:
        events = list(source.index.events)
    return [e for e in events if e["type"] == "fault"]


def test_pause_stops_the_engine_and_a_fault_lands_at_the_time_on_screen(live_source: LiveSource) -> None:
    """Defects: after space, 10 s, space the clock jumped 18 simulated minutes; a fault injected after a pause
    landed ~2 minutes later than shown."""

    async def go() -> None:
        app = ClusterTopApp([live_source], speed=100.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.8)
            assert app.playback.follow and app.playback.t > 10.0          # live, at 100x
            await pilot.press("space")
            shown = app.playback.t
            await pilot.pause(1.5)                                        # 150 simulated seconds at 100x
            assert app.playback.t == shown and app.playback.edge == shown
            assert live_source.index.end_t <= shown + 1e-6                # the engine went no further
            await pilot.press("i")
            deadline = time.monotonic() + 10
            while not faults(live_source) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            (fault,) = faults(live_source)
            assert abs(float(fault["t"]) - shown) < 1e-5                   # at the time on screen
            assert app.playback.t == shown
            assert any(f"at {format_clock(shown)}" in str(n.message) for n in app._notifications)
            wall = time.monotonic()
            await pilot.press("space")
            await pilot.pause(0.5)
            moved = app.playback.t - shown
            assert 0 < moved <= (time.monotonic() - wall) * 100 + 5        # from where it paused: no jump

    asyncio.run(go())


def test_the_clock_ticks_between_samples(live_source: LiveSource) -> None:
    """Defect: live at 1x the screen changed every 2-5 s. The clock on screen moves every frame."""

    async def go() -> None:
        app = ClusterTopApp([live_source], speed=1.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            seen = []
            for _ in range(6):
                await pilot.pause(0.15)
                seen.append(app.playback.t)
            assert all(b > a for a, b in itertools.pairwise(seen))              # a new time every 0.15 s
            assert seen[-1] - seen[0] < 2.0                                # at 1x, not faster

    asyncio.run(go())


def test_record_to_stdout_never_draws_a_progress_bar(monkeypatch) -> None:
    """`record -o - | replay -`: the recorder's bar drew over the dashboard; on a terminal it is drawn only
    when the stream goes to a file."""
    from clustertop import progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert not progress.wanted("-") and progress.wanted("run.jsonl.gz")
