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
from typing import IO, Any, TextIO, cast

import orjson
from clustertop.engine import sweep
from clustertop.engine.config.errors import UserError, escape
from clustertop.engine.config.outfile import Output, open_output
from clustertop.progress import Bar, wanted
from clustertop.signals import terminate_quietly

ESTIMATOR: sweep.Estimator | None = None     # None: the performance model (tests put a stand-in here)
MAX_REASONS = 8                               # kinds of invalid points listed in the summary
MAX_WORKERS = 256                             # local worker processes: more is a fork bomb, not a speed-up


def main(args: argparse.Namespace) -> int:
    if args.top < 0:
        raise UserError(f"--top {args.top}: expected 0 or more")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise UserError(f"--workers {args.workers}: expected 1 to {MAX_WORKERS} (one process each; this machine has "
                        f"{sweep.available_cpus()} CPUs)")
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
    plan = sweep.plan(args.scenario, args.vary, ESTIMATOR)
    to_stdout = args.output == "-"
    report: TextIO = sys.stderr if to_stdout else sys.stdout
    out = open_output(args.output) if args.output else None
    sink = out
    if out is not None and args.output.endswith(".gz"):
        sink = cast(IO[bytes], gzip.GzipFile(filename=args.output, mode="wb", fileobj=out))   # type: ignore[arg-type]
    bar = Bar(plan.size, wanted(args.output))
    started = time.perf_counter()
    try:
        with terminate_quietly():
            ranking = sweep.sweep_to(plan, sink, top=max(args.top, 1), workers=args.workers, dask=args.dask,
                                     rank=args.rank,
                                     progress=lambda r: bar.update(r.total, f"{r.total:,}/{plan.size:,} points, "
                                                                            f"{bar.rate(r.total):,.0f}/s, "
                                                                            f"{r.invalid:,} invalid"))
    finally:
        bar.close()
        _close(sink, out)
    _summary(plan, ranking, args, time.perf_counter() - started, report)
    top = ranking.best(args.top)
    if top:
        print(file=report)
        oom = " (out-of-memory points last)" if not top[-1].fits else ""
        print(f"best {len(top)} by {ranking.objective}{oom}:", file=report)
        print(_table(plan, top), file=report)
    if best is not None:
        winner = ranking.best(1)
        if not winner or not winner[0].fits:
            raise UserError(f"no point fits in memory; nothing written to {args.best_to}")
        best.write(sweep.best_scenario(plan, winner[0], ranking).encode())
        best.close()
        print(f"wrote the best point ({sweep.point_label(plan, winner[0].index)}) to {escape(args.best_to)}",
              file=report)
    return 0


def _summary(plan: sweep.Sweep, ranking: sweep.Ranking, args: argparse.Namespace, elapsed: float,
             report: TextIO) -> None:
    """How many points, how fast, how many invalid and why, what was derived, where the records went."""
    where = f"Dask at {escape(args.dask)}" if args.dask else f"{_workers(args, plan):,} worker(s)"
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
        print(f"  wrote {plan.size:,} records to {escape(args.output)}", file=report)


def _workers(args: argparse.Namespace, plan: sweep.Sweep) -> int:
    workers = args.workers or sweep.available_cpus()
    chunks = -(-plan.size // sweep.chunk_size(plan.size, workers))
    return min(workers, chunks)


def _close(sink: IO[bytes] | None, out: Output | None) -> None:
    """End the records' gzip stream (if any) and the output; a full disk here is the one error reported."""
    if sink is None or out is None:
        return
    try:
        if sink is not out:
            sink.close()
    finally:
        out.close()


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
