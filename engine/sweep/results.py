"""Sweep results (`clustertop sweep -o results.jsonl`, docs/sweep.md): records, reading them, the one ranking.

A results file is JSON Lines, one record per point: {"index", "point", "scenario", "cluster", "jobs": [...]}
(an estimate's JSON), or {"index", "point", "error"} for a point that was refused. The ranking here is the
only one: `clustertop sweep` ranks its points as they stream in (`Ranking`) and the dashboard's table sorts a
file's records (`ranked`), both with these keys, so they always agree. This module imports neither the model
nor SimPy: the dashboard reads results files through it.

Points that fit in memory come first, by step time (shortest first) when they all use the same number of GPUs
and tokens per step, otherwise by tokens/s per GPU (highest first); then the points that do not fit, by memory
per GPU (closest to fitting first); invalid points last. Ties go to the earlier point. A point's step time is
its slowest job's, its throughput and GPUs all its jobs'.

`clustertop sweep --slo ttft=2s,tpot=50ms` ranks only the points whose serving jobs keep up with their offered
rate and meet every limit (`Slo`); the others are counted, not ranked.

`clustertop sweep --rank NAME` ranks the fitting points by one objective of `RANKS` instead: step time,
tokens/s per GPU, dollars per million tokens (all its jobs' dollars per hour over all their tokens), joules
per token (their facility power over their tokens/s) or tokens/s per MW. A record without the figure (written
before they existed) ranks after those with it.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

import orjson

from ..config.errors import UserError, quote
from ..config.units import parse_duration
from ..stream.checks import Check, boolean, count, fields, number, or_null, show, table, text
from ..stream.reader import open_lines

STEP_TIME = "step time"
RATE_PER_GPU = "tokens/s per GPU"
USD_PER_MTOKEN = "$ per million tokens"
J_PER_TOKEN = "joules per token"
RATE_PER_MW = "tokens/s per MW"
# --rank NAME -> the objective it ranks by
RANKS = {"step_time": STEP_TIME, "tokens_per_s_per_gpu": RATE_PER_GPU, "usd_per_mtoken": USD_PER_MTOKEN,
         "energy_j_per_token": J_PER_TOKEN, "tokens_per_s_per_mw": RATE_PER_MW}
# --slo KEY=DURATION: the serving figure each key limits (an estimate's JSON); `ttft` and `tpot` are the 99th
# percentiles, as serving SLOs are written
SLO_FIGURES = {"ttft": "ttft_p99_s", "tpot": "tpot_p99_s", "ttft_median": "ttft_s", "tpot_median": "tpot_s",
               "ttft_mean": "ttft_mean_s", "tpot_mean": "tpot_mean_s"}
SAME_TOKENS = 0.01        # tokens per step within 1% are the same shape (the record's figures are rounded)
_NUMBER = re.compile(r"\d[\d,._]*")  # numbers masked in invalid points' reasons, to count them by kind
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\[\d{1,4}\])?(\.[A-Za-z_][A-Za-z0-9_-]*(\[\d{1,4}\])?){0,7}")
_JOB = {"name": text, "gpus": count, "fits": boolean,
        **{key: or_null(number) for key in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu",
                                            "memory_gb_per_gpu")}}


def _jobs_problem(value: Any) -> str | None:
    """A record's "jobs": a list of the estimate's job objects, with the figures ranking and table read."""
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
    usd_per_hour: float = math.nan     # all jobs together (nan: a record without the figure)
    power_mw: float = math.nan         # all jobs' facility power
    latency: tuple[tuple[str, float], ...] = ()    # serving: each SLO figure, the worst of the serving jobs
    saturated: bool = False                         # serving: a job is offered more than it serves

    @property
    def fits(self) -> bool:
        return self.status == "ok"

    def same_shape(self, other: Facts) -> bool:
        """Same GPUs and tokens per step: step times compare like throughputs."""
        big = max(self.tokens_per_step, other.tokens_per_step, 1e-9)
        close = abs(self.tokens_per_step - other.tokens_per_step) <= SAME_TOKENS * big
        return self.gpus == other.gpus and close

    def __reduce__(self) -> tuple[type[Facts], tuple[Any, ...]]:
        return Facts, _values(self)


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
    serving = [j for j in jobs if j.get("kind") == "inference"]
    latency = tuple((key, max(_latency(j, field) for j in serving))
                    for key, field in SLO_FIGURES.items()) if serving else ()
    return Facts(index, "ok", max(steps), sum(rates), gpus, sum(r * s for r, s in zip(rates, steps)), memory,
                 _total(jobs, "usd_per_hour"), _total(jobs, "power_mw"), latency,
                 any(bool(j.get("saturated")) for j in serving))


def _latency(job: dict[str, Any], field: str) -> float:
    """A serving job's latency figure: infinite when the record has none (written before it existed), 0 when
    it is null (no request had it: one-token answers have no time per output token)."""
    value = job.get(field, math.inf)
    return 0.0 if value is None else float(value)


def _total(jobs: list[dict[str, Any]], key: str) -> float:
    values = [j.get(key) for j in jobs]
    return math.nan if None in values else sum(float(v) for v in values if v is not None)


def objective(varied: bool) -> str:
    """Step time while every fitting point has the first one's shape; tokens/s per GPU once they differ."""
    return RATE_PER_GPU if varied else STEP_TIME


