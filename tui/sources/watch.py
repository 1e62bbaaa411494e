"""Watching a real cluster: `clustertop watch ... -o -` in a child process (scraping exporters or asking
Prometheus, engine/telemetry/watch.py), its stream read through a pipe as live mode reads the engine's. The
child does the network and parsing work, so the dashboard keeps its frame rate however many exporters answer;
it also writes `--record FILE` itself. Nothing can be sent to it: real clusters take no commands.

The child runs at a lower scheduling priority than the dashboard (`NICE`): a round of 2,048 exporters is a
second or two of parsing every interval, due by the next one, while a frame is due in 33 ms; on a machine with
few cores the two meet exactly when a new sample arrives (the child finishes writing it as the dashboard
folds and draws it), and the frame is what the user waits on."""

from __future__ import annotations

import os
import sys

from .child import ChildSource

NICE = 10       # added to the dashboard's niceness for the watcher (0 normal, 19 lowest)


class WatchSource(ChildSource):
    """Real telemetry, live. `args` are the watch command's own flags (source, cluster, interval, record)."""

    kind = "watch"

    def __init__(self, name: str, args: list[str], command: list[str] | None = None) -> None:
        command = command or [sys.executable, "-m", "clustertop", "watch", *args, "-o", "-"]
        super().__init__(name, command, f"{name} (watch)")

    def starting(self) -> None:
        """Lower the child's priority as it starts, before its interpreter has imported anything, so the
        threads it starts later (the scrapers) inherit it; where the system has no priorities, or refuses,
        it runs as it is."""
        try:
            nice = min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE)
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, nice)
        except (AttributeError, OSError):
            pass
