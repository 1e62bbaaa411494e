"""`clustertop sweep`: every combination of scenario values, estimated in parallel; the best printed first.

Records stream to -o FILE (JSON Lines, in point order; `-` for stdout, `.gz` compressed); the summary and the
table of the best points go to stdout (to stderr when the records do), a progress bar to stderr when it is a
terminal. See docs/sweep.md.
"""

from __future__ import annotations

import argparse
import gzip
import io
import math
import sys
import time
from typing import Any, TextIO

import orjson
from clustertop.engine.config import units
from clustertop.engine.config.errors import UserError, escape
from clustertop.engine.config.outfile import Output, open_output
from clustertop.engine.sweep.pool import available_cpus
from clustertop.engine.sweep.results import Facts, Outcome, Ranking, parse_slo
from clustertop.engine.sweep.run import processes, sweep_to
from clustertop.engine.sweep.signals import held
from clustertop.engine.sweep.space import Estimator, Sweep, best_scenario, plan, point_label
from clustertop.progress import Bar, wanted
from clustertop.signals import terminate_quietly

ESTIMATOR: Estimator | None = None           # None: the performance model (tests put a stand-in here)
MAX_REASONS = 8                               # kinds of invalid points listed in the summary
MAX_WORKERS = 256                             # local worker processes: more is a fork bomb, not a speed-up


