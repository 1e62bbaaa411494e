"""Job figures: step, step time, tokens/s, TFLOP/s per GPU, MFU, effective training time, ETA."""

from __future__ import annotations

import math
from typing import Any

from clustertop.engine.config import units
from clustertop.engine.stream.state import JobStatus
from rich.text import Text
from textual import events

from .. import jobinfo
from ..display import DisplayState
from ..running import running_app
from .panel import Panel


def effective(job: JobStatus, t: float, started: float) -> float | None:
    """Share of the job's time spent on steps that count (lost work and restarts lower it)."""
    if job.effective_training_time is not None:          # the engine's figure, from the latest sample
        return float(job.effective_training_time)
    if "effective_training_time" in job.info:
        return float(job.info["effective_training_time"])
    elapsed = t - started
    if elapsed <= 0 or job.step <= 0 or job.step_time_s <= 0:
        return None
    return min(1.0, float(job.step * job.step_time_s / elapsed))


def eta(job: JobStatus, state: DisplayState, t: float) -> tuple[str, float | None]:
    """Time left: to the job's token target when the header has one, else to the end of the run."""
    target = job.info.get("tokens_target") or job.info.get("train_tokens")
    if target and job.tokens_per_s > 0:
        return "ETA", max(0.0, (float(target) - job.tokens) / job.tokens_per_s)
    duration = state.header.get("duration_s")
    return "run ends in", (max(0.0, float(duration) - t) if duration else None)


def job_start_time(state: DisplayState, name: str) -> float:
    for event in state.events:
        if event.get("type") == "job_start" and event.get("job") == name:
            return float(event.get("t", 0.0))
    return 0.0


def is_inference(job: JobStatus) -> bool:
    return str(job.info.get("kind", "")) == "inference"


def _seconds(value: Any) -> str:
    """A latency: ms below a second."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return "—"
    if math.isnan(v) or v < 0:   # NaN: no request finished yet
        return "—"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _serving(job: JobStatus, key: str) -> Any:
    """A serving figure from the latest step event (or sample status), else the header's."""
    return job._src[key] if key in job._src else job.info.get(key)


def _number(value: Any) -> float | None:
    """A finite number, or None (absent, null, not a number: a hostile recording)."""
    if type(value) not in (int, float) or not math.isfinite(value):
        return None
    return float(value)


def _latency(job: JobStatus, name: str) -> str:
    """TTFT / TPOT from the latest step event (or sample status), else the header: `<name>_s` or
    `<name>_ms`."""
    src = job._src if f"{name}_s" in job._src or f"{name}_ms" in job._src else job.info
    if f"{name}_s" in src:
        return _seconds(src[f"{name}_s"])
    if f"{name}_ms" in src:
        try:
            return _seconds(float(src[f"{name}_ms"]) / 1000)
        except (TypeError, ValueError):
            return "—"
    return "—"


def inference_figures(job: JobStatus, state: DisplayState, t: float) -> dict[str, str]:
    """An inference job: requests/s, latencies, batch and K/V cache use instead of MFU (the step events'
    figures, else the header's; "—" if absent)."""
    label, left = eta(job, state, t)
    live = not stopped(job)
    rate = _number(_serving(job, "requests_per_s"))
    mean, limit = _number(_serving(job, "mean_batch")), _number(_serving(job, "batch_limit"))
    kv = _number(_serving(job, "kv_cache_use"))
    saturated = _serving(job, "saturated")
    out = {
        "tokens/s": units.si(job.tokens_per_s) if job.tokens_per_s and live else "—",
        "requests/s": units.si(rate) if rate is not None and live else "—",
        **{name: _latency(job, key) if live else "—" for name, key in (
            ("TTFT", "ttft"), ("TPOT", "tpot"), ("TTFT p99", "ttft_p99"), ("TPOT p99", "tpot_p99"))},
        "batch": (f"{mean:,.0f}/{limit:,.0f}" if limit else f"{mean:,.0f}") if mean is not None and live
        else "—",
        "KV cache": f"{100 * kv:.0f}%" if kv is not None and live else "—",
        "saturated": ("YES" if saturated else "no") if type(saturated) is bool and live else "—",
    }
    out["tokens"] = units.si(job.tokens) if job.tokens else "0"
    out["interrupts"] = f"{job.interruptions:,}"
    out[label] = units.duration(left) if left else "—"
    return out


def stopped(job: JobStatus) -> bool:
    """Down after a fault, or not running: its last step's figures are history, not live."""
    return job.down or not job.running


def run_over(state: DisplayState, t: float) -> bool:
    """The run has reached its end (the header's duration): its jobs are finished, not running."""
    duration = _number(state.header.get("duration_s"))
    return duration is not None and duration > 0 and t >= duration - 1e-9


