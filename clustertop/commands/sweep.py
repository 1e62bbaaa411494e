"""`clustertop sweep`: every combination of scenario values, estimated in parallel; the best printed first.

Records stream to -o FILE (JSON Lines, in point order; `-` for stdout, `.gz` compressed); the summary and the
table of the best points go to stdout (to stderr when the records do), a progress bar to stderr when it is a
terminal. See docs/sweep.md.
"""

from __future__ import annotations

import argparse
import gzip
import math
import sys
import time
from pathlib import Path
from typing import IO, Any, TextIO, cast

import orjson

from clustertop.engine import sweep
from clustertop.engine.config.errors import UserError
from clustertop.progress import Bar, wanted

ESTIMATOR: sweep.Estimator | None = None     # None: the performance model (tests put a stand-in here)
MAX_REASONS = 8                               # kinds of invalid points listed in the summary


def main(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise UserError(f"--top {args.top}: expected 0 or more")
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers {args.workers}: expected at least 1")
    if args.workers is not None and args.dask:
        raise UserError("--workers is for local runs; with --dask the cluster's workers run the points")
    if args.best_to:
        _check_dir(args.best_to, "--best-to")
    plan = sweep.plan(args.scenario, args.vary, ESTIMATOR)
    to_stdout = args.output == "-"
    report: TextIO = sys.stderr if to_stdout else sys.stdout
    sink = _open(args.output) if args.output else None
    bar = Bar(plan.size, wanted(args.output))
    started = time.perf_counter()
    try:
        ranking = sweep.sweep_to(plan, sink, top=max(args.top, 1), workers=args.workers, dask=args.dask,
                                 rank=args.rank,
                                 progress=lambda r: bar.update(r.total, f"{r.total:,}/{plan.size:,} points, "
                                                                        f"{bar.rate(r.total):,.0f}/s, "
                                                                        f"{r.invalid:,} invalid"))
    finally:
        bar.close()
        if sink is not None and not to_stdout:
            sink.close()
    _summary(plan, ranking, args, time.perf_counter() - started, report)
    best = ranking.best(args.top)
    if best:
        print(file=report)
        oom = " (out-of-memory points last)" if not best[-1].fits else ""
        print(f"best {len(best)} by {ranking.objective}{oom}:", file=report)
        print(_table(plan, best), file=report)
    if args.best_to:
        winner = ranking.best(1)
        if not winner or not winner[0].fits:
            raise UserError(f"no point fits in memory; nothing written to {args.best_to}")
        try:
            Path(args.best_to).write_text(sweep.best_scenario(plan, winner[0], ranking))
        except OSError as exc:
            raise UserError(f"cannot write: {exc.strerror}", args.best_to) from None
        print(f"wrote the best point ({sweep.point_label(plan, winner[0].index)}) to {args.best_to}", file=report)
    return 0


def _summary(plan: sweep.Sweep, ranking: sweep.Ranking, args: argparse.Namespace, elapsed: float,
             report: TextIO) -> None:
    """How many points, how fast, how many invalid and why, what was derived, where the records went."""
    where = f"Dask at {args.dask}" if args.dask else f"{_workers(args, plan):,} worker(s)"
    print(f"{plan.name}: {plan.size:,} points in {elapsed:.2f} s ({plan.size / max(elapsed, 1e-9):,.0f} points/s, "
          f"{where})", file=report)
    print(f"  {ranking.fit:,} fit, {ranking.oom:,} out of memory, {ranking.invalid:,} invalid (skipped)"
          + (f", {ranking.failed:,} failed in the estimator" if ranking.failed else ""), file=report)
    reasons = ranking.reason_summary()
    for count, message in reasons[:MAX_REASONS]:
        print(f"  {count:>7,} x {message}", file=report)
    if len(reasons) > MAX_REASONS:
        rest = sum(count for count, _ in reasons[MAX_REASONS:])
        print(f"  {rest:>7,} x other reasons ({len(reasons) - MAX_REASONS} kinds; see the records' \"error\")",
              file=report)
    for message in ranking.failures:
        print(f"  failed: {message}", file=report)
    if plan.derived:
        print(f"  dp derived as GPUs / (tp*cp*pp): the base's {', '.join(plan.derived)} left out of every point",
              file=report)
    if args.output and args.output != "-":
        print(f"  wrote {plan.size:,} records to {args.output}", file=report)


def _workers(args: argparse.Namespace, plan: sweep.Sweep) -> int:
    workers = args.workers or sweep.available_cpus()
    chunks = -(-plan.size // sweep.chunk_size(plan.size, workers))
    return min(workers, chunks)


def _check_dir(path: str, flag: str) -> None:
    parent = Path(path).parent
    if not parent.is_dir():
        raise UserError(f"{flag}: no such directory {str(parent)!r}", path)


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdout.buffer
    _check_dir(path, "-o")
    try:
        return cast(IO[bytes], gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb"))
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", path) from None


def _table(plan: sweep.Sweep, best: list[sweep.Outcome]) -> str:
    """The best points, one row each: the varied values, then what the estimate says."""
    single = len(plan.source["jobs"]) == 1
    keys = [a.key.removeprefix("jobs[0].") if single else a.key for a in plan.axes]
    header = ["#", *keys, "GPUs", "step s", "tokens/s", "tok/s/GPU", "MFU", "$/Mtok", "mem GB/GPU"]
    rows = [header]
    for rank, o in enumerate(best, start=1):
        record: dict[str, Any] = orjson.loads(o.line)
        values = [_show(v) for v in plan.choice(o.index)]
        point = o.facts
        if point.fits:
            mfu = sum((j.get("mfu") or 0.0) * j["gpus"] for j in record["jobs"]) / point.gpus
            usd = point.usd_per_hour / (point.tokens_per_s * 3600) * 1e6 if point.tokens_per_s else float("nan")
            numbers = [f"{point.step_time_s:.3f}", f"{point.tokens_per_s:,.0f}",
                       f"{point.tokens_per_s / point.gpus:,.1f}", f"{mfu * 100:.1f}%",
                       "-" if math.isnan(usd) else f"{usd:.3f}"]
        else:
            numbers = ["OOM", "-", "-", "-", "-"]
        rows.append([str(rank), *values, f"{point.gpus:,}", *numbers, f"{point.memory_gb:.1f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    left = set(range(1, 1 + len(keys)))
    return "\n".join("  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                     .rstrip() for r in rows)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
