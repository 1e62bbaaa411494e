"""What the dashboard's pilot tests share (tests/test_tui_*.py): the committed recording, an app over it at a
time, the text a panel shows, and a runner for async tests."""

from __future__ import annotations

import asyncio
import functools
import io
import re
from collections.abc import Awaitable, Callable
from typing import Any

from clustertop.tui.app import ClusterTopApp
from clustertop.tui.sources.recording import RecordingSource
from rich.console import Console

FLAGSHIP = "recordings/flagship-16k.jsonl.gz"


def recorded(kind: str) -> list[dict[str, Any]]:
    """The committed recording's events of one kind (the figures the screen must show come from them)."""
    from clustertop.engine.stream.reader import iter_events

    return [e for e in iter_events(FLAGSHIP) if e["type"] == kind]


SIZE = (200, 60)


def rendered(widget: Any) -> str:
    """The text a Static shows."""
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(widget.content)
    return console.export_text()


def unwrapped(text: str) -> str:
    """The event log's text with its wrapped continuation lines joined back."""
    return re.sub(r"\n {11,}", " ", text)


def sync(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async pilot test on its own event loop (no asyncio plugin needed)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def app_at(t: float = 30.0, paused: bool = True, path: str = FLAGSHIP) -> ClusterTopApp:
    return ClusterTopApp([RecordingSource(path)], start_t=t, paused=paused)
