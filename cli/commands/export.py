"""`clustertop export`: a recording as a Chrome Trace Event JSON file for the Perfetto UI."""

from __future__ import annotations

import argparse
import os
import sys

from clustertop.engine.config import units
from clustertop.engine.stream import perfetto


def main(args: argparse.Namespace) -> int:
    perfetto.check_output(args.output)
    if args.format == "perfetto":
        stats = perfetto.export(args.file, args.output)
        size = os.path.getsize(args.output) if os.path.isfile(args.output) else 0
        span = units.format_duration(stats["sim_seconds"])
        counts = f"{units.count(stats['trace_events'], 'trace event')}, {units.count(stats['steps'], 'step')}"
        print(f"clustertop: wrote {args.output}: a Perfetto trace of {span} ({counts}), "
              f"{units.file_size(size)}", file=sys.stderr)
    return 0
