"""A recording file (plain or gzip), read whole before the dashboard starts so a bad file is a one-line
error."""

from __future__ import annotations

import sys
from pathlib import Path

from clustertop.engine.config.errors import escape

from ..index import EventIndex
from . import Source


class RecordingSource(Source):
    """Every event of a .jsonl or .jsonl.gz file, indexed for seeking."""

    def __init__(self, path: str) -> None:
        index = EventIndex.of_file(path,
                                   note=lambda text: print(f"clustertop: {escape(text)}", file=sys.stderr))
        super().__init__(Path(path).name, index)