def fit_key(f: Facts, by: str) -> tuple[float, int]:
    """Smaller is better: the objective `by` of a fitting point, then its index."""
    if by == STEP_TIME:
        return f.step_time_s, f.index
    if by == RATE_PER_GPU:
        return -f.tokens_per_s / max(f.gpus, 1), f.index
    rate = max(f.tokens_per_s, 1e-12)
    value = {USD_PER_MTOKEN: f.usd_per_hour / (rate * 3600) * 1e6, J_PER_TOKEN: f.power_mw * 1e6 / rate,
             RATE_PER_MW: -rate / f.power_mw if f.power_mw > 0 else math.nan}[by]
    return (math.inf if math.isnan(value) else value), f.index


def oom_key(f: Facts) -> tuple[float, int]:
    return f.memory_gb, f.index


@dataclass(frozen=True, slots=True)
class Outcome:
    """One evaluated point: its JSON Lines record and its ranking facts."""
    index: int
    line: bytes                   # the record, newline included
    status: str                   # "ok" | "invalid" (the loader or the model refused it) | "failed" (a bug)
    facts: Facts
    reason: str = ""              # the error of an invalid or failed point

    @property
    def fits(self) -> bool:
        return self.facts.fits

    def __reduce__(self) -> tuple[type[Outcome], tuple[Any, ...]]:
        return Outcome, _values(self)


def _values(item: Facts | Outcome) -> tuple[Any, ...]:
    """A record's facts or outcome pickled as the tuple of its field values, rebuilt by calling the class (a
    sweep's workers send thousands: pickling the instance state of a frozen slotted dataclass looks its fields
    up for every object)."""
    return _GETTERS[type(item)](item)


_GETTERS = {cls: operator.attrgetter(*(f.name for f in dataclasses.fields(cls))) for cls in (Facts, Outcome)}