def planned(job: JobStatus) -> bool:
    """No step has completed yet (and none was restored): the plan's figures stand in, marked planned."""
    return "t" not in job._src and not job.step and not stopped(job)


def status(job: JobStatus, t: float, over: bool = False) -> tuple[str, str]:
    """(short status, style): running, down for how long, finished (the run's end), pending (not started
    yet), or stopped and why."""
    if job.down:
        since = f" {units.duration(t - job.down_since)}" if job.down_since is not None else ""
        return f"▲ down{since}", "bold red"
    if job.running:
        return ("■ finished", "bold cyan") if over else ("● running", "green")
    if not job.stop_reason and not job.step and not over:
        return "○ pending", "dim"
    return ("○ " + (job.stop_reason or "stopped"))[:24], "red"


PLANNED = "*"     # marks a plan's figure shown before the first step (`planned`)


def plan_figures(job: JobStatus) -> dict[str, str]:
    """Before the first step: the plan's step time, MFU and tokens/s (the header's entry), marked planned."""
    out: dict[str, str] = {}
    step, mfu = _number(job.info.get("step_time_s")), _number(job.info.get("mfu"))
    econ = job.info.get("economics")
    rate = _number(econ.get("tokens_per_s_per_mw")) if isinstance(econ, dict) else None
    mw = _number(econ.get("power_mw")) if isinstance(econ, dict) else None
    if step:
        out["step time"] = f"{step:.2f} s{PLANNED}"
    if rate and mw:
        out["tokens/s"] = units.si(rate * mw) + PLANNED
    if mfu:
        out["MFU"] = f"{mfu * 100:.1f}%{PLANNED}"
    return out


def tokens_at(job: JobStatus, t: float) -> float:
    """Tokens trained by time t: the last figure moved on at the job's rate while it runs (between
    samples)."""
    since = job._src.get("t")
    if stopped(job) or since is None or job.tokens_per_s <= 0:
        return float(job.tokens)
    return float(job.tokens) + float(job.tokens_per_s) * max(0.0, t - float(since))


def figures(job: JobStatus, state: DisplayState, t: float) -> dict[str, str]:
    """The figures of one job as display strings (shared with compare mode); a stopped job's rates are '—'."""
    if is_inference(job):
        return inference_figures(job, state, t)
    eff = effective(job, t, job_start_time(state, job.name))
    label, left = eta(job, state, t)
    live = not stopped(job)
    tokens = tokens_at(job, t)
    plan = plan_figures(job) if planned(job) else {}
    return {
        "step": f"{job.step:,}",
        "step time": f"{job.step_time_s:.2f} s" if job.step_time_s and live else plan.get("step time", "—"),
        **_band(job),
        "tokens/s": units.si(job.tokens_per_s) if job.tokens_per_s and live else plan.get("tokens/s", "—"),
        "TFLOP/s/GPU": f"{job.tflops_per_gpu:.0f}" if job.tflops_per_gpu and live else "—",
        "MFU": f"{job.mfu * 100:.1f}%" if job.mfu and live else plan.get("MFU", "—"),
        "effective": f"{eff * 100:.1f}%" if eff is not None else "—",
        "tokens": units.si(tokens) if tokens else "0",
        label: units.duration(left) if left else "—",
        "interrupts": f"{job.interruptions:,}",
        "tokens lost": units.si(job.tokens_lost) if job.tokens_lost else "0",
        "time lost": units.duration(lost_time(job, t)) if lost_time(job, t) else "0",
        **cost_figures(job),
    }


def _band(job: JobStatus) -> dict[str, str]:
    """The plan's band (the header's `uncertainty`: within it, 90% of the published runs like the job came
    out); nothing for a recording made before the header had it."""
    u = _number(job.info.get("uncertainty"))
    return {"likely ±": f"{100 * u:.0f}%"} if u is not None and u >= 0 else {}


def cost_figures(job: JobStatus) -> dict[str, str]:
    """The plan's energy and cost per token (the header's `economics`: a step as planned, no
    interruptions)."""
    econ = job.info.get("economics")
    if not isinstance(econ, dict):
        return {}
    j, usd = econ.get("energy_j_per_token"), econ.get("usd_per_mtoken")
    return {"J/token": f"{j:,.2f}" if isinstance(j, (int, float)) else "—",
            "$/M tokens": units.usd(usd) if isinstance(usd, (int, float)) else "—"}


def lost_time(job: JobStatus, t: float) -> float:
    """Time lost to restarts so far, the current downtime included."""
    down = t - job.down_since if job.down and job.down_since is not None else 0.0
    return job.time_lost_s + max(0.0, down)


