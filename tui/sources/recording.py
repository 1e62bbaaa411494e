"""A recording file (plain or gzip), read whole before the dashboard starts so a bad file is a one-line error."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from clustertop.engine.config.errors import UserError
from clustertop.engine.stream.index import EventIndex
from clustertop.engine.stream.reader import iter_events

from . import Source


class RecordingSource(Source):
    """Every event of a .jsonl or .jsonl.gz file, indexed for seeking."""

    def __init__(self, path: str) -> None:
        events = iter_events(path)
        header = next(events)
        index = EventIndex(header)
        started = last_note = time.monotonic()
        for event in events:
            index.add(event)
            if index.count % 4096 == 0 and time.monotonic() - last_note > 2.0:
                last_note = time.monotonic()
                print(f"clustertop: reading {path}: {index.count:,} events, t = {index.end_t:,.0f} s "
                      f"({last_note - started:.0f} s)", file=sys.stderr)
        if index.keyframe_count() == 0:
            raise UserError("has a header but no sample events; expected a recording with at least one sample",
                            path)
        index.finish()
        super().__init__(Path(path).name, index)