class _Best:
    """The n smallest keys seen, with their outcomes (a bounded max-heap)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.heap: list[tuple[tuple[float, ...], Outcome]] = []

    def add(self, key: tuple[float, ...], outcome: Outcome) -> None:
        item = (tuple(-k for k in key), outcome)
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, item)
        elif item[0] > self.heap[0][0]:
            heapq.heapreplace(self.heap, item)

    def sorted(self) -> list[Outcome]:
        return [o for _, o in sorted(self.heap, reverse=True)]


@dataclass(frozen=True)
class Slo:
    """Serving targets (`--slo ttft=2s,tpot=50ms`): the most each latency may be, in seconds."""

    limits: tuple[tuple[str, float], ...]

    def met(self, f: Facts) -> bool:
        """Every serving job of the point keeps up with what it is offered and meets every limit."""
        return self.miss(f) <= 1.0

    def miss(self, f: Facts) -> float:
        """How far the point is from the SLO: its worst latency over its limit (at most 1: met); infinite when
        a serving job falls behind its offered rate (its latencies grow with the queue) or there is none."""
        latency = dict(f.latency)
        if not latency or f.saturated:
            return math.inf
        return max(latency[k] / v for k, v in self.limits)

    def __str__(self) -> str:
        return ", ".join(f"{k} <= {v * 1000:,g} ms" for k, v in self.limits)


def parse_slo(text: str) -> Slo:
    """`ttft=2s,tpot=50ms` as an Slo; UserError naming --slo otherwise."""
    limits: dict[str, float] = {}
    for part in text.split(","):
        if part.strip().partition("=")[0] in limits:
            raise UserError(f"--slo {quote(text)}: {part.strip().partition('=')[0]} is given twice")
        key, sep, value = part.strip().partition("=")
        if not sep or key not in SLO_FIGURES:
            raise UserError(f"--slo {quote(text)}: {quote(part.strip())} is not KEY=DURATION; expected keys "
                            f"{', '.join(SLO_FIGURES)} (ttft and tpot: the 99th percentile), e.g. "
                            "ttft=2s,tpot=50ms")
        try:
            limits[key] = parse_duration(value.strip())
        except ValueError as exc:
            raise UserError(f"--slo {key}: {exc}") from None
    return Slo(tuple(limits.items()))


class Ranking:
    """Counts, reasons and the best points of a sweep, fed one outcome at a time in point order, ranked by the
    keys above (the best `top` of each kind are kept). `rank`: a key of RANKS to rank the fitting points by
    (None: step time, or tokens/s per GPU once their shapes differ)."""

    def __init__(self, top: int, rank: str | None = None, slo: Slo | None = None) -> None:
        self.top = max(1, top)
        self.slo = slo
        self.missed = 0                             # fitting points that miss the SLO (not ranked)
        self.chosen = RANKS[rank] if rank is not None else None
        self._by_chosen = _Best(self.top)
        self.total = self.fit = self.oom = self.invalid = self.failed = 0
        self.reasons: dict[str, list[Any]] = {}     # message with numbers masked -> [count, first message]
        self.failures: list[str] = []               # the first few estimator failures
        self._by_step = _Best(self.top)
        self._by_rate = _Best(self.top)
        self._oom = _Best(self.top)
        self._nearest = _Best(self.top)            # the fitting points closest to meeting the SLO
        self._first: Facts | None = None            # the first fitting point
        self._varied = False                        # some fitting point has another shape

    def add(self, o: Outcome) -> None:
        self.total += 1
        if o.status == "invalid":
            self.invalid += 1
            entry = self.reasons.setdefault(_NUMBER.sub("#", o.reason), [0, o.reason])
            entry[0] += 1
        elif o.status == "failed":
            self.failed += 1
            if len(self.failures) < 3:
                self.failures.append(o.reason)
        elif o.fits and self.slo is not None and not self.slo.met(o.facts):
            self.fit += 1
            self.missed += 1
            self._nearest.add((self.slo.miss(o.facts), o.index), o)
        elif o.fits:
            self.fit += 1
            if self._first is None:
                self._first = o.facts
            elif not self._varied:
                self._varied = not o.facts.same_shape(self._first)
            if self.chosen is not None:
                self._by_chosen.add(fit_key(o.facts, self.chosen), o)
                return
            self._by_step.add(fit_key(o.facts, STEP_TIME), o)
            self._by_rate.add(fit_key(o.facts, RATE_PER_GPU), o)
        else:
            self.oom += 1
            self._oom.add(oom_key(o.facts), o)

    @property
    def objective(self) -> str:
        return self.chosen if self.chosen is not None else objective(self._varied)

    def best(self, n: int | None = None) -> list[Outcome]:
        """The best n points (default: top), fitting ones first."""
        fitting = self._by_chosen if self.chosen is not None else \
            self._by_step if self.objective == STEP_TIME else self._by_rate
        return (fitting.sorted() + self._oom.sorted())[: self.top if n is None else n]

    def nearest(self) -> list[Outcome]:
        """The fitting points that miss the SLO, closest first (by their worst latency over its limit)."""
        return self._nearest.sorted()

    def reason_summary(self) -> list[tuple[int, str]]:
        """(count, first message) per kind of invalid point (messages alike but for numbers), most frequent
        first."""
        return sorted(((c, m) for c, m in self.reasons.values()), key=lambda r: (-r[0], r[1]))


def ranked(records: list[dict[str, Any]], by: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Records in rank order, and the objective the fitting ones are ranked by (`by`: one of RANKS' values;
    None: step time or tokens/s per GPU, as `objective` says)."""
    pairs = [(facts(r), r) for r in records]
    fitting = [p for p in pairs if p[0].fits]
    first = fitting[0][0] if fitting else None
    if by is None:
        by = objective(first is not None and any(not f.same_shape(first) for f, _ in fitting))
    fitting.sort(key=lambda p: fit_key(p[0], by))
    oom = sorted((p for p in pairs if p[0].status == "oom"), key=lambda p: oom_key(p[0]))
    invalid = sorted((p for p in pairs if p[0].status == "invalid"), key=lambda p: p[0].index)
    return [r for _, r in fitting + oom + invalid], by


EXPECTED = "a sweep results file (clustertop sweep -o)"
_RECORD: dict[str, Check] = {"index": count, "point": table, "scenario": text, "error": text,
                             "jobs": _jobs_problem}


def looks_like_sweep_results(path: str) -> bool:
    """True when the file's first line is a sweep record ({"index", "point", ...}), not a stream's header."""
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
        raise UserError(f"index {record['index']} is another record's too; expected one record per point",
                        where)
    indexes.add(record["index"])
    return record


def _point_problem(point: dict[str, Any]) -> str | None:
    for key, value in point.items():
        if not _KEY.fullmatch(key):
            return f"point: key {quote(key[:60])} is not a scenario key (jobs[0].tp, cluster.gpus, ...)"
        if not (type(value) in (int, float, bool) or (type(value) is str and text(value) is None)):
            return f"point.{key}: expected a number, true/false or plain text, got {show(value)}"
    return None
