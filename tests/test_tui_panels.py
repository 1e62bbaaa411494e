"""Pilot tests of the dashboard's panels: what the event log, the jobs table, the links view, the power panel
and the drill-down show of the committed recording."""

from __future__ import annotations

import re
from typing import Any

import pytest
from clustertop.tui.app import ClusterTopApp
from clustertop.tui.sources.recording import RecordingSource
from clustertop.tui.widgets.heatmap import Heatmap
from tui_pilot import FLAGSHIP, SIZE, app_at, recorded, rendered, sync, unwrapped


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
        assert (re.search(r"tokens/s +—", jobs) and re.search(r"MFU +—", jobs)
                and re.search(r"step time +—", jobs))
        assert re.search(r"time lost +5.0s", jobs)
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "FAULT Faulty GPU · [gpu] · gpu\u00a01,000 node\u00a0125 (injected)" in log
        assert "restart" not in log
        await pilot.press("end")
        await pilot.pause()
        log = unwrapped(rendered(app.screen.query_one(EventLog)))
        assert "restart pretrain from step 3, 13\u00a0s of work lost (2\u00a0steps), down 11\u00a0s" in log
        jobs = rendered(app.screen.query_one(JobsPanel))
        assert "finished" in jobs and re.search(r"tokens lost +33.6M", jobs)     # the run's end
        restart = recorded("restart")[0]                # ~13 s of work and 11 s down
        assert re.search(rf"time lost +{restart['lost_s'] + restart['downtime_s']:.1f}s", jobs)


def test_power_reads_in_kw_below_a_megawatt_and_with_separators() -> None:
    from clustertop.engine.config import units

    assert units.power(0.0123) == "12.3 kW"                         # 8 GPUs: not "0.01 MW"
    assert units.power(24.56) == "24.56 MW"
    assert units.power(2789.75) == "2,789.8 MW" and units.power(5000.0) == "5,000.0 MW"


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
    """Defects: each checkpoint added four event lines; no filter by kind; enter on an event did nothing; ] at
    the end said nothing useful."""
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
    index.add({"t": 2.5, "type": "fault", "job": names[1], "gpu": 4000, "cause": "Faulty GPU",
               "component": "gpu"})
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
    """Defects: names cut to "fro...", headers to "TFL...", widths changing each frame; a job that is down
    still showed its running tokens/s and MFU."""
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
    """A pod whose spine is busier than the others stands out and is named; the scenario's degraded links are
    named in the links panel and, for the jobs that cross them, in the event log."""
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
    """At node and rack zoom a row per GPU (utilization, power, memory, phase shares, history) instead of
    mostly empty tiles; w at site zoom lists the worst GPUs of the view, failed first."""
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
        assert rows[0].split()[:6] == ["GPU▲", "job", "util", "power", "mem", "GB"]     # in GPU order
        body = [row for row in rows[1:] if row.strip()]
        assert all("/85.9" in row for row in body)          # 80 GiB of HBM, in GB as memory in use is
        assert [row.split()[0] for row in body] == [str(g) for g in range(16)]
        assert all("pretrain" in row and "cmp" in row and "%" in row for row in body)
        assert all(any(ch in row for ch in "▁▂▃▄▅▆▇█") for row in body)   # a history per GPU
        x0 = next(x for x, _, key in table._headers if key == "gpu")
        await pilot.click(GpuTable, offset=(x0 + 2, 1))     # the sorted header again: reversed
        await pilot.pause()
        rows = rendered(table).splitlines()
        assert rows[0].split()[0] == "GPU▼" and rows[1].split()[0] == "15"
        await pilot.click(GpuTable, offset=(x0 + 2, 1))
        await pilot.pause()
        await pilot.press("backspace", "backspace")
        app.seek(41.0)
        await pilot.press("w")
        await pilot.pause()
        await pilot.pause()
        rows = [row for row in rendered(table).splitlines()[1:] if row.strip()]
        assert rows and all("FAIL" in row for row in rows[:8])
        assert rows[0].split()[0] == "1,000"


