"""`clustertop compare A B`: two scenarios or recordings side by side, in sync on simulated time."""

from __future__ import annotations

import argparse
from pathlib import Path

from clustertop.engine.config import scenario
from clustertop.engine.stream.reader import GZIP_MAGIC
from clustertop.tui.sources import Source


def is_recording(arg: str) -> bool:
    """A path to an event stream (by name or by content) rather than a scenario."""
    path = Path(arg)
    if arg.endswith((".jsonl", ".jsonl.gz", ".gz", ".json")):
        return True
    if path.is_file() and not arg.endswith(".toml"):
        with open(path, "rb") as f:
            head = f.read(2)
        return head == GZIP_MAGIC or head[:1] == b"{"
    return False


def open_side(arg: str) -> Source:
    if is_recording(arg):
        from clustertop.tui.sources.recording import RecordingSource

        return RecordingSource(arg)
    scenario.load(arg)
    from clustertop.tui.sources.live import LiveSource

    return LiveSource(arg)


def main(args: argparse.Namespace) -> int:
    a = open_side(args.a)
    try:
        b = open_side(args.b)
    except BaseException:
        a.close()
        raise
    from clustertop.tui.app import show

    show([a, b], compare=True, speed=args.speed, metric=args.metric)
    return 0
