"""Sweep results (`clustertop sweep -o results.jsonl`, docs/sweep.md) as a table: one row per point, in the
order `clustertop sweep` ranks them (engine/sweep/results.py): those that fit, out-of-memory points after them
and invalid points last. `o` ranks them by the next objective (as `clustertop sweep --rank` does); a click on
a column's header sorts the rows by that column (again: the other way), points without the figure last. Enter
on a row asks the caller's `prepare(record)` for something to run (the replay command writes the point's
scenario to a temporary TOML) and exits with it; `prepare` raising UserError (an invalid point) is a
notification and the table stays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from clustertop.engine.config import units
from clustertop.engine.config.errors import UserError
from clustertop.engine.sweep import results
from clustertop.engine.sweep.results import RANKS, facts, ranked
from rich.markup import escape
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from . import screenshot
from .widgets.footer import Footer


def _value(value: Any) -> Text:
    """A point's value as a cell: Text, so a value like "[/]" is shown, not parsed as markup."""
    if isinstance(value, bool):
        return Text("true" if value else "false")
    return Text(f"{value:,}" if isinstance(value, int) else str(value))


def point_title(record: dict[str, Any]) -> str:
    """What a point is, as a run of it is titled: its base scenario and values as `--vary` takes them
    ("llama3-405b-16k tp=8 pp=16 virtual_stages=4"; the first job's keys as the table's columns name them)."""
    def shown(value: Any) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    values = " ".join(f"{key.removeprefix('jobs[0].')}={shown(value)}"
                      for key, value in record.get("point", {}).items())
    return f"{record.get('scenario') or 'sweep'} {values}".strip()


def status(record: dict[str, Any]) -> str:
    """"ok", "oom" (some job does not fit) or "invalid" (the point was refused)."""
    return facts(record).status


OBJECTIVES = list(RANKS.values())
# The figure columns, and whether larger sorts first when their header is clicked (and is better)
FIGURES: dict[str, bool] = {"GPUs": False, "step s": False, "tokens/s": True, "tok/s/GPU": True,
                            "TFLOP/s/GPU": True, "MFU": True, "mem GB/GPU": False, "$/Mtok": False,
                            "J/token": False, "tok/s/MW": True, "status": False}
# each objective `o` ranks by, and the column that shows it
OBJECTIVE_COLUMNS = {results.STEP_TIME: "step s", results.RATE_PER_GPU: "tok/s/GPU",
                     results.USD_PER_MTOKEN: "$/Mtok", results.J_PER_TOKEN: "J/token",
                     results.RATE_PER_MW: "tok/s/MW"}
ASCENDING, DESCENDING = "▲", "▼"


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """A point's figures as its row shows them and its columns sort, read as the ranking reads them (several
    jobs: the slowest job's step, all jobs' tokens/s and GPUs, GPU-weighted TFLOP/s and MFU, the largest
    memory per GPU); None where the point has none."""
    state = status(record)
    out: dict[str, Any] = dict.fromkeys(FIGURES)
    out["status"] = ("ok", "oom", "invalid").index(state)
    if state == "invalid":
        return out
    jobs = record["jobs"]
    f = facts(record)
    out["GPUs"] = f.gpus
    memory = [j.get("memory_gb_per_gpu") for j in jobs]
    out["mem GB/GPU"] = None if any(m is None for m in memory) else max(float(m) for m in memory)
    if state == "ok":
        out["step s"], out["tokens/s"] = f.step_time_s, f.tokens_per_s
        out["tok/s/GPU"] = f.tokens_per_s / f.gpus if f.gpus else None
        rate = f.tokens_per_s
        if rate > 0:      # the ranking's own figures (engine/sweep/results.py fit_key)
            out["$/Mtok"] = None if math.isnan(f.usd_per_hour) else f.usd_per_hour / (rate * 3600) * 1e6
            out["J/token"] = None if math.isnan(f.power_mw) else f.power_mw * 1e6 / rate
            out["tok/s/MW"] = f.tokens_per_s / f.power_mw if f.power_mw > 0 else None
        for column, key in (("TFLOP/s/GPU", "model_tflops_per_gpu"), ("MFU", "mfu")):
            values = [j.get(key) for j in jobs]
            if all(v is not None for v in values) and f.gpus:
                out[column] = sum(float(v) * int(j.get("gpus", 0)) for v, j in zip(values, jobs)) / f.gpus
    return out