def main(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise UserError(f"--top {args.top}: expected 0 or more")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise UserError(f"--workers {args.workers}: expected 1 to {MAX_WORKERS} (one process each; this "
                        f"machine has {available_cpus()} CPUs)")
    if args.workers is not None and args.dask:
        raise UserError("--workers is for local runs; with --dask the cluster's workers run the points")
    best = open_output(args.best_to, "--best-to", atomic=True) if args.best_to else None   # before the sweep
    try:
        return _sweep(args, best)
    except BaseException:
        if best is not None:
            best.abort()
        raise


def _sweep(args: argparse.Namespace, best: Output | None) -> int:
    slo = parse_slo(args.slo) if args.slo is not None else None
    sw = plan(args.scenario, args.vary, ESTIMATOR)
    if slo is not None and not any(j.get("kind") == "inference" for j in sw.source["jobs"]):
        raise UserError(f"--slo: {sw.name} has no inference job (kind = \"inference\"); an SLO is of serving")
    to_stdout = args.output == "-"
    report: TextIO = sys.stderr if to_stdout else sys.stdout
    out = open_output(args.output) if args.output else None
    sink: Output | GzipSink | None = out
    if out is not None and args.output.endswith(".gz"):
        sink = GzipSink(out, args.output)
    bar = Bar(sw.size, wanted(args.output))
    started = time.perf_counter()
    try:
        with terminate_quietly():
            ranking = sweep_to(sw, sink, top=max(args.top, 1), workers=args.workers, dask=args.dask,
                               rank=args.rank, slo=slo,
                               progress=lambda r: bar.update(r.total, f"{r.total:,}/{sw.size:,} points, "
                                                                      f"{bar.rate(r.total):,.0f}/s, "
                                                                      f"{r.invalid:,} invalid"))
    finally:
        bar.close()
        _close(sink, out)
    _summary(sw, ranking, args, time.perf_counter() - started, report)
    top = ranking.best(args.top)
    serving = slo is not None
    if top and (top[0].fits or not ranking.missed):
        print(file=report)
        oom = " (out-of-memory points last)" if not top[-1].fits else ""
        within = f" within the SLO ({slo})" if serving else ""
        print(f"best {len(top)}{within} by {ranking.objective}{oom}:", file=report)
        print(_table(sw, top, serving), file=report)
    elif ranking.missed:
        near = ranking.nearest()
        print(file=report)
        print(f"no point meets the SLO; the {len(near)} closest (by their worst latency over its limit):",
              file=report)
        print(_table(sw, near, serving), file=report)
    if best is not None:
        winner = ranking.best(1)
        if not winner or not winner[0].fits:
            why = "meets the SLO" if slo is not None and ranking.fit else "fits in memory"
            raise UserError(f"no point {why}; nothing written to {args.best_to}")
        best.write(best_scenario(sw, winner[0].index, ranking.objective).encode())
        best.close()
        print(f"wrote the best point ({point_label(sw, winner[0].index)}) to {escape(args.best_to)}",
              file=report)
    return 0


def _summary(sw: Sweep, ranking: Ranking, args: argparse.Namespace, elapsed: float, report: TextIO) -> None:
    """How many points, how fast, how many invalid and why, what was derived, where the records went."""
    where = f"Dask at {escape(args.dask)}" if args.dask else f"{processes(sw, args.workers):,} worker(s)"
    print(f"{sw.name}: {sw.size:,} points in {elapsed:.2f} s ({sw.size / max(elapsed, 1e-9):,.0f} points/s, "
          f"{where})", file=report)
    print(f"  {ranking.fit:,} fit, {ranking.oom:,} out of memory, {ranking.invalid:,} invalid (skipped)"
          + (f", {ranking.failed:,} failed in the estimator" if ranking.failed else ""), file=report)
    if ranking.slo is not None:
        print(f"  {ranking.fit - ranking.missed:,} meet the SLO ({ranking.slo}, keeping up with the offered "
              f"rate), {ranking.missed:,} miss it (not ranked)", file=report)
    reasons = ranking.reason_summary()
    for count, message in reasons[:MAX_REASONS]:
        print(f"  {count:>7,} x {message}", file=report)
    if len(reasons) > MAX_REASONS:
        rest = sum(count for count, _ in reasons[MAX_REASONS:])
        print(f"  {rest:>7,} x other reasons ({len(reasons) - MAX_REASONS} kinds; see the records' "
              "\"error\")", file=report)
    for message in ranking.failures:
        print(f"  failed: {message}", file=report)
    if sw.derived:
        print(f"  dp derived as GPUs / (tp*cp*pp): the base's {', '.join(sw.derived)} left out of every "
              "point", file=report)
    if args.output and args.output != "-":
        print(f"  wrote {sw.size:,} records to {escape(args.output)}", file=report)


class GzipSink:
    """The records gzip-compressed into `out`. The compressor's state, its checksum and its length change
    together, SIGINT and SIGTERM held (engine/sweep/signals.py): a signal between them left a stream whose
    checksum did not match, unreadable as a whole. What reaches `out` is cut only where its write is."""

    def __init__(self, out: Output, name: str) -> None:
        self.out = out
        self._pending = io.BytesIO()
        self._gzip = gzip.GzipFile(filename=name, mode="wb", fileobj=self._pending)

    def write(self, data: bytes) -> int:
        with held():
            self._gzip.write(data)
        return len(data)

    def flush(self) -> None:
        with held():
            self._gzip.flush()
        self._send()
        self.out.flush()

    def close(self) -> None:
        with held():
            self._gzip.close()
        self._send()

    def _send(self) -> None:
        data = self._pending.getvalue()
        self._pending.seek(0)
        self._pending.truncate()
        self.out.write(data)


def _close(sink: Output | GzipSink | None, out: Output | None) -> None:
    """End the records' gzip stream (if any) and the output; a full disk here is the one error reported."""
    if sink is None or out is None:
        return
    try:
        if sink is not out:
            sink.close()
    finally:
        out.close()


def _table(sw: Sweep, best: list[Outcome], serving: bool = False) -> str:
    """The best points, one row each: the varied values, then what the estimate says (`serving`: with the
    serving jobs' requests/s and their worst TTFT and TPOT, 99th percentiles)."""
    single = len(sw.source["jobs"]) == 1
    keys = [a.key.removeprefix("jobs[0].") if single else a.key for a in sw.axes]
    header = ["#", *keys, "GPUs", "step s", "tokens/s", "tok/s/GPU", "MFU", "$/Mtok", "mem GB/GPU"]
    if serving:
        header += ["req/s", "TTFT p99", "TPOT p99"]
    rows = [header]
    for rank, o in enumerate(best, start=1):
        record: dict[str, Any] = orjson.loads(o.line)
        values = [_show(v) for v in sw.choice(o.index)]
        point = o.facts
        if point.fits:
            mfu = sum((j.get("mfu") or 0.0) * j["gpus"] for j in record["jobs"]) / point.gpus
            usd = (point.usd_per_hour / (point.tokens_per_s * 3600) * 1e6 if point.tokens_per_s
                   else float("nan"))
            numbers = [f"{point.step_time_s:.3f}", f"{point.tokens_per_s:,.0f}",
                       f"{point.tokens_per_s / point.gpus:,.1f}", f"{mfu * 100:.1f}%",
                       "-" if math.isnan(usd) else f"{usd:.3f}"]
        else:
            numbers = ["OOM", "-", "-", "-", "-"]
        row = [str(rank), *values, f"{point.gpus:,}", *numbers, f"{point.memory_gb:.1f}"]
        if serving:
            row += _serving_cells(record, point)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    left = set(range(1, 1 + len(keys)))
    return "\n".join("  ".join(c.ljust(w) if i in left else c.rjust(w)
                              for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows)


def _serving_cells(record: dict[str, Any], point: Facts) -> list[str]:
    """A point's serving figures: requests/s of its serving jobs, their worst TTFT and TPOT (p99), or that
    they fall behind the offered rate."""
    jobs = [j for j in record.get("jobs") or [] if j.get("kind") == "inference"]
    if not point.fits or not jobs:
        return ["-", "-", "-"]
    rate = sum(float(j.get("requests_per_s") or 0.0) for j in jobs)
    if point.saturated:
        return [f"{rate:,.0f}", "saturated", "saturated"]
    latency = dict(point.latency)
    return [f"{rate:,.0f}", units.latency(latency["ttft"]), units.latency(latency["tpot"])]


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