# The jobs table: (header, width, figure key or None for the name and status, sort key). A serving job's
# columns follow tok/s when the table has one.
COLUMNS: tuple[tuple[str, int, str], ...] = (
    ("state", 8, "state"), ("tok/s", 6, "tokens/s"), ("MFU", 6, "MFU"), ("s/step", 6, "step time"),
    ("eff.", 6, "effective"), ("int.", 4, "interrupts"), ("lost", 7, "time lost"),
    ("$/Mtok", 6, "$/M tokens"),
    ("step", 7, "step"),
)
SERVING_COLUMNS: tuple[tuple[str, int, str], ...] = (
    ("req/s", 6, "requests/s"), ("TTFT", 6, "TTFT"), ("TPOT", 6, "TPOT"))
SORTS = ("name", "tokens/s", "requests/s", "TTFT", "TPOT", "MFU", "step time", "effective", "interrupts",
         "time lost", "$/M tokens", "step")
ASCENDING, DESCENDING = "▲", "▼"


def sort_value(job: JobStatus, key: str, state: DisplayState, t: float) -> float | str:
    """A job's place in ascending order of `key` (a stopped job's rates count as 0)."""
    if key == "name":
        return job.name
    live = not stopped(job)
    if key in ("requests/s", "TTFT", "TPOT", "$/M tokens"):
        # serving figures and the plan's cost; a job without one (training, a record before it) goes last
        field = {"requests/s": "requests_per_s", "TTFT": "ttft_s", "TPOT": "tpot_s"}.get(key)
        econ = job.info.get("economics")
        value = (_number(_serving(job, field)) if field else
                 _number(econ.get("usd_per_mtoken")) if isinstance(econ, dict) else None)
        if key == "requests/s":
            return value if value is not None and live else 0.0
        return value if value is not None else math.inf
    return {"tokens/s": job.tokens_per_s if live else 0.0, "MFU": job.mfu if live else 0.0,
            "step time": job.step_time_s if live and job.step_time_s else math.inf, "step": float(job.step),
            "effective": effective(job, t, job_start_time(state, job.name)) or 0.0,
            "interrupts": float(job.interruptions), "time lost": lost_time(job, t)}[key]


def header_cell(header: str, width: int, left: bool, mark: str = "") -> str:
    """A column's header in its width, with the sort mark (▲ ascending, ▼ descending) kept when it is cut."""
    label = header[:width - len(mark)] + mark
    return f"{label:<{width}}" if left else f"{label:>{width}}"


def abbreviate(name: str, width: int) -> str:
    """A stable abbreviation: the start and the end of the name around an ellipsis."""
    if len(name) <= width:
        return name
    if width <= 3:
        return name[:width]
    tail = (width - 1) // 2
    return name[:width - 1 - tail] + "…" + name[len(name) - tail:]


