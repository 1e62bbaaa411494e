"""`clustertop compare A B`: two scenarios or recordings side by side, in sync on simulated time.

`clustertop compare A` alone shows scenario A beside the twin its `compare_with` key names (a built-in name,
or a .toml path relative to A's file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from clustertop.engine.config import scenario
from clustertop.engine.config.errors import UserError
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


def twin(arg: str) -> str:
    """The scenario that scenario `arg` names in `compare_with`; UserError when it names none."""
    if is_recording(arg):
        raise UserError("a recording names no twin; expected two scenarios or recordings (compare A B)", arg)
    s = scenario.load(arg)
    if not s.compare_with:
        raise UserError("names no twin (compare_with); expected two scenarios or recordings (compare A B)",
                        arg)
    other = s.compare_with
    if ("/" in other or other.endswith(".toml")) and not Path(other).is_absolute():
        other = str(Path(s.path).parent / other)
    return other


def main(args: argparse.Namespace) -> int:
    if args.b is None:
        args.b = twin(args.a)
    a = open_side(args.a)
    try:
        b = open_side(args.b)
    except BaseException:
        a.close()
        raise
    from clustertop.tui.app import show

    show([a, b], compare=True, speed=args.speed, metric=args.metric)
    return 0
