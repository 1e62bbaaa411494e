"""`clustertop replay FILE`: a recording (or `-`, a stream on stdin) in the dashboard."""

from __future__ import annotations

import argparse

from tui.sources import Source


def open_source(path: str) -> Source:
    """A recording file, or stdin for '-'. UserError on a bad file, before any screen is drawn."""
    if path == "-":
        from tui.sources.stdin import stdin_source

        return stdin_source()
    from tui.sources.recording import RecordingSource

    return RecordingSource(path)


def main(args: argparse.Namespace) -> int:
    source = open_source(args.file)
    from tui.app import ClusterTopApp

    app = ClusterTopApp([source])
    try:
        app.run()
    finally:
        source.close()
    return 0
