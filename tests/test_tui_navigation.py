"""Navigation as k9s and lazygit users expect: the event log holds the whole run up to now (filters over all
of it, Home/End inside it), Enter on an event that names a place moves the map's cursor there, `/` searches
GPUs, nodes, racks, pods, hosts and jobs, and `n`/`N` step through the hits."""

from __future__ import annotations

from clustertop.engine.stream.state import ClusterState
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.grid import View
from clustertop.tui.index import EventIndex
from clustertop.tui.search import Hit, find, place_of
from clustertop.tui.sources import Source
from clustertop.tui.widgets.event_log import EventLog
from clustertop.tui.widgets.heatmap import Heatmap
from test_tui_model import header, sample
from test_tui_panels import two_jobs_source
from tui_pilot import FLAGSHIP, SIZE, app_at, rendered, sync, unwrapped


def _long_run() -> Source:
    """A fault at 5 s on GPU 1000, then 700 checkpoints (1,400 events and their power swings) to 2,100 s."""
    index = EventIndex(header())
    index.add({"t": 0.0, "type": "job_start", "job": "train"})
    index.add(sample(1.0, util=90))
    index.add({"t": 5.0, "type": "fault", "job": "train", "gpu": 1000, "node": 125, "cause": "Faulty GPU"})
    for k in range(700):
        t = 10.0 + 3 * k
        index.add({"t": t, "type": "checkpoint_start", "job": "train", "step": k})
        index.add({"t": t + 1, "type": "checkpoint_end", "job": "train", "step": k, "ok": True})
        index.add({"t": t + 1, "type": "power_swing", "from_mw": 20.0, "to_mw": 21.0})
    index.add(sample(2100.0, util=90))
    index.finish()
    return Source("long.jsonl", index)


