"""Job figures: step, step time, tokens/s, TFLOP/s per GPU, MFU, effective training time, ETA."""

from __future__ import annotations

import math

from clustertop.engine.stream.state import ClusterState, JobStatus
from rich.table import Table
from rich.text import Text

from .. import format as fmt
from .. import jobinfo
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
    return min(1.0, job.step * job.step_time_s / elapsed)


def eta(job: JobStatus, state: ClusterState, t: float) -> tuple[str, float | None]:
    """Time left: to the job's token target when the header has one, else to the end of the run."""
    target = job.info.get("tokens_target") or job.info.get("train_tokens")
    if target and job.tokens_per_s > 0:
        return "ETA", max(0.0, (float(target) - job.tokens) / job.tokens_per_s)
    duration = state.header.get("duration_s")
    return "run ends in", (max(0.0, float(duration) - t) if duration else None)


def job_start_time(state: ClusterState, name: str) -> float:
    for event in state.events:
        if event.get("type") == "job_start" and event.get("job") == name:
            return float(event.get("t", 0.0))
    return 0.0


def is_inference(job: JobStatus) -> bool:
    return str(job.info.get("kind", "")) == "inference"


def _seconds(value: object) -> str:
    """A latency: ms below a second."""
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "—"
    if math.isnan(v) or v < 0:   # NaN: no request finished yet
        return "—"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def _latency(job: JobStatus, name: str) -> str:
    """TTFT / TPOT from the latest step event (or sample status), else the header: `<name>_s` or `<name>_ms`."""
    src = job._src if f"{name}_s" in job._src or f"{name}_ms" in job._src else job.info
    if f"{name}_s" in src:
        return _seconds(src[f"{name}_s"])
    if f"{name}_ms" in src:
        try:
            return _seconds(float(src[f"{name}_ms"]) / 1000)
        except (TypeError, ValueError):
            return "—"
    return "—"


def inference_figures(job: JobStatus, state: ClusterState, t: float) -> dict[str, str]:
    """An inference job: throughput and latency instead of MFU (what the step events carry; "—" if absent)."""
    src = job._src
    label, left = eta(job, state, t)
    out = {
        "tokens/s": fmt.si(job.tokens_per_s) if job.tokens_per_s else "—",
        "TTFT": _latency(job, "ttft"),
        "TPOT": _latency(job, "tpot"),
    }
    for key, name in (("requests_per_s", "requests/s"), ("batch", "batch")):
        if src.get(key) is not None:
            out[name] = fmt.si(float(src[key])) if key == "requests_per_s" else f"{src[key]:,}"
    out["tokens"] = fmt.si(job.tokens) if job.tokens else "0"
    out["interrupts"] = f"{job.interruptions:,}"
    out[label] = fmt.duration(left) if left else "—"
    return out


def figures(job: JobStatus, state: ClusterState, t: float) -> dict[str, str]:
    """The figures of one job as display strings (shared with compare mode)."""
    if is_inference(job):
        return inference_figures(job, state, t)
    eff = effective(job, t, job_start_time(state, job.name))
    label, left = eta(job, state, t)
    return {
        "step": f"{job.step:,}",
        "step time": f"{job.step_time_s:.2f} s" if job.step_time_s else "—",
        "tokens/s": fmt.si(job.tokens_per_s) if job.tokens_per_s else "—",
        "TFLOP/s/GPU": f"{job.tflops_per_gpu:.0f}" if job.tflops_per_gpu else "—",
        "MFU": f"{job.mfu * 100:.1f}%" if job.mfu else "—",
        "effective": f"{eff * 100:.1f}%" if eff is not None else "—",
        "tokens": fmt.si(job.tokens) if job.tokens else "0",
        label: fmt.duration(left) if left else "—",
        "interrupts": f"{job.interruptions:,}",
        "work lost": fmt.si(job.tokens_lost) + " tok" if job.tokens_lost else "0",
    }


class JobsPanel(Panel):
    """One block of figures per job (a table row per job when there are several)."""

    TITLE = "jobs"

    def show(self, state: ClusterState, t: float) -> None:
        key = repr([(job.name, job.running, figures(job, state, t)) for job in state.jobs.values()])
        if key == self._shown:
            return
        jobs = list(state.jobs.values())
        self.show_if_changed(key, self._one(jobs[0], state, t) if len(jobs) == 1 else self._many(state, t))

    def _one(self, job: JobStatus, state: ClusterState, t: float) -> Text:
        text = Text()
        status = (("▲ down (fault)", "bold red") if job.down else ("● running", "green") if job.running
                  else ("○ stopped", "red"))
        text.append(f"{job.name} ", style="bold")
        text.append(f"{jobinfo.model_name(job)}\n", style="dim")
        text.append(f"{jobinfo.layout_text(job)} · {job.gpus:,} GPUs  ")
        text.append(status[0] + "\n", style=status[1])
        items = list(figures(job, state, t).items())
        for i in range(0, len(items), 2):
            for key, value in items[i:i + 2]:
                text.append(f"{key:<12}", style="dim")
                text.append(f"{value:>9}  ")
            text.append("\n")
        text.rstrip()
        return text

    def _many(self, state: ClusterState, t: float) -> Table:
        table = Table(box=None, padding=(0, 1), expand=True, show_edge=False)
        for column in ("job", "step", "s/step", "tok/s", "TFLOP", "MFU", "eff.", "int."):
            table.add_column(column, justify="left" if column == "job" else "right", style=None,
                             header_style="dim")
        for job in state.jobs.values():
            f = figures(job, state, t)
            name = Text(job.name, style="bold red" if job.down else "bold" if job.running else "red")
            if is_inference(job):   # latency in the TFLOP/MFU columns: TTFT, TPOT
                table.add_row(name, "—", "—", f["tokens/s"], f["TTFT"], f["TPOT"], "—", f["interrupts"])
                continue
            table.add_row(name, f["step"], f["step time"].removesuffix(" s"), f["tokens/s"], f["TFLOP/s/GPU"],
                          f["MFU"], f["effective"], f["interrupts"])
        return table
