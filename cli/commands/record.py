"""`clustertop record`: simulate a scenario headless and write its event stream (JSON Lines, .gz for gzip).

Everything a user can get wrong (scenario, --duration, --sample, --seed, the output path, a job the cost model
rejects) is checked before the output file is created, so a bad invocation writes nothing.

With --control (the dashboard's live mode), commands arrive as JSON lines on stdin and the output is paced to
the commanded speed (engine/sim/control.py). The --json summary includes the run's interruptions, effective
training time, site power extremes and checkpoints (engine/sim/run.py `Run.summary`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import orjson
from clustertop.cli import duration_flag
from clustertop.engine.config import scenario, units
from clustertop.engine.config.errors import UserError
from clustertop.engine.config.outfile import check_output
from clustertop.engine.config.units import format_duration
from clustertop.engine.sim import control
from clustertop.engine.sim import run as engine_run
from clustertop.engine.sim import summary as run_summary
from clustertop.engine.stream.recorder import Recorder
from clustertop.progress import RunBar, wanted


def outcome(path: str, t: float, recorder: Recorder) -> str:
    """'run.jsonl.gz: 6h00m simulated, 1,234 lines, 12.3 MB': what a recording holds."""
    return (f"{path}: {units.format_duration(t)} simulated, {units.count(recorder.lines, 'line')}, "
            f"{units.file_size(recorder.bytes_out)}")


def main(args: argparse.Namespace) -> int:
    s = scenario.load(args.scenario)
    duration = duration_flag(args.duration, "--duration") or s.duration_s
    sample = duration_flag(args.sample, "--sample")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise UserError(f"expected an integer from 0 to 2^63-1, got {args.seed}", "--seed")
    if sample is not None and sample > duration:
        raise UserError(f"sampling interval {format_duration(sample)} is longer than the recording "
                        f"({format_duration(duration)}); expected at most the duration", "--sample")
    check_output(args.output)
    sim = engine_run.Run(s, duration_s=duration, seed=args.seed, sample_s=sample,
                         planner=engine_run.default_planner)
    recorder = Recorder.open(args.output)
    progress = RunBar(sim.duration_s, wanted(args.output))
    start = time.monotonic()
    try:
        if getattr(args, "control", False):
            stats = control.Pacer(sim, control.Commands(sys.stdin.buffer)).drive(recorder, progress)
        else:
            stats = sim.run(recorder, progress)
        recorder.close()
        wall = time.monotonic() - start
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error; keep Python quiet about stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except BaseException as exc:
        try:
            recorder.close()      # a Ctrl-C still leaves a complete, readable file
        except (OSError, UserError):
            pass                  # the disk that failed the write fails this too: the first error is the one
        else:
            if isinstance(exc, KeyboardInterrupt) and args.output != "-":
                progress.close()
                print(f"clustertop: interrupted; kept {outcome(args.output, sim.now, recorder)} "
                      "(a valid recording up to there)", file=sys.stderr)
        raise
    finally:
        progress.close()
    if args.output != "-":       # on a pipe the dashboard reading it owns the terminal: say nothing
        print(f"clustertop: wrote {outcome(args.output, sim.now, recorder)} in {wall:.1f} s", file=sys.stderr)
    if args.json:
        jobs = run_summary.jobs(sim.tracks)
        summary: dict[str, Any] = {
            "scenario": s.name, "output": args.output, "seed": sim.seed, "steps": stats.steps,
            "tokens": stats.tokens, "sim_seconds": stats.sim_seconds,
            "wall_seconds": round(wall, 3), "events": stats.events, "samples": stats.samples,
            "sample_interval_s": sim.sample_s, "bytes": recorder.bytes_out, "jobs": jobs, **sim.summary}
        text = orjson.dumps(summary).decode()
        print(text, file=sys.stderr if args.output == "-" else sys.stdout)
    return 0