@sync
async def test_the_event_log_filters_the_whole_run_and_home_end_move_in_it() -> None:
    """Defect: the faults filter kept a short recent window: checkpoints pushed the fault out."""
    app = ClusterTopApp([_long_run()], start_t=2100.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("e", "e")                              # faults and restarts
        await pilot.pause()
        log = app.screen.query_one(EventLog)
        assert "FAULT Faulty GPU" in unwrapped(rendered(log))
        await pilot.press("e")                                   # all events again
        log.focus()
        await pilot.press("home")
        assert log.chosen == 0 and app.playback.t == 2100.0       # in the list, not the clock
        await pilot.pause()
        assert "job train started" in rendered(log)
        await pilot.press("end")
        assert log.chosen == len(log._entries) - 1 > 690
        app.seek(7.0)                                            # at 7 s the log ends with the fault
        await pilot.pause()
        assert rendered(log).rstrip().splitlines()[-1].startswith("00:00:05.0 FAULT")


@sync
async def test_enter_on_a_fault_seeks_and_moves_the_cursor_to_its_gpu() -> None:
    """Defect: Enter on `FAULT ... gpu 1,000 node 125` seeked but left the map where it was."""
    app = app_at(55.0)
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        heatmap.set_cursor(9000)
        await pilot.press("enter", "enter")                       # zoomed to a rack of pod 2
        assert heatmap.view.level == "rack" and not heatmap.view.span(heatmap.hierarchy)[0] <= 1000
        log = app.screen.query_one(EventLog)
        log.focus()
        await pilot.pause()
        fault = next(i for i, e in enumerate(log._entries) if e.kind == "fault")
        log.chosen = fault
        await pilot.press("enter")
        await pilot.pause()
        assert app.playback.t == 40.0
        assert heatmap.cursor_gpu == 1000 and heatmap.view == View("rack", 1000 // 16)


def test_search_finds_gpus_places_hosts_and_jobs() -> None:
    state = ClusterState({**header(), "telemetry": {"hosts": [f"h100-{i:03d}" for i in range(2048)]}})
    assert find("1000", state) == [Hit("gpu 1,000", 1000, 1001)]
    assert find("gpu 1,000", state) == find("g1000", state) == find("1000", state)
    assert find("node 125", state) == [Hit("node 125", 1000, 1008)] == find("n125", state)
    assert find("rack 13", state) == [Hit("rack 13", 208, 224)]
    assert find("pod 3", state)[0].gpu0 == 3 * 3072
    assert find("99999", state) == [] and find("", state) == []
    assert find("h100-012", state) == [Hit("host h100-012", 96, 104)]
    assert [h.label for h in find("trai", state)] == ["job train"]
    assert place_of({"type": "fault", "gpu": 7, "node": 0}, state) == Hit("gpu 7", 7, 8)
    assert place_of({"type": "fault", "host": "h100-002"}, state) == Hit("host h100-002", 16, 24)
    assert place_of({"type": "restart", "job": "train"}, state) == Hit("job train", 0, 16384)
    assert place_of({"type": "power_swing"}, state) is None


@sync
async def test_slash_searches_and_n_steps_through_the_hits() -> None:
    app = ClusterTopApp([two_jobs_source(("train-a", "train-b"))], start_t=2.0, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        heatmap = app.screen.query_one(Heatmap)
        await pilot.press("slash", *"1000", "enter")
        assert heatmap.cursor_gpu == 1000 and heatmap.has_focus
        await pilot.press("enter", "enter")                        # pod 0, then rack 62
        await pilot.press("slash", *"rack 200", "enter")
        assert heatmap.view == View("rack", 200) and heatmap.cursor_gpu == 3200
        await pilot.press("backspace", "backspace")
        await pilot.press("slash", *"train", "enter")
        assert heatmap.cursor_gpu == 0
        await pilot.press("n")
        assert heatmap.cursor_gpu == 3072
        await pilot.press("n")
        assert heatmap.cursor_gpu == 0
        await pilot.press("N")
        assert heatmap.cursor_gpu == 3072
        await pilot.press("slash", *"nothing-here", "enter")
        assert any("nothing matches" in str(n.message) for n in app._notifications)


# -- the habits of terminal tools: footer, palette, Ctrl+C, screenshots ------------------------------------

@sync
async def test_the_footer_always_shows_help_and_quit_first() -> None:
    """Defect: at 80 columns the footer was cut before `? Help` and `q Quit`; at 120 before `q Quit`."""
    from textual.widgets._footer import FooterKey

    for size in ((80, 24), (120, 40)):
        app = app_at()
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            keys = [k for k in app.screen.query(FooterKey) if "-command-palette" not in k.classes]
            assert [k.action for k in keys[:2]] == ["help", "quit"]
            assert all(k.region.right <= size[0] for k in keys[:2])


@sync
async def test_the_compare_footer_at_80_columns_cuts_no_key() -> None:
    """Defect: at 80 columns the compare footer ran its keys under `^p palette`: in the table view `←→` showed
    without `Seek`, its label under the palette's key. A key that does not fit whole is left out; the
    palette's key shows whole at the right edge, and a wider terminal shows the keys again."""
    from clustertop.tui.sources.recording import RecordingSource
    from textual.widgets._footer import FooterKey

    app = ClusterTopApp([RecordingSource(FLAGSHIP), RecordingSource("recordings/flagship-8k.jsonl.gz")],
                        start_t=30.0, paused=True)
    async with app.run_test(size=(80, 24)) as pilot:
        for key in ("a", "b", "d"):
            await pilot.press(key)
            await pilot.pause()
            await pilot.pause()
            keys = list(app.screen.query(FooterKey))
            palette = next(k for k in keys if "-command-palette" in k.classes)
            assert palette.display and palette.region.right <= 80
            assert palette.region.width >= len("^p palette")
            shown = [k for k in keys if k is not palette and k.display]
            assert [k.action for k in shown[:2]] == ["help", "quit"]
            assert all(k.region.right - 1 <= palette.region.x for k in shown), key     # but its padding
            assert all(k.region.width > 0 for k in shown)
        assert "seek(-1)" not in [k.action for k in shown]
        await pilot.resize_terminal(200, 60)
        await pilot.pause()
        await pilot.pause()
        assert "seek(-1)" in [k.action for k in app.screen.query(FooterKey) if k.display]


@sync
async def test_the_palette_lists_every_binding_once_by_name() -> None:
    """Defect: the palette did not find panel, highlight, worst, filter, sort, link or job, and listed two
    screenshot and two help entries."""
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        commands = list(app.get_system_commands(app.screen))
        titles = [c.title for c in commands]
        assert len(titles) == len(set(titles))
        assert sum("screenshot" in t.lower() for t in titles) == 1
        assert sum(t in ("Help", "Keys") for t in titles) == 1
        text = " ".join(f"{c.title} {c.help}" for c in commands).lower()
        for word in ("panel", "highlight", "worst", "filter", "sort", "link", "job", "search", "zoom in"):
            assert word in text, word
        assert "Follow live" not in titles and "Inject fault" not in titles     # live-only: not in a replay
        worst = next(c for c in commands if c.title == "Worst GPUs")
        worst.callback()
        await pilot.pause()
        assert app.screen.worst


@sync
async def test_ctrl_c_quits() -> None:
    """Defect: Ctrl+C asked to press Ctrl+Q; a second Ctrl+C did not quit."""
    app = app_at()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0                      # exited (Textual's default only notified)


@sync
async def test_screenshots_get_unique_names_and_say_where(tmp_path) -> None:
    """Defect: three screenshots while paused overwrote each other silently."""
    app = ClusterTopApp(app_at().sources, start_t=30.0, paused=True, screenshot_dir=str(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("s", "s", "s")
        await pilot.pause()
        files = sorted(p.name for p in tmp_path.glob("*.svg"))
        assert len(files) == 3
        said = [str(n.message) for n in app._notifications if "Saved" in str(n.message)]
        assert len(said) == 3 and all(str(tmp_path) in m for m in said)