class JobsPanel(Panel):
    """One block of figures per job; a table of fixed-width columns when there are several (sortable: `o`, or
    a click on a header). Names that do not fit are abbreviated the same way every frame; the full names are
    in the tooltip and in the inspector."""

    TITLE = "jobs"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.sort = "name"
        self.descending = False         # names A to Z first; a figure's largest first
        self._headers: list[tuple[int, int, str]] = []
        self.sortable: tuple[str, ...] = SORTS[:1]    # the sort keys of the columns the table shows

    def show(self, state: DisplayState, t: float, ended: str | None = None) -> None:
        """`ended`: the recording ended before t (compare mode): the figures are its last, not live."""
        width = max(20, self.size.width or 46)    # the content width (inside border and padding)
        jobs = list(state.jobs.values())
        over = run_over(state, t)
        key = repr((width, self.sort, self.descending, ended, over,
                    [(job.name, job.running, job.down, figures(job, state, t)) for job in jobs]))
        if key == self._shown:
            return
        if not jobs:                 # real telemetry placed on a cluster file without [[jobs]]
            text = Text("no jobs: the cluster file names none ([[jobs]] say which GPUs run what)",
                        style="dim")
            self.show_if_changed(key, text)
            return
        if ended:
            text = Text(no_wrap=True, overflow="ellipsis")
            text.append(f"■ recording {ended}", style="bold yellow")
            text.append(" · its last figures:\n", style="dim")
            for job in jobs:
                f = figures(job, state, t)
                text.append(f"{job.name} ", style="bold")
                if is_inference(job):
                    text.append(f"{f.get('tokens/s', '—')} tok/s · {f.get('requests/s', '—')} req/s · "
                                f"TTFT {f.get('TTFT', '—')}\n", style="dim")
                else:
                    text.append(f"step {f.get('step', '—')} · {f.get('tokens/s', '—')} tok/s · "
                                f"MFU {f.get('MFU', '—')}\n", style="dim")
            text.rstrip()
            self.show_if_changed(key, text)
            return
        if len(jobs) > 1:
            self.tooltip = "\n".join(f"{job.name}: {jobinfo.model_name(job)}, {job.gpus:,} GPUs"
                                     for job in jobs)
        self.show_if_changed(key, self._one(jobs[0], state, t, width) if len(jobs) == 1 else
                             self._many(state, t, width))

    def _one(self, job: JobStatus, state: DisplayState, t: float, width: int) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        label, style = status(job, t, run_over(state, t))
        text.append(f"{job.name}  ", style="bold")
        text.append(label, style=style)
        if not is_inference(job) and planned(job) and plan_figures(job):
            text.append(f"  {PLANNED} planned: no step yet", style="dim italic")
        text.append("\n")
        text.append(f"{jobinfo.model_name(job)} · ", style="dim")
        text.append(f"{jobinfo.layout_text(job)} · {job.gpus:,} GPUs\n")
        items = list(figures(job, state, t).items())
        per_line = 2 if width >= 42 else 1
        for i in range(0, len(items), per_line):
            for k, (key, value) in enumerate(items[i:i + per_line]):
                text.append(f"{key:<12.12}", style="dim")
                text.append(f"{value:>8.8}", style="dim" if value == "—" else "")
                text.append("  " if k + 1 < per_line else "")
            text.append("\n")
        text.rstrip()
        return text

    def columns(self, width: int, longest: int,
                serving: bool = False) -> tuple[int, list[tuple[str, int, str]]]:
        """The name column's width (the longest name, up to half the panel) and the columns that fit after it
        (in COLUMNS order, the serving ones after tok/s when a job serves). Depends on the names, the width
        and whether a job serves only: the same every frame."""
        name_w = min(max(longest, 4), max(12, width // 2))
        shown: list[tuple[str, int, str]] = []
        used = name_w + 1
        order = COLUMNS[:2] + SERVING_COLUMNS + COLUMNS[2:] if serving else COLUMNS
        for column in order:
            if used + column[1] + 1 > width:
                break
            shown.append(column)
            used += column[1] + 1
        return name_w, shown

    def _many(self, state: DisplayState, t: float, width: int) -> Text:
        name_w, columns = self.columns(width, max(len(job.name) for job in state.jobs.values()),
                                       any(is_inference(job) for job in state.jobs.values()))
        self.sortable = tuple(k for k in SORTS if k == "name" or any(c[2] == k for c in columns))
        if self.sort not in self.sortable:          # its column no longer fits: by name
            self.sort, self.descending = "name", False
        jobs = sorted(state.jobs.values(), key=lambda job: job.name)     # ties: by name, either way
        jobs.sort(key=lambda job: sort_value(job, self.sort, state, t), reverse=self.descending)
        text = Text(no_wrap=True, overflow="ellipsis")
        self._headers = []
        x = 0
        for header, w, key in (("job", name_w, "name"), *columns):
            mark = (DESCENDING if self.descending else ASCENDING) if key == self.sort else ""
            cell = header_cell(header, w, key == "name", mark)
            style = "bold underline" if key == self.sort else "dim"
            self._headers.append((x, x + w, key))
            text.append(cell, style=style)
            text.append(" ")
            x += w + 1
        for job in jobs:
            text.append("\n")
            f = figures(job, state, t)
            label, style = status(job, t, run_over(state, t))
            text.append(f"{abbreviate(job.name, name_w):<{name_w}} ",
                        style="bold" if not stopped(job) else style)
            for _, w, key in columns:
                if key == "state":
                    value = label.split(" ")[1] if " " in label else label
                    text.append(f"{value[:w]:>{w}} ", style=style)
                    continue
                value = f.get(key, "—")
                value = value.replace(" s", "") if key == "step time" else value
                text.append(f"{value[-w:]:>{w}} ", style="dim" if value == "—" else "")
        if any(planned(job) and plan_figures(job) for job in jobs if not is_inference(job)):
            text.append(f"\n{PLANNED} planned: no step yet", style="dim italic")
        return text

    def sort_by(self, key: str) -> None:
        """Sort by `key`: the same key again reverses the order; a new one starts names A to Z, figures
        largest first."""
        if key == self.sort:
            self.descending = not self.descending
        else:
            self.sort, self.descending = key, key != "name"
        self._shown = ""

    def cycle_sort(self) -> str:
        """The next column the table shows (only those), and 'tokens/s ▼'."""
        keys = self.sortable
        self.sort_by(keys[(keys.index(self.sort) + 1) % len(keys)] if self.sort in keys else keys[0])
        return self.order

    def reverse_sort(self) -> str:
        self.sort_by(self.sort)
        return self.order

    @property
    def order(self) -> str:
        return f"{self.sort} {DESCENDING if self.descending else ASCENDING}"

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y != 0:
            return
        for x0, x1, key in self._headers:
            if x0 <= offset.x < x1 and key in self.sortable:
                self.sort_by(key)
                running_app(self).redraw()
