"""Watching a real cluster: `clustertop watch ... -o -` in a child process (scraping exporters or asking
Prometheus, engine/telemetry/watch.py), its stream read through a pipe as live mode reads the engine's. The
child does the network and parsing work, so the dashboard keeps its frame rate however many exporters answer;
it also writes `--record FILE` itself. Nothing can be sent to it: real clusters take no commands."""

from __future__ import annotations

import sys

from .child import ChildSource


class WatchSource(ChildSource):
    """Real telemetry, live. `args` are the watch command's own flags (source, cluster, interval, record)."""

    kind = "watch"

    def __init__(self, name: str, args: list[str], command: list[str] | None = None) -> None:
        command = command or [sys.executable, "-m", "clustertop", "watch", *args, "-o", "-"]
        super().__init__(name, command, f"{name} (watch)")
