"""Pilot tests of the dashboard: keys and mouse change the app's state as they should."""

from __future__ import annotations

import asyncio
import functools
import io
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from clustertop.cli import main as cli_main
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.grid import View
from clustertop.tui.sources.recording import RecordingSource
from clustertop.tui.widgets.heatmap import Heatmap
from rich.console import Console

FLAGSHIP = "recordings/flagship-16k.jsonl.gz"


def recorded(kind: str) -> list[dict[str, Any]]:
    """The committed recording's events of one kind (the figures the screen must show come from them)."""
    from clustertop.engine.stream.reader import iter_events

    return [e for e in iter_events(FLAGSHIP) if e["type"] == kind]
SIZE = (200, 60)


def rendered(widget: Any) -> str:
    """The text a Static shows."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def unwrapped(text: str) -> str:
    """The event log's text with its wrapped continuation lines joined back."""
    return re.sub(r"\n {11,}", " ", text)


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async pilot test on its own event loop (no asyncio plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def app_at(t: float = 30.0, paused: bool = True, path: str = FLAGSHIP) -> ClusterTopApp:
    return ClusterTopApp([RecordingSource(path)], start_t=t, paused=paused)


@sync
async def test_space_pauses_and_plays() -> None:
    app = app_at(10.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        assert app.playback.t == 10.0                      # paused: the clock stands still
        app.playback.speed = 10.0
        await pilot.press("space")
        assert not app.playback.paused
        await pilot.pause(0.3)
        assert app.playback.t > 10.5                       # playing at 10x moves the clock
        assert app.states[0].t > 10.0                      # and the state follows it
        await pilot.press("space")
        t = app.playback.t
        await pilot.pause(0.2)
        assert app.playback.paused and app.playback.t == t


@sync
async def test_speed_keys() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("plus", "plus")
        assert app.playback.speed == 5.0
        await pilot.press("minus", "minus", "minus")
        assert app.playback.speed == pytest.approx(0.5)


@sync
async def test_seek_keys_rebuild_the_state() -> None:
    app = app_at(30.0)
    async with app.run_test(size=SIZE) as pilot:
        step = app.seek_step()
        await pilot.press("right")
        assert app.playback.t == pytest.approx(30.0 + step)
        await pilot.press("home")
        assert app.playback.t == app.playback.start
        assert app.states[0].jobs["pretrain"].step == 0
        await pilot.press("end")
        assert app.playback.t == app.playback.end
        assert app.states[0].jobs["pretrain"].step >= 4
        await pilot.press("home", "right_square_bracket")      # next event: the checkpoint at 20 s
        events = app.sources[0].index.event_times()
        first_after = min(e for e in events if e > app.playback.start + 1e-6)
        assert app.playback.t == pytest.approx(first_after)
        await pilot.press("end", "left_square_bracket")
        assert app.playback.t == pytest.approx(max(events))
        assert app.states[0].events[-1]["t"] == pytest.approx(max(events))


@sync
async def test_zoom_keys_walk_the_hierarchy() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        heatmap.set_cursor(5000)
        await pilot.press("enter")
        assert heatmap.view == View("pod", 1)
        await pilot.press("enter")
        assert heatmap.view == View("rack", 5000 // 16)
        await pilot.press("enter")
        assert heatmap.view == View("node", 5000 // 8)
        assert heatmap.layout_info.g == 1
        await pilot.press("backspace", "backspace", "backspace")
        assert heatmap.view == View("site")
        assert heatmap.cursor_gpu == 5000


@sync
async def test_cursor_keys_and_mouse() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        await pilot.press("enter")                           # pod 0, one GPU per pixel
        assert heatmap.cursor_span == (0, 1)
        await pilot.press("j")
        assert heatmap.cursor_gpu == 1                       # down the rack
        await pilot.press("l")
        assert heatmap.cursor_gpu == 17                      # next rack, same slot
        await pilot.press("h", "k")
        assert heatmap.cursor_gpu == 0
        lay = heatmap.layout_info
        target = lay.pixel_of(16 * 10 + 4)                    # rack 10, slot 4: click its cell
        x, yh = int(lay.pixel_x[target]), int(lay.pixel_yh[target])
        gutter = heatmap.styles.gutter
        await pilot.click(Heatmap, offset=(x + gutter.left, yh // 2 + gutter.top))
        assert heatmap.cursor_span[0] // 16 == 10
        inspector = rendered(app.screen.query_one("#inspector"))
        assert f"GPU {heatmap.cursor_gpu:,}" in inspector and "rack 10" in inspector and "PP" in inspector


@sync
async def test_metric_keys() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        assert heatmap.metric == "util"
        await pilot.press("m")
        assert heatmap.metric == "power"
        await pilot.press("m")
        assert heatmap.metric == "phase"
        await pilot.press("1")
        assert heatmap.metric == "util"
        await pilot.press("3")
        assert heatmap.metric == "phase"
        legend = rendered(app.screen.query_one("#legend"))
        assert "computing" in legend and "failed" in legend


@sync
async def test_failed_gpus_show_in_phase_colour_at_site_zoom() -> None:
    app = app_at(41.0)                                        # during the fault of the stand-in recording
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        heatmap = app.screen.query_one(Heatmap)
        lay = heatmap.layout_info
        colours = heatmap.pixel_colours(lay)
        from clustertop.tui.palette import PHASE_BASE
        failed = set(map(int, (colours == PHASE_BASE + 10).nonzero()[0]))
        assert failed, "a failed node must show at the site view"
        gpus = app.states[0].phase == 10
        assert {lay.pixel_of(int(g)) for g in gpus.nonzero()[0]} == failed


@sync
async def test_heatmap_frame_is_cached_until_the_state_changes() -> None:
    app = app_at(30.0)
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        first = heatmap.render_line(3)
        assert heatmap.render_line(3) is first                # same state: cached
        await pilot.press("right")
        await pilot.pause()
        assert heatmap.render_line(3) is not first


@sync
async def test_help_and_theme_and_too_small() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ == "MainScreen"
        await pilot.press("t")
        assert not app.current_theme.dark
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.screen.has_class("-too-small")          # 80 x 24 works (it was refused)
        await pilot.resize_terminal(59, 24)
        await pilot.pause()
        assert app.screen.has_class("-too-small")
        assert "enlarge to 60 x 20" in rendered(app.screen.query_one("TooSmall"))
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert not app.screen.has_class("-too-small")


@sync
async def test_after_too_small_the_cursor_keys_work_and_a_paused_resize_redraws_the_legend() -> None:
    """Defects: enlarged again, the cursor keys did nothing until tab; a paused resize left stale legend and
    cursor text."""
    from clustertop.tui.widgets.inspector import Inspector
    from clustertop.tui.widgets.legend import Legend

    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "= 2 GPUs" in rendered(app.screen.query_one(Legend))
        await pilot.resize_terminal(50, 15)
        await pilot.pause()
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        assert "= 8 GPUs" in rendered(app.screen.query_one(Legend))
        assert "GPUs 0–7 (8)" in rendered(app.screen.query_one(Inspector))
        await pilot.press("l")
        assert heatmap.cursor_gpu > 0                 # the cursor moved: no tab needed


@sync
async def test_inject_fault_needs_a_live_engine() -> None:
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("i")
        await pilot.pause()
        assert any("live engine" in str(n.message) for n in app._notifications)


@sync
async def test_command_palette_lists_every_action() -> None:
    app = app_at()
    async with app.run_test(size=SIZE):
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for title in ("Play / pause", "Faster", "Slower", "Seek back", "Seek forward", "Previous event",
                      "Next event", "Zoom in", "Zoom out", "Colour by phase", "Help", "Save SVG screenshot",
                      "Toggle dark / light"):
            assert title in titles
        assert "Follow live" not in titles and "Inject fault" not in titles     # live-only: not in a replay


@sync
async def test_compare_keeps_both_sides_on_one_clock() -> None:
    app = ClusterTopApp([RecordingSource(FLAGSHIP), RecordingSource("recordings/flagship-8k.jsonl.gz")],
                        start_t=10.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right", "right")
        t = app.playback.t
        assert all(abs(s.t - t) <= 0.5 for s in app.states)
        assert [s.gpus for s in app.states] == [16384, 8192]
        table = rendered(app.screen.query_one("#comparison"))
        assert "16,384" in table and "8,192" in table


def test_replay_of_a_bad_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    assert cli_main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clustertop: ") and "bad.jsonl:1" in err and "\n" not in err
    assert cli_main(["replay", str(tmp_path / "missing.jsonl.gz")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli_main(["compare", str(bad), FLAGSHIP]) == 2
    assert cli_main(["compare", "no-such-scenario", FLAGSHIP]) == 2
    assert "unknown scenario" in capsys.readouterr().err


@sync
async def test_starts_with_the_requested_metric() -> None:
    app = ClusterTopApp([RecordingSource(FLAGSHIP)], start_t=30.0, paused=True, metric="phase")
    async with app.run_test(size=SIZE):
        assert app.screen.query_one(Heatmap).metric == "phase"


@sync
async def test_the_fault_and_restart_of_the_real_recording_are_on_screen() -> None:
    """The committed recording: a GPU fault at 40 s on GPU 1000 (node 125), restart at 51 s from step 3."""
    from clustertop.tui.widgets.event_log import EventLog
    from clustertop.tui.widgets.jobs import JobsPanel

    app = ClusterTopApp([RecordingSource(FLAGSHIP)], start_t=45.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        jobs = rendered(app.screen.query_one(JobsPanel))
        assert "down 5.0s" in jobs and re.search(r"interrupts +1\b", jobs)
        # stopped: its last step's rates are history, not live figures; the time lost counts the downtime
        assert re.search(r"tokens/s +—", jobs) and re.search(r"MFU +—", jobs) and re.search(r"step time +—", jobs)
        assert re.search(r"time lost +5.0s", jobs)
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "FAULT Faulty GPU · [gpu] · gpu\u00a01,000 node\u00a0125 (injected)" in log
        assert "restart" not in log
        await pilot.press("end")
        await pilot.pause()
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "restart pretrain from step 3, 13\u00a0s of work lost (2\u00a0steps), down 11\u00a0s" in log
        jobs = rendered(app.screen.query_one(JobsPanel))
        assert "running" in jobs and re.search(r"tokens lost +33.6M", jobs)
        restart = recorded("restart")[0]                # ~13 s of work and 11 s down
        assert re.search(rf"time lost +{restart['lost_s'] + restart['downtime_s']:.1f}s", jobs)


SWEEP = "recordings/sweep-16k.jsonl"


@sync
async def test_sweep_results_table_sorted_and_enter_prepares_the_point(tmp_path) -> None:
    """Rows by step time, out-of-memory then invalid points last; enter rebuilds the chosen point's scenario."""
    from clustertop.commands.replay import point_toml
    from clustertop.engine.config import scenario
    from clustertop.engine.stream.sweep_records import looks_like_sweep_results, read_results
    from clustertop.tui.sweep import SweepApp, status
    from textual.widgets import DataTable

    assert looks_like_sweep_results(SWEEP) and not looks_like_sweep_results(FLAGSHIP)
    records = read_results(SWEEP)
    app = SweepApp(records, "sweep-16k.jsonl", prepare=lambda record: point_toml(record, str(tmp_path)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.query_one(DataTable).row_count == len(records) == 12
        states = [status(r) for r in app.records]
        assert states == ["ok"] * 2 + ["oom"] * 4 + ["invalid"] * 6
        steps = [r["jobs"][0]["step_time_s"] for r in app.records[:2]]
        assert steps == sorted(steps) and app.records[0]["point"]["jobs[0].virtual_stages"] == 4
        await pilot.press("down", "enter")       # the second-best point: tp 8, pp 16, virtual_stages 1
        await pilot.pause()
    chosen = scenario.load(app.return_value)
    job = chosen.jobs[0]
    assert (job.tp, job.pp, job.dp, job.virtual_stages) == (8, 16, 128, 1)


@sync
async def test_an_invalid_sweep_point_is_not_run(tmp_path) -> None:
    from clustertop.engine.stream.sweep_records import read_results
    from clustertop.tui.sweep import SweepApp

    app = SweepApp(read_results(SWEEP), "sweep-16k.jsonl", prepare=lambda record: "ran")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*["down"] * 11)
        await pilot.pause()
        assert app.selected()["index"] == 9 and "error" in app.selected()
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running and app.return_value is None


@sync
async def test_sweep_table_ranks_by_each_objective_and_sorts_by_a_column(tmp_path) -> None:
    """o ranks the fitting points by the next objective; a header click sorts by that column (again: reversed),
    points without the figure last; enter runs the row shown."""
    from clustertop.engine.stream.sweep_records import RANKS, read_results
    from clustertop.tui.sweep import SweepApp
    from textual.widgets import DataTable, Static

    app = SweepApp(read_results(SWEEP), "sweep-16k.jsonl", prepare=lambda record: record["index"])
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)
        about = lambda: str(app.query_one("#about", Static).render())
        assert app.objective == RANKS["step_time"] and "ranked by step time" in about()
        seen = []
        for _ in RANKS:
            await pilot.press("o")
            await pilot.pause()
            seen.append(app.objective)
            assert f"ranked by {app.objective}" in about() and table.row_count == 12
        assert sorted(seen) == sorted(RANKS.values()) and seen[-1] == RANKS["step_time"]

        def click(column: str) -> None:
            index = list(table.columns).index(column)
            key = list(table.columns)[index]
            table.post_message(DataTable.HeaderSelected(table, key, index, table.columns[key].label))

        click("mem GB/GPU")
        await pilot.pause()
        memory = [r["jobs"][0]["memory_gb_per_gpu"] for r in app.shown if "jobs" in r]
        assert memory == sorted(memory) == [67.61, 70.61, 87.11, 90.69, 91.15, 131.31]
        assert all("error" in r for r in app.shown[6:]) and "sorted by mem GB/GPU (ascending" in about()
        click("mem GB/GPU")
        await pilot.pause()
        assert [r["jobs"][0]["memory_gb_per_gpu"] for r in app.shown[:6]] == memory[::-1]
        assert all("error" in r for r in app.shown[6:])                   # still last
        click("jobs[0].pp")
        await pilot.pause()
        assert [r["point"]["jobs[0].pp"] for r in app.shown] == [8] * 4 + [9] * 4 + [16] * 4
        # "#" keeps each point's rank by the objective: the best point (index 11) is #1 wherever it is shown
        row = [r["index"] for r in app.shown].index(11)
        assert str(table.get_row_at(row)[0]) == "1"
        table.move_cursor(row=row)
        await pilot.press("enter")
        await pilot.pause()
    assert app.return_value == 11


@sync
async def test_sweep_table_of_several_jobs_shows_and_sorts_the_same_figures() -> None:
    """A point of two jobs shows (and sorts by) its slowest job's step, all its tokens/s, its largest memory; a
    point without a figure sorts last either way; the cursor stays on its point."""
    from clustertop.tui.sweep import SweepApp
    from textual.widgets import DataTable

    def job(name: str, step: float | None, rate: float, mem: float | None) -> dict:
        return {"name": name, "gpus": 8, "fits": step is not None, "step_time_s": step, "tokens_per_s": rate,
                "mfu": 0.4, "model_tflops_per_gpu": 400.0, "memory_gb_per_gpu": mem}

    records = [{"index": 0, "point": {"x": 1}, "jobs": [job("a", 1.0, 100.0, 50.0), job("b", 2.0, 50.0, 60.0)]},
               {"index": 1, "point": {"x": 2}, "jobs": [job("a", 1.5, 80.0, 40.0), job("b", 1.5, 80.0, 30.0)]},
               {"index": 2, "point": {"x": 3}, "jobs": [job("a", None, 0.0, None)]},
               {"index": 3, "point": {"x": 4}, "error": "refused"}]
    app = SweepApp(records, "two-jobs.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)

        async def click(column: str) -> list[int]:
            key = next(k for k in table.columns if k.value == column)
            table.post_message(DataTable.HeaderSelected(table, key, list(table.columns).index(key),
                                                        table.columns[key].label))
            await pilot.pause()
            return [r["index"] for r in app.shown]

        assert [r["index"] for r in app.shown] == [1, 0, 2, 3]      # by tokens/s per GPU: 160 / 16 > 150 / 16
        table.move_cursor(row=1)                                     # on point 0
        assert await click("step s") == [1, 0, 2, 3]                 # slowest jobs: 1.5 s < 2.0 s
        steps = [str(table.get_row_at(i)[list(table.columns).index(next(k for k in table.columns
                                                                         if k.value == "step s"))]) for i in (0, 1)]
        assert steps == ["1.500", "2.000"] and app.selected()["index"] == 0
        assert await click("mem GB/GPU") == [1, 0, 2, 3]             # largest memory: 40 < 60; none last
        assert await click("mem GB/GPU") == [0, 1, 2, 3]             # reversed; none still last
        assert await click("rank") == [1, 0, 2, 3]
        assert await click("rank") == [2, 0, 1, 3]                   # reversed; the invalid point still last
        assert app.selected()["index"] == 0


def test_a_bad_sweep_file_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "results.jsonl"
    bad.write_text('{"index": 0, "point": {"jobs[0].tp": 8}}\nnot json\n')
    assert cli_main(["replay", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:2" in err[0] and "not JSON" in err[0]


@sync
async def test_compare_a_recording_that_ended_is_not_compared_as_current(tmp_path) -> None:
    """Defects: a recording that had ended still said "running" and its last sample was compared as current;
    "0 vs 0 = 1.00x" before the first step."""
    import gzip

    with gzip.open("recordings/flagship-8k.jsonl.gz") as f:
        lines = f.read().splitlines(keepends=True)
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"".join(line for line in lines if line.startswith(b'{"t":') is False or
                               float(line[5:line.index(b",")]) <= 20.0))
    app = ClusterTopApp([RecordingSource(FLAGSHIP), RecordingSource(str(short))], start_t=0.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = rendered(app.screen.query_one("#comparison"))
        row = next(line for line in table.splitlines() if "mean utilization" in line)
        assert row.split()[-4:] == ["0%", "0%", "—", "—"]          # nothing yet: no difference, no ratio
        app.seek(45.0)
        await pilot.pause()
        table = rendered(app.screen.query_one("#comparison"))
        assert "ended 00:00:20.0" in table
        row = next(line for line in table.splitlines() if "tokens/s " in line)
        assert row.rstrip().endswith("—") and "x" not in row.split()[-1]
        side_b = rendered(app.screen.query_one("#jobs-b"))
        assert "recording ended 00:00:20.0" in side_b and "running" not in side_b


def test_power_reads_in_kw_below_a_megawatt_and_with_separators() -> None:
    from clustertop.tui import format as fmt

    assert fmt.power(0.0123) == "12.3 kW"                         # 8 GPUs: not "0.01 MW"
    assert fmt.power(24.56) == "24.56 MW"
    assert fmt.power(2789.75) == "2,789.8 MW" and fmt.power(5000.0) == "5,000.0 MW"


@sync
async def test_sweep_table_s_saves_a_screenshot_and_question_mark_shows_help(tmp_path, monkeypatch) -> None:
    """Defect: `s` and `?` did nothing in the sweep table."""
    from clustertop.engine.stream.sweep_records import read_results
    from clustertop.tui.sweep import SweepApp, SweepHelp

    monkeypatch.chdir(tmp_path)
    app = SweepApp(read_results(str(Path(__file__).parent.parent / SWEEP)), "sweep-16k.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, SweepHelp)
        await pilot.press("escape", "s")
        await pilot.pause()
        assert not isinstance(app.screen, SweepHelp) and list(tmp_path.glob("*.svg"))


def test_live_title_names_the_scenario_once_and_a_point_by_its_name() -> None:
    """Defects: the title repeated the scenario name; a sweep point showed its temporary path."""
    from clustertop.tui.jobinfo import describe
    from clustertop.tui.sources.live import display_name

    state = RecordingSource(FLAGSHIP).state_at(1.0)
    assert describe(state, "llama3-405b-16k").count("llama3-405b-16k") == 1
    assert describe(state, "flagship-16k.jsonl.gz").startswith("flagship-16k.jsonl.gz · llama3-405b-16k · ")
    assert display_name("/tmp/clustertop-sweep-x1/llama3-405b-16k-point-3.toml") == "llama3-405b-16k-point-3"


@sync
async def test_event_log_folds_checkpoints_filters_and_seeks() -> None:
    """Defects: each checkpoint added four event lines; no filter by kind; enter on an event did nothing; ] at the
    end said nothing useful."""
    from clustertop.tui.widgets.event_log import EventLog

    app = app_at(30.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert log.count("checkpoint") == 1 and "power swing" not in log
        down, up = recorded("power_swing")[:2]          # the checkpoint's stall and its end
        assert (f"checkpoint pretrain step 3 written in 2.8\u00a0s · power {down['from_mw']:.2f} MW → "
                f"{down['to_mw']:.2f} MW → {up['to_mw']:.2f} MW") in log
        app.seek(60.0)
        await pilot.press("e")                                  # no power swings
        await pilot.pause()
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "power swing" not in log and "FAULT" in log
        await pilot.press("e")                                  # faults and restarts
        await pilot.pause()
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "checkpoint" not in log and "FAULT" in log and "restart" in log
        events = app.screen.query_one(EventLog)
        events.focus()
        await pilot.press("up", "enter")                         # the fault (the restart is the newest)
        await pilot.pause()
        assert app.playback.t == pytest.approx(40.0, abs=0.01)
        await pilot.press("right_square_bracket")               # the restart, at 51 s
        assert app.playback.t == pytest.approx(51.0, abs=0.01)
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert any("No later event: the last was at 00:00:51.0" in str(n.message) for n in app._notifications)


def two_jobs_source(names: tuple[str, str] = ("prometheus-pretrain-405b", "frontier-moe-serving")) -> Any:
    """A 6,144-GPU cluster in two pods with two jobs (one a pod each), one sample; the second job down."""
    import numpy as np
    from clustertop.engine.stream import schema
    from clustertop.tui.index import EventIndex
    from clustertop.tui.sources import Source

    topology = {"gpus": 6144, "gpus_per_node": 8, "gpus_per_rack": 16, "gpus_per_pod": 3072,
                "gpus_per_building": 6144}
    jobs = [{"name": name, "first_gpu": 3072 * i, "gpus": 3072, "tp": 8, "cp": 1, "pp": 4, "dp": 96, "ep": 1,
             "model": "llama3.1-405b"} for i, name in enumerate(names)]
    header = {"type": "header", "schema": schema.SCHEMA, "schema_version": schema.SCHEMA_VERSION,
              "scenario": {"name": "two", "cluster": {"gpu": {"name": "h100", "tdp_w": 700.0}}},
              "topology": topology, "jobs": jobs, "sample_interval_s": 1.0, "duration_s": 60.0}
    index = EventIndex(header)
    index.add({"t": 0.0, "type": "job_start", "job": names[0]})
    index.add({"t": 0.0, "type": "job_start", "job": names[1]})
    util = np.r_[np.full(3072, 80), np.zeros(3072, int)]
    for t in (1.0, 2.0):
        index.add({"t": t, "type": "step", "job": names[0], "step": int(t), "step_time_s": 1.0,
                   "tokens_per_s": 2.5e6, "mfu": 0.4, "tflops_per_gpu": 400.0, "tokens_total": 2.5e6 * t})
        index.add({"t": t, "type": "step", "job": names[1], "step": int(t), "step_time_s": 2.0,
                   "tokens_per_s": 1.1e6, "mfu": 0.2, "tflops_per_gpu": 200.0, "tokens_total": 1.1e6 * t})
        index.add({"t": t, "type": "sample", "util": schema.rle_encode(util),
                   "power_w": schema.rle_encode(util * 7), "phase": schema.rle_encode((util > 0).astype(int)),
                   "links": {"node": [0.3, 0.0], "leaf": [0.2, 0.0], "spine": [0.97, 0.0], "core": 0.1},
                   "site_mw": 3.0})
    index.add({"t": 2.5, "type": "fault", "job": names[1], "gpu": 4000, "cause": "Faulty GPU", "component": "gpu"})
    index.finish()
    return Source("two.jsonl", index)


@sync
async def test_jobs_are_named_on_the_map_and_one_can_be_highlighted() -> None:
    """At any zoom a reader can tell which block is which job; n highlights one job and dims the others."""
    from clustertop.tui import palette

    app = ClusterTopApp([two_jobs_source()], start_t=3.0, paused=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        lay = heatmap.layout_info
        labelled = {name for _, _, _, name in heatmap.job_labels(lay)}
        assert labelled == {"prometheus-pretrain-405b", "frontier-moe-serving"}
        from rich.color import Color

        def colours() -> set[Any]:
            return {c for strip in heatmap.render_frame() for seg in strip if seg.style
                    for c in (seg.style.color, seg.style.bgcolor)}

        dim = Color.parse(heatmap._theme().colours[palette.DIM])
        assert dim not in colours()
        await pilot.press("n")
        assert heatmap.highlight == "prometheus-pretrain-405b"
        assert "job prometheus-pretrain-405b" in str(app.screen.query_one("#map").border_title)
        assert dim in colours()                            # the other job's GPUs are dimmed
        await pilot.press("n", "n")
        assert heatmap.highlight is None


@sync
async def test_jobs_table_keeps_names_and_widths_and_shows_a_down_job_as_stopped() -> None:
    """Defects: names cut to "fro...", headers to "TFL...", widths changing each frame; a job that is down still
    showed its running tokens/s and MFU."""
    from clustertop.tui.widgets.jobs import JobsPanel

    app = ClusterTopApp([two_jobs_source()], start_t=1.5, paused=True)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(JobsPanel)
        before = rendered(panel).splitlines()
        assert any("prometheus-pretrain-405b" in line for line in before)
        assert any("frontier-moe-serving" in line and "1.10M" in line for line in before)
        app.seek(3.0)                                      # the second job is down since 2.5 s
        await pilot.pause()
        after = rendered(panel).splitlines()
        header = after[0]
        assert header == before[0] and "tok/s" in header and "MFU" in header
        assert [line.index(" ") for line in after[1:3]] == [line.index(" ") for line in before[1:3]]
        down = next(line for line in after if "frontier-moe-serving" in line)
        assert "down" in down and "1.10M" not in down and "20.0%" not in down
        await pilot.press("o")                             # sort by tokens/s: the running job first
        await pilot.pause()
        rows = rendered(panel).splitlines()
        assert "prometheus" in rows[1] and panel.sort == "tokens/s"
    narrow = ClusterTopApp([two_jobs_source()], start_t=1.5, paused=True)
    async with narrow.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        rows = rendered(narrow.screen.query_one(JobsPanel)).splitlines()
        names = [row.split()[0] for row in rows[1:3]]
        prom = next(name for name in names if name.startswith("prome"))     # a stable abbreviation
        assert "…" in prom and prom.endswith("405b")
        assert "prometheus-pretrain-405b" in str(narrow.screen.query_one(JobsPanel).tooltip)


@sync
async def test_links_view_shows_each_pod_and_names_a_hot_or_degraded_one() -> None:
    """A pod whose spine is busier than the others stands out and is named; the scenario's degraded links are named
    in the links panel and, for the jobs that cross them, in the event log."""
    from clustertop.tui.widgets.event_log import EventLog
    from clustertop.tui.widgets.links import LinksPanel

    source = two_jobs_source()
    source.index.header["scenario"]["cluster"]["degraded"] = [{"tier": "spine", "pod": 0, "capacity": 0.5}]
    app = ClusterTopApp([source], start_t=1.5, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        links = rendered(app.screen.query_one(LinksPanel))
        spine = next(line for line in links.splitlines() if line.startswith("spine"))
        assert "97%" in spine and "█▁" in spine                    # pod 0 full, pod 1 idle
        assert "hottest spine pod 0 97%" in links and "degraded spine pod 0 at 50%" in links
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "degraded spine in pod 0 (50% of its links) slows prometheus-pretrain-405b" in log
        assert "slows frontier-moe-serving" not in log             # its pod is not degraded


@sync
async def test_drill_down_lists_each_gpu_at_rack_zoom_and_the_worst_at_site_zoom() -> None:
    """At node and rack zoom a row per GPU (utilization, power, memory, phase shares, history) instead of mostly
    empty tiles; w at site zoom lists the worst GPUs of the view, failed first."""
    from clustertop.tui.widgets.gpu_table import GpuTable

    app = app_at(30.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(GpuTable)
        assert not table.display
        await pilot.press("enter", "enter")                   # pod 0, then rack 0
        await pilot.pause()
        await pilot.pause()
        assert app.screen.query_one(Heatmap).view.level == "rack" and table.display
        rows = rendered(table).splitlines()
        assert rows[0].split()[:5] == ["GPU", "job", "util", "power", "memory"]
        body = [row for row in rows[1:] if row.strip()]
        assert [row.split()[0] for row in body] == [str(g) for g in range(16)]
        assert all("pretrain" in row and "cmp" in row and "%" in row for row in body)
        assert all(any(ch in row for ch in "▁▂▃▄▅▆▇█") for row in body)   # a history per GPU
        await pilot.press("backspace", "backspace")
        app.seek(41.0)
        await pilot.press("w")
        await pilot.pause()
        await pilot.pause()
        rows = [row for row in rendered(table).splitlines()[1:] if row.strip()]
        assert rows and all("FAIL" in row for row in rows[:8])
        assert rows[0].split()[0] == "1,000"