@sync
async def test_jobs_table_marks_its_order_reverses_it_and_sorts_only_by_shown_columns() -> None:
    """Defects: `o` offered interruptions and time lost with no such column on screen; no header said the
    order or its direction; nothing reversed it."""
    from clustertop.tui.widgets.jobs import JobsPanel

    app = ClusterTopApp([two_jobs_source()], start_t=1.5, paused=True)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        panel = app.screen.query_one(JobsPanel)
        header = rendered(panel).splitlines()[0]
        assert header.split()[0] == "job▲"
        shown = {"tok/s": "tokens/s", "MFU": "MFU", "eff.": "effective", "int.": "interrupts",
                 "lost": "time lost"}
        offered = {"name", *(key for head, key in shown.items() if head in header.split())}
        seen = []
        for _ in range(len(panel.sortable)):
            await pilot.press("o")
            await pilot.pause()
            seen.append(panel.sort)
        assert set(seen) == offered == set(panel.sortable) and seen[-1] == "name"
        await pilot.press("o")                                   # tokens/s, largest first
        await pilot.pause()
        rows = rendered(panel).splitlines()
        assert "tok/s▼" in rows[0] and "prometheus" in rows[1]
        await pilot.press("O")                                   # reversed
        await pilot.pause()
        rows = rendered(panel).splitlines()
        assert "tok/s▲" in rows[0] and "frontier" in rows[1]
        x0, _, _ = next(h for h in panel._headers if h[2] == "tokens/s")
        await pilot.click(JobsPanel, offset=(x0 + 2, 1))         # a click on the sorted header: reversed
        await pilot.pause()
        assert "tok/s▼" in rendered(panel).splitlines()[0]
    narrow = ClusterTopApp([two_jobs_source()], start_t=1.5, paused=True)
    async with narrow.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = narrow.screen.query_one(JobsPanel)
        assert "interrupts" not in panel.sortable and "time lost" not in panel.sortable


@sync
async def test_the_links_view_highlights_the_degraded_pod_in_its_tier() -> None:
    """Defect: a degraded spine was only named in text; its pod's cell in the spine's strip looked like any
    other (here pod 1's spine is degraded and idle: the cell stands out by its highlight, not its load)."""
    from clustertop.tui.widgets.links import DEGRADED_STYLE, LinksPanel

    source = two_jobs_source()
    source.index.header["scenario"]["cluster"]["degraded"] = [{"tier": "spine", "pod": 1, "capacity": 0.5}]
    app = ClusterTopApp([source], start_t=1.5, paused=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = app.screen.query_one(LinksPanel).content
        plain = text.plain
        spine = plain.index("\nspine") + 1
        strip = plain.index("█▁", spine)
        styles = {str(span.style) for span in text.spans if span.start <= strip + 1 < span.end}
        assert DEGRADED_STYLE in styles                                   # pod 1's cell
        assert not any(DEGRADED_STYLE == str(span.style) for span in text.spans
                       if span.start <= strip < span.end)                # pod 0's is not
        leaf = plain.index("\nleaf") + 1
        assert not any(str(span.style) == DEGRADED_STYLE for span in text.spans
                       if leaf <= span.start < plain.index("\n", leaf))  # nor another tier's


@sync
async def test_a_serving_job_shows_its_own_figures_from_the_committed_recording() -> None:
    """recordings/serving-64.jsonl.gz (inference-serving, 1 minute): the jobs panel reads as a serving job."""
    from clustertop.tui.widgets.jobs import JobsPanel

    app = ClusterTopApp([RecordingSource("recordings/serving-64.jsonl.gz")], start_t=30.0, paused=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        jobs = rendered(app.screen.query_one(JobsPanel))
        for figure in ("requests/s", "TTFT", "TPOT", "TTFT p99", "batch", "KV cache", "saturated"):
            assert re.search(rf"{figure} +[0-9n]", jobs), figure
        assert re.search(r"batch +\d+/128", jobs) and "MFU" not in jobs and "step time" not in jobs