def _sort_value(value: Any) -> tuple[int, Any]:
    """A value as a sort key: numbers by size, then text; None (and NaN) is handled by the caller."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 0, float(value)
    return 1, str(value)


def right(s: str, style: str = "") -> Text:
    return Text(s, justify="right", style=style)


def _figure_cell(column: str, value: Any, state: str) -> Text:
    """A figure as its column shows it; "OOM" in the step column of a point that does not fit."""
    if state == "oom" and column == "step s":
        return right("OOM", "bold red")
    if value is None:
        return right("—", "dim")
    formats: dict[str, Callable[[Any], str]] = {
        "GPUs": lambda v: f"{v:,}", "step s": lambda v: f"{v:.3f}", "tokens/s": units.si,
        "tok/s/GPU": units.si, "TFLOP/s/GPU": lambda v: f"{v:.0f}", "MFU": lambda v: f"{v * 100:.1f}%",
        "mem GB/GPU": lambda v: f"{v:.1f}", "$/Mtok": units.usd, "J/token": lambda v: f"{v:,.2f}",
        "tok/s/MW": units.si}
    shown = formats[column](value)
    style = "bold" if column == "step s" else "red" if state == "oom" and column == "mem GB/GPU" else ""
    return right(shown, style)


class SweepHelp(ModalScreen[None]):
    """The sweep table's keys and what its columns mean."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    SweepHelp { align: center middle; }
    SweepHelp > Static { width: 80; max-width: 100%; height: auto; border: round $accent; padding: 0 1;
                         background: $surface; }
    """

    def compose(self) -> ComposeResult:
        text = ("[b]Sweep results[/b]: one row per point, ranked as `clustertop sweep` ranks them: points "
                "that fit first (by step time, or tokens/s per GPU when their shapes differ), then out of "
                "memory, then invalid.\n\n"
                "[b]↑ ↓[/b]  choose a point      [b]enter[/b]  run it live in the dashboard "
                "(q or escape there comes back)\n"
                "[b]o[/b]  rank by the next objective: step time, tokens/s per GPU, $ per million tokens, "
                "joules per token, tokens/s per MW (clustertop sweep --rank), each a column, marked best "
                "first\n"
                "click a column's header: sort by it (again: the other way; ▲ ascending, ▼ descending); "
                "points without the figure last\n"
                "an invalid point's reason shows whole under the table when its row is chosen\n"
                "[b]s[/b]  save an SVG screenshot      [b]?[/b]  this help      [b]q[/b]  quit\n\n"
                "escape closes")
        yield Static(text)


class SweepApp(App[Any]):
    """The table of a sweep's points; enter runs the chosen point (through `prepare`)."""

    TITLE = "clustertop"
    CSS = """
    #about { height: auto; padding: 0 1; color: $text-muted; }
    #detail { height: auto; padding: 0 1; display: none; }
    DataTable { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "run_point", "Run live", priority=True),
        Binding("o", "rank_next", "Rank by"),
        Binding("s", "save_screenshot", "Screenshot"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, records: list[dict[str, Any]], name: str,
                 prepare: Callable[[dict[str, Any]], Any] | None = None) -> None:
        super().__init__()
        self.records, self.objective = ranked(records)
        self.sorted_by: tuple[str, bool] | None = None      # (column, descending) after a header click
        self.shown = self.records                            # the rows in the table's order
        self.source_name = name
        self.prepare = prepare
        self.chosen: dict[str, Any] | None = None           # the point enter ran
        self.keys: list[str] = []
        for record in self.records:
            for key in record["point"]:
                if key not in self.keys:
                    self.keys.append(key)

    def compose(self) -> ComposeResult:
        counts = {s: sum(status(r) == s for r in self.records) for s in ("ok", "oom", "invalid")}
        base = next((r.get("scenario") for r in self.records if r.get("scenario")), "?")
        self._summary = (f"sweep of {escape(str(base))} · {len(self.records):,} points: "
                         f"{counts['ok']:,} fit, {counts['oom']:,} out of memory, "
                         f"{counts['invalid']:,} invalid")
        yield Static(self._about(), id="about")
        yield DataTable(cursor_type="row", zebra_stripes=True)
        yield Static(id="detail")
        yield Footer()

    def _about(self) -> str:
        order = f"ranked by {self.objective}"
        if self.sorted_by is not None:
            column, descending = self.sorted_by
            order = f"sorted by {escape(column)} ({'descending' if descending else 'ascending'}; " \
                    f"# is the rank by {self.objective})"
        return f"{self._summary} · {order} · enter runs the point live"

    def on_mount(self) -> None:
        self.sub_title = f"sweep {self.source_name}"
        table = self.query_one(DataTable)
        self._fill()
        table.focus()

    def _columns(self) -> None:
        """The columns, the sorted one marked: ▲ ascending, ▼ descending (ranked by an objective: its
        column, best first)."""
        if self.sorted_by is not None:
            column, descending = self.sorted_by
        else:
            column, descending = OBJECTIVE_COLUMNS[self.objective], FIGURES[OBJECTIVE_COLUMNS[self.objective]]
        table = self.query_one(DataTable)
        names = [("#", "rank"), ("point", "index"), *((k.removeprefix("jobs[0]."), k) for k in self.keys),
                 *((c, c) for c in FIGURES)]
        for label, key in names:
            mark = (DESCENDING if descending else ASCENDING) if key == column else ""
            table.add_column(Text(label + mark, style="bold underline" if mark else ""), key=key)

    def _fill(self) -> None:
        """The rows in the current order, the cursor kept on its point; "#" is each point's rank by the
        objective."""
        table = self.query_one(DataTable)
        current = self.selected() if table.row_count else None
        rank = {id(r): i for i, r in enumerate(ranked(self.records, self.objective)[0], start=1)}
        rows = self._sorted(*self.sorted_by, rank) if self.sorted_by is not None else self.records
        table.clear(columns=True)
        self._columns()
        for record in rows:
            table.add_row(*self._row(rank[id(record)], record),
                          key=str(record.get("index", rank[id(record)])))
        self.shown = rows
        if current is not None:
            table.move_cursor(row=next(i for i, r in enumerate(rows) if r is current))
        self.query_one("#about", Static).update(self._about())

    def _sorted(self, column: str, descending: bool, rank: dict[int, int]) -> list[dict[str, Any]]:
        """The records sorted by a column, stably (ties keep the objective's order), those without a value
        last."""
        def value(record: dict[str, Any]) -> Any:
            if column in FIGURES:
                return figures(record)[column]
            if column == "rank":
                return None if status(record) == "invalid" else rank[id(record)]
            if column == "index":
                return record.get("index")
            return record["point"].get(column)

        have: list[tuple[tuple[int, Any], dict[str, Any]]] = []
        without: list[tuple[tuple[int, Any], dict[str, Any]]] = []
        for record in self.records:
            v = value(record)
            missing = v is None or (isinstance(v, float) and math.isnan(v))
            (without if missing else have).append((_sort_value(v), record))
        have.sort(key=lambda p: p[0], reverse=descending)
        return [r for _, r in have] + [r for _, r in without]

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        if self.sorted_by is not None and self.sorted_by[0] == column:
            descending = not self.sorted_by[1]
        else:
            descending = FIGURES.get(column, False)
        self.sorted_by = (column, descending)
        self._fill()

    def action_rank_next(self) -> None:
        """Rank by the next objective (and drop a column's sort)."""
        self.objective = OBJECTIVES[(OBJECTIVES.index(self.objective) + 1) % len(OBJECTIVES)]
        self.records = ranked(self.records, self.objective)[0]
        self.sorted_by = None
        self._fill()

    def _row(self, rank: int, record: dict[str, Any]) -> list[Any]:
        state = status(record)
        point = [_value(record["point"].get(key, "")) for key in self.keys]
        head = [right(str(rank)), right(str(record.get("index", "")))]
        if state == "invalid":
            reason = " ".join(str(record.get("error", "invalid")).split())
            cut = reason if len(reason) <= 60 else reason[:59] + "…"     # whole under the table
            return [*head, *point, *[right("—", "dim")] * (len(FIGURES) - 1),
                    Text("invalid: " + cut, style="red")]
        fig = figures(record)
        cells = [_figure_cell(column, fig[column], state) for column in FIGURES if column != "status"]
        last = Text("out of memory", style="red") if state == "oom" else Text("fits", style="green")
        return [*head, *point, *cells, last]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The chosen point's reason, whole and wrapped, under the table when it is invalid."""
        detail = self.query_one("#detail", Static)
        row = event.cursor_row
        record = self.shown[row] if 0 <= row < len(self.shown) else None
        if record is None or status(record) != "invalid":
            detail.display = False
            return
        detail.display = True
        detail.update(Text(f"point {record.get('index')} is invalid: {record.get('error', '')}", style="red"))

    def action_help(self) -> None:
        if not isinstance(self.screen, SweepHelp):
            self.push_screen(SweepHelp())

    def action_save_screenshot(self) -> None:
        screenshot.save(self, ".", f"clustertop-{Path(self.source_name).stem}")

    def selected(self) -> dict[str, Any]:
        return self.shown[self.query_one(DataTable).cursor_row]

    def action_run_point(self) -> None:
        record = self.selected()
        if status(record) == "invalid":
            self.notify(escape(f"point {record.get('index')} is invalid: {record.get('error', '')}"),
                        severity="warning", timeout=6)
            return
        if self.prepare is None:
            self.exit(record)
            return
        try:
            prepared = self.prepare(record)
        except UserError as exc:
            self.notify(escape(str(exc)), severity="error", timeout=8)
            return
        self.chosen = record
        self.exit(prepared)
