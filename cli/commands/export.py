"""`clustertop export`: a recording as a Chrome Trace Event JSON file for the Perfetto UI."""

from __future__ import annotations

import argparse

from clustertop.engine.stream import perfetto


def main(args: argparse.Namespace) -> int:
    perfetto.check_output(args.output)
    if args.format == "perfetto":
        perfetto.export(args.file, args.output)
    return 0
