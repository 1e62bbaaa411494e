"""`clustertop import prometheus DUMP.json [...] --cluster CLUSTER.toml -o run.jsonl.gz`: real DCGM telemetry
from Prometheus range-query dumps as a recording (engine/telemetry/importer.py; docs/telemetry.md).

Every dump is scanned before the output is created, so a file that is not a range query writes nothing; a dump
found bad midway removes the partial output. A kill leaves a readable prefix
(the recorder flushes per sample).
"""

from __future__ import annotations

import argparse
import sys
import time

import orjson
from clustertop.engine.config.errors import escape
from clustertop.engine.telemetry.importer import import_prometheus
from clustertop.progress import wanted


def main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    chatty = wanted(args.output)

    def note(text: str) -> None:
        if chatty or text.startswith((*args.dumps, "warning:")):      # warnings always show
            print(f"clustertop: {escape(text)}", file=sys.stderr)

    stats = import_prometheus(args.dumps, args.cluster, args.output, note=note)
    for line in stats.warnings():
        print(f"clustertop: warning: {escape(line)}", file=sys.stderr)     # examples echo labels of the dumps
    if args.output != "-":
        from clustertop.engine.telemetry.frames import summary as summary_line

        line = summary_line([args.output], samples=stats.samples, step_s=stats.step_s, hosts=stats.hosts,
                            gpus_reporting=stats.gpus_reporting, gpus=stats.gpus,
                            faults=stats.faults)
        print(f"clustertop: {escape(line)}", file=sys.stderr)
    if args.json:
        summary = {"output": args.output, "samples": stats.samples, "faults": stats.faults,
                   "series": stats.series, "hosts": stats.hosts, "gpus_reporting": stats.gpus_reporting,
                   "start_unix": stats.start_unix, "step_s": stats.step_s, "duration_s": stats.duration_s,
                   "skipped": stats.skipped,
                   "wall_seconds": round(time.monotonic() - started, 3)}
        print(orjson.dumps(summary).decode(), file=sys.stderr if args.output == "-" else sys.stdout)
    return 0
