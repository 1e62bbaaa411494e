"""Pilot tests of the dashboard: keys and mouse change the app's state as they should (play, speed, seek,
zoom, cursor, metric, help, compare)."""

from __future__ import annotations

import gc

import pytest
from clustertop.cli import main as cli_main
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.grid import View
from clustertop.tui.sources.recording import RecordingSource
from clustertop.tui.widgets.heatmap import Heatmap
from tui_pilot import FLAGSHIP, SIZE, app_at, rendered, sync


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
        from clustertop.tui.palette import FAILED
        failed = set(map(int, (colours == FAILED).nonzero()[0]))
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
async def test_what_startup_made_is_not_scanned_by_every_full_collection() -> None:
    """Once the dashboard runs, the objects of its start are frozen (a full collection scanned them all: 50 to
    100 ms); when it stops they are not any more (many apps run in one process)."""
    before = gc.get_freeze_count()
    app = app_at(30.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)             # a frame or more
        assert gc.get_freeze_count() > before + 10_000
    assert gc.get_freeze_count() == before


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
        for title in ("Play/Pause", "Faster", "Slower", "Seek", "Seek forward", "Event", "Next event",
                      "Zoom in", "Zoom out", "Colour by phase", "Help", "Screenshot", "Theme", "Start",
                      "End"):
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


@sync
async def test_compare_at_80x24_shows_one_view_at_a_time_naming_the_hardware() -> None:
    """Defect: compare refused anything under 110 x 34 ("enlarge to ..."); its sides never named the
    accelerator or the scale-up, and it had no links panel."""
    app = ClusterTopApp([RecordingSource(FLAGSHIP), RecordingSource("recordings/flagship-8k.jsonl.gz")],
                        start_t=30.0, paused=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert not screen.has_class("-too-small")
        assert screen.query_one("#side-a").display and not screen.query_one("#side-b").display
        title = rendered(screen.query_one("#side-a .side-title"))
        assert "16,384 × h100-sxm-80gb" in title and "NVSwitch" in title
        await pilot.press("b")
        await pilot.pause()
        assert screen.query_one("#side-b").display and not screen.query_one("#side-a").display
        await pilot.press("5")
        await pilot.pause()
        assert "NVLink" in rendered(screen.query_one("#links-b"))
        await pilot.press("d")
        await pilot.pause()
        assert screen.has_class("-table") and screen.query_one("#comparison").region.height > 12
        assert "8,192" in rendered(screen.query_one("#comparison"))
        await pilot.press("tab")            # from the table or side B: side A's map, then B's
        await pilot.pause()
        assert screen.query_one("#side-a").display and app.focused is screen.query_one("#heatmap-a")
        await pilot.press("tab")
        await pilot.pause()
        assert screen.query_one("#side-b").display and not screen.query_one("#side-a").display


@sync
async def test_compare_of_a_mesh_says_what_its_tp_group_gets(tmp_path) -> None:
    """mi300x-vs-h100: the xGMI side names its mesh and its links panel tells the '3 of 7 links' story; the
    NVSwitch side tells its half (defect: it had no such line), all links to any peer."""
    mi, h100 = tmp_path / "mi.jsonl", tmp_path / "h.jsonl"
    assert cli_main(["record", "mi300x-vs-h100", "--duration", "5s", "-o", str(mi)]) == 0
    assert cli_main(["record", "h100-vs-mi300x", "--duration", "5s", "-o", str(h100)]) == 0
    app = ClusterTopApp([RecordingSource(str(mi)), RecordingSource(str(h100))], start_t=4.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert "512 × mi300x · xGMI mesh 7 x 64 GB/s" in rendered(screen.query_one("#side-a .side-title"))
        assert "xGMI TP 4: 3 of 7 links, 192 GB/s" in rendered(screen.query_one("#links-a"))
        assert "NVSwitch" in rendered(screen.query_one("#side-b .side-title"))
        assert "of 7 links" not in rendered(screen.query_one("#links-b"))
        links_b = rendered(screen.query_one("#links-b"))
        assert "NVLink TP 4: all links, 450 GB/s" in links_b
