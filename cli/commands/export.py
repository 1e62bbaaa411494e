"""`clustertop export`: a recording as a Chrome Trace Event JSON file for the Perfetto UI."""

from __future__ import annotations

import argparse
import os
import sys

from clustertop.engine.config import units
from clustertop.engine.config.errors import escape
from clustertop.engine.stream import perfetto
from clustertop.engine.stream.reader import warn_stderr


def main(args: argparse.Namespace) -> int:
    perfetto.check_output(args.output)
    if args.format == "perfetto":
        notes: list[str] = []             # the reader's warnings: said on the summary's line, one line in all
        try:
            stats = perfetto.export(args.file, args.output, warn=notes.append)
        except BaseException:
            for note in notes:
                warn_stderr(note)
            raise
        size = os.path.getsize(args.output) if os.path.isfile(args.output) else 0
        span = units.format_duration(stats["sim_seconds"])
        counts = f"{units.count(stats['trace_events'], 'trace event')}, {units.count(stats['steps'], 'step')}"
        warning = "".join(f"; warning: {escape(note)}" for note in notes)
        print(f"clustertop: wrote {args.output}: a Perfetto trace of {span} ({counts}), "
              f"{units.file_size(size)}{warning}", file=sys.stderr)
    return 0
