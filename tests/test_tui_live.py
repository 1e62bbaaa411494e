"""Live mode with a real engine child process (`record --control`, the fast fake planner): the dashboard's
clock drives the engine, a pause stops it, and a fault lands at the time on screen."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path

from clustertop.tui.app import ClusterTopApp
from clustertop.tui.playback import format_clock
from clustertop.tui.sources.live import LiveSource
from fake_plan import CLI_WITH_FAKE_PLANNER, SMALL, write_scenario
from test_control import QUIET

TESTS = str(Path(__file__).parent)


def live_source(tmp_path: Path, duration: str = "2h") -> LiveSource:
    path = write_scenario(tmp_path, SMALL + QUIET)
    command = [sys.executable, "-c", CLI_WITH_FAKE_PLANNER, TESTS, "record", path, "-o", "-", "--control",
               "--duration", duration]
    return LiveSource(path, command=command)


def faults(source: LiveSource) -> list[dict[str, object]]:
    with source.index.lock:
        events = list(source.index.events)
    return [e for e in events if e["type"] == "fault"]


def test_pause_stops_the_engine_and_a_fault_lands_at_the_time_on_screen(tmp_path: Path) -> None:
    """Defects: after space, 10 s, space the clock jumped 18 simulated minutes; a fault injected after a pause
    landed ~2 minutes later than shown."""
    source = live_source(tmp_path)

    async def go() -> None:
        app = ClusterTopApp([source], speed=100.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.8)
            assert app.playback.follow and app.playback.t > 10.0          # live, at 100x
            await pilot.press("space")
            shown = app.playback.t
            await pilot.pause(1.5)                                        # 150 simulated seconds at 100x
            assert app.playback.t == shown and app.playback.edge == shown
            assert source.index.end_t <= shown + 1e-6                     # the engine went no further
            await pilot.press("i")
            deadline = time.monotonic() + 10
            while not faults(source) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            (fault,) = faults(source)
            assert abs(float(fault["t"]) - shown) < 1e-5                   # at the time on screen
            assert app.playback.t == shown
            assert any(f"at {format_clock(shown)}" in str(n.message) for n in app._notifications)
            wall = time.monotonic()
            await pilot.press("space")
            await pilot.pause(0.5)
            moved = app.playback.t - shown
            assert 0 < moved <= (time.monotonic() - wall) * 100 + 5        # from where it paused: no jump

    try:
        asyncio.run(go())
    finally:
        source.close()


def test_the_clock_ticks_between_samples(tmp_path: Path) -> None:
    """Defect: live at 1x the screen changed every 2-5 s. The clock on screen moves every frame."""
    source = live_source(tmp_path)

    async def go() -> None:
        app = ClusterTopApp([source], speed=1.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.3)
            seen = []
            for _ in range(6):
                await pilot.pause(0.15)
                seen.append(app.playback.t)
            assert all(b > a for a, b in itertools.pairwise(seen))              # a new time every 0.15 s
            assert seen[-1] - seen[0] < 2.0                                # at 1x, not faster

    try:
        asyncio.run(go())
    finally:
        source.close()


def test_record_to_stdout_never_draws_a_progress_bar(monkeypatch) -> None:
    """`record -o - | replay -`: the recorder's bar drew over the dashboard; on a terminal it is drawn only
    when the stream goes to a file."""
    from clustertop import progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert not progress.wanted("-") and progress.wanted("run.jsonl.gz")
