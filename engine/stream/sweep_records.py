"""Sweep results (`clustertop sweep -o results.jsonl`, docs/sweep.md): reading them, and the one ranking of points.

A results file is JSON Lines, one record per point: {"index", "point", "scenario", "cluster", "jobs": [...]} (an
estimate's JSON), or {"index", "point", "error"} for a point that was refused. The ranking here is the only one:
`clustertop sweep` ranks its points as they stream in (engine/sweep.py) and the dashboard's table sorts a file's
records, both with these keys, so they always agree.

Points that fit in memory come first, by step time (shortest first) when they all use the same number of GPUs and
tokens per step, otherwise by tokens/s per GPU (highest first); then the points that do not fit, by memory per
GPU (closest to fitting first); invalid points last. Ties go to the earlier point. A point's step time is its
slowest job's, its throughput and GPUs all its jobs'.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ..config.errors import UserError, quote
from .checks import boolean, count, fields, number, or_null, show, table, text
from .reader import open_lines

STEP_TIME = "step time"
RATE_PER_GPU = "tokens/s per GPU"
SAME_TOKENS = 0.01        # tokens per step within 1% are the same shape (the record's figures are rounded)
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\[\d{1,4}\])?(\.[A-Za-z_][A-Za-z0-9_-]*(\[\d{1,4}\])?){0,7}")
_JOB = {"name": text, "gpus": count, "fits": boolean,
        **{key: or_null(number) for key in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu",
                                            "memory_gb_per_gpu")}}


def _jobs_problem(value: Any) -> str | None:
    """A record's "jobs": a list of the estimate's job objects, with the figures ranking and the table read."""
    if type(value) is not list:
        return "expected a list of jobs"
    for i, job in enumerate(value):
        why = fields(job, _JOB, f"[{i}].") if type(job) is dict else f"[{i}]: expected an object"
        if why:
            return why
    return None


@dataclass(frozen=True, slots=True)
class Facts:
    """What ranking needs of one point, read from its record."""

    index: int
    status: str                    # "ok" (every job fits) | "oom" (a job does not fit) | "invalid"
    step_time_s: float = math.inf  # the slowest job's
    tokens_per_s: float = 0.0      # all jobs together
    gpus: int = 0                  # all jobs together
    tokens_per_step: float = 0.0   # all jobs together (from the rounded figures)
    memory_gb: float = 0.0         # the largest per-GPU footprint of the jobs

    @property
    def fits(self) -> bool:
        return self.status == "ok"

    def same_shape(self, other: Facts) -> bool:
        """Same GPUs and tokens per step: step times compare like throughputs."""
        big = max(self.tokens_per_step, other.tokens_per_step, 1e-9)
        return self.gpus == other.gpus and abs(self.tokens_per_step - other.tokens_per_step) <= SAME_TOKENS * big


def facts(record: dict[str, Any]) -> Facts:
    """A record's ranking facts; ValueError (or KeyError, TypeError) when its jobs are malformed."""
    index = int(record.get("index", 0))
    jobs = record.get("jobs")
    if "error" in record or not jobs:
        return Facts(index, "invalid")
    memory = max(float(j.get("memory_gb_per_gpu") or 0.0) for j in jobs)
    gpus = sum(int(j.get("gpus", 0)) for j in jobs)
    if not all(j.get("fits", False) and j.get("step_time_s") is not None for j in jobs):
        return Facts(index, "oom", gpus=gpus, memory_gb=memory)
    steps = [float(j["step_time_s"]) for j in jobs]
    rates = [float(j.get("tokens_per_s") or 0.0) for j in jobs]
    return Facts(index, "ok", max(steps), sum(rates), gpus, sum(r * s for r, s in zip(rates, steps)), memory)


def objective(varied: bool) -> str:
    """Step time while every fitting point has the first one's shape; tokens/s per GPU once they differ."""
    return RATE_PER_GPU if varied else STEP_TIME


def fit_key(f: Facts, by: str) -> tuple[float, int]:
    if by == STEP_TIME:
        return f.step_time_s, f.index
    return -f.tokens_per_s / max(f.gpus, 1), f.index


def oom_key(f: Facts) -> tuple[float, int]:
    return f.memory_gb, f.index


def ranked(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Records in rank order, and the objective the fitting ones are ranked by."""
    pairs = [(facts(r), r) for r in records]
    fitting = [p for p in pairs if p[0].fits]
    first = fitting[0][0] if fitting else None
    by = objective(first is not None and any(not f.same_shape(first) for f, _ in fitting))
    fitting.sort(key=lambda p: fit_key(p[0], by))
    oom = sorted((p for p in pairs if p[0].status == "oom"), key=lambda p: oom_key(p[0]))
    invalid = sorted((p for p in pairs if p[0].status == "invalid"), key=lambda p: p[0].index)
    return [r for _, r in fitting + oom + invalid], by


EXPECTED = "a sweep results file (clustertop sweep -o)"
_RECORD = {"index": count, "point": table, "scenario": text, "error": text, "jobs": _jobs_problem}


def looks_like_sweep_results(path: str) -> bool:
    """True when the file's first line is a sweep record ({"index", "point", ...}) rather than a stream header."""
    if path == "-":
        return False
    try:
        lines = open_lines(path, EXPECTED)
    except UserError:
        return False            # the recording reader reports the problem
    try:
        first = next(iter(lines), None)
        if first is None:
            first = lines.tail
    except UserError:
        return False
    finally:
        lines.close()
    try:
        record = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(record, dict) and "point" in record and "index" in record and "type" not in record


def read_results(path: str) -> list[dict[str, Any]]:
    """Every record of a results file, checked; UserError (file:line) on anything else. A last line cut short
    (a sweep killed while writing, plain or gzip) is left out: the complete lines are used."""
    records: list[dict[str, Any]] = []
    indexes: set[int] = set()
    lines = open_lines(path, EXPECTED)
    try:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                records.append(_record(line, f"{path}:{number}", indexes))
        if lines.tail:
            try:
                records.append(_record(lines.tail, f"{path}:{lines.count + 1}", indexes))
            except UserError:
                pass            # cut short by a killed sweep
    finally:
        lines.close()
    if not records:
        raise UserError("has no sweep records", path)
    return records


def _record(line: bytes, where: str, indexes: set[int]) -> dict[str, Any]:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise UserError("line is not JSON; expected a sweep record", where) from None
    if not isinstance(record, dict) or "point" not in record or "index" not in record:
        raise UserError('expected a sweep record with "index" and "point"', where)
    why = fields(record, _RECORD) or _point_problem(record["point"])
    if why:
        raise UserError(f"{why}; expected a sweep record (docs/sweep.md)", where)
    if record["index"] in indexes:
        raise UserError(f"index {record['index']} is another record's too; expected one record per point", where)
    indexes.add(record["index"])
    return record


def _point_problem(point: dict[str, Any]) -> str | None:
    for key, value in point.items():
        if not _KEY.fullmatch(key):
            return f"point: key {quote(key[:60])} is not a scenario key (jobs[0].tp, cluster.gpus, ...)"
        if not (type(value) in (int, float, bool) or (type(value) is str and text(value) is None)):
            return f"point.{key}: expected a number, true/false or plain text, got {show(value)}"
    return None
