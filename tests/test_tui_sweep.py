"""Pilot tests of the sweep results table (`clustertop replay` of a sweep file): ranking, sorting, preparing a
point, help and screenshots."""

from __future__ import annotations

from pathlib import Path

from clustertop.cli import main as cli_main
from tui_pilot import FLAGSHIP, SIZE, sync

SWEEP = "recordings/sweep-16k.jsonl"


@sync
async def test_sweep_results_table_sorted_and_enter_prepares_the_point(tmp_path) -> None:
    """Rows by step time, out-of-memory then invalid points last; enter rebuilds the chosen point's
    scenario."""
    from clustertop.commands.replay import point_toml
    from clustertop.engine.config import scenario
    from clustertop.engine.sweep.results import looks_like_sweep_results, read_results
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
    from clustertop.engine.sweep.results import read_results
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
    """o ranks the fitting points by the next objective; a header click sorts by that column (again:
    reversed), points without the figure last; enter runs the row shown."""
    from clustertop.engine.sweep.results import RANKS, read_results
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
    """A point of two jobs shows (and sorts by) its slowest job's step, all its tokens/s, its largest memory;
    a point without a figure sorts last either way; the cursor stays on its point."""
    from clustertop.tui.sweep import SweepApp
    from textual.widgets import DataTable

    def job(name: str, step: float | None, rate: float, mem: float | None) -> dict:
        return {"name": name, "gpus": 8, "fits": step is not None, "step_time_s": step, "tokens_per_s": rate,
                "mfu": 0.4, "model_tflops_per_gpu": 400.0, "memory_gb_per_gpu": mem}

    records = [{"index": 0, "point": {"x": 1},
                "jobs": [job("a", 1.0, 100.0, 50.0), job("b", 2.0, 50.0, 60.0)]},
               {"index": 1, "point": {"x": 2},
                "jobs": [job("a", 1.5, 80.0, 40.0), job("b", 1.5, 80.0, 30.0)]},
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
                                                                         if k.value == "step s"))])
                 for i in (0, 1)]
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
async def test_sweep_table_s_saves_a_screenshot_and_question_mark_shows_help(tmp_path, monkeypatch) -> None:
    """Defect: `s` and `?` did nothing in the sweep table."""
    from clustertop.engine.sweep.results import read_results
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


@sync
async def test_sweep_table_shows_every_objective_marks_its_order_and_a_whole_reason() -> None:
    """Defects: `o` ranked by $ per million tokens and joules per token with no such column; no header said
    the order or its direction; an invalid point's reason was cut at the screen's edge."""
    from clustertop.engine.sweep.results import RANKS, read_results
    from clustertop.tui.sweep import SweepApp, figures
    from textual.widgets import DataTable, Static

    app = SweepApp(read_results(SWEEP), "sweep-16k.jsonl")
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)

        def labels() -> dict[str, str]:
            return {str(k.value): str(table.columns[k].label) for k in table.columns}

        def marked() -> list[str]:
            return [label for label in labels().values() if label[-1:] in "▲▼"]

        assert marked() == ["step s▲"]
        for rank, column, mark in (("tokens_per_s_per_gpu", "tok/s/GPU", "▼"),
                                   ("usd_per_mtoken", "$/Mtok", "▲"), ("energy_j_per_token", "J/token", "▲"),
                                   ("tokens_per_s_per_mw", "tok/s/MW", "▼")):
            await pilot.press("o")
            await pilot.pause()
            assert app.objective == RANKS[rank] and marked() == [column + mark]
        best = app.records[0]
        fig = figures(best)
        assert abs(fig["$/Mtok"] - best["jobs"][0]["usd_per_mtoken"]) < 0.01
        assert abs(fig["J/token"] - best["jobs"][0]["energy_j_per_token"]) < 0.01
        key = next(k for k in table.columns if k.value == "mem GB/GPU")
        for mark in ("▲", "▼"):
            table.post_message(DataTable.HeaderSelected(table, key, list(table.columns).index(key),
                                                        table.columns[key].label))
            await pilot.pause()
            assert marked() == ["mem GB/GPU" + mark]
        detail = app.query_one("#detail", Static)
        assert not detail.display
        table.move_cursor(row=len(app.shown) - 1)
        await pilot.pause()
        reason = app.selected()["error"]
        assert len(reason) > 80 and detail.display and reason in str(detail.render())


@sync
async def test_a_point_run_from_the_sweep_is_titled_by_its_parameters_and_escape_comes_back(
        tmp_path, monkeypatch) -> None:
    """Defects: a point run live was titled `point-axei8s9p` (its temporary file), then
    `llama3-405b-16k-point-11` (its index): it is titled by what it is, its parameters as `--vary` takes them;
    escape did not return to the table (only q did)."""
    from clustertop.commands import replay
    from clustertop.engine.sweep.results import read_results
    from clustertop.tui import app as app_module
    from clustertop.tui import sweep
    from clustertop.tui.app import ClusterTopApp
    from clustertop.tui.sources import live
    from clustertop.tui.sources.recording import RecordingSource

    record = next(r for r in read_results(SWEEP) if r["index"] == 11)
    assert sweep.point_title(record) == "llama3-405b-16k tp=8 pp=16 virtual_stages=4"
    # through `clustertop replay results.jsonl`: enter on point 11, then quit the table
    picks = iter([record, None])

    def run(self: sweep.SweepApp) -> str | None:
        chosen = next(picks)
        if chosen is None:
            return None
        self.chosen = chosen
        return str(self.prepare(chosen)) if self.prepare else None

    class Engine:
        def __init__(self, scenario: str) -> None:
            self.scenario, self.name = scenario, live.display_name(scenario)

    shown: list[tuple[str, str | None]] = []
    monkeypatch.setattr(sweep.SweepApp, "run", run)
    monkeypatch.setattr(live, "LiveSource", Engine)
    monkeypatch.setattr(app_module, "show", lambda sources, **kw: shown.append((sources[0].name, kw["back"])))
    assert replay.run_sweep(SWEEP) == 0
    assert shown == [("llama3-405b-16k tp=8 pp=16 virtual_stages=4", "the sweep table")]
    app = ClusterTopApp([RecordingSource(FLAGSHIP)], start_t=10.0, paused=True, back="the sweep table")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("escape")
        await pilot.pause()
        assert not app.is_running
    plain = ClusterTopApp([RecordingSource(FLAGSHIP)], start_t=10.0, paused=True)
    async with plain.run_test(size=SIZE) as pilot:
        await pilot.press("escape")
        await pilot.pause()
        assert plain.is_running                  # not from a sweep: escape quits nothing
