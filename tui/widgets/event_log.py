"""The event log: discrete events (job starts, faults, checkpoints, restarts...) with simulated timestamps."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from engine.state import ClusterState

from ..playback import format_clock

STYLES = {"fault": "bold red", "restart": "yellow", "maintenance": "magenta", "checkpoint_start": "cyan",
          "checkpoint_end": "cyan", "power_swing": "yellow", "job_start": "green", "job_stop": "red"}
QUIET_KEYS = {"t", "type"}


def describe(event: dict[str, Any]) -> str:
    """One line for an event; unknown kinds are shown generically as `type key=value ...`."""
    kind = event.get("type", "?")
    job = event.get("job")
    if kind == "job_start":
        return f"job {job} started"
    if kind == "job_stop":
        return f"job {job} stopped" + (f": {event['reason']}" if event.get("reason") else "")
    if kind == "fault":
        where = []
        for key in ("gpu", "node", "rack", "link", "switch"):
            if key in event:
                where.append(f"{key} {event[key]:,}" if isinstance(event[key], int) else f"{key} {event[key]}")
        cause = event.get("cause") or event.get("component") or ""
        return f"FAULT {cause} · " + " ".join(where) if cause else "FAULT " + " ".join(where)
    if kind == "restart":
        text = f"restart {job or ''}".rstrip()
        if "from_checkpoint_step" in event:
            text += f" from step {event['from_checkpoint_step']:,}"
        if "lost_s" in event:
            text += f", {float(event['lost_s']):.0f} s of work lost"
        return text
    if kind == "checkpoint_start":
        return f"checkpoint {job or ''} step {event.get('step', '?')} …"
    if kind == "checkpoint_end":
        return f"checkpoint {job or ''} step {event.get('step', '?')} written"
    if kind == "power_swing" and "from_mw" in event and "to_mw" in event:
        return f"power swing {float(event['from_mw']):.1f} → {float(event['to_mw']):.1f} MW"
    if kind == "maintenance":
        return f"maintenance {event.get('component', '')} {event.get('cause', '')}".rstrip()
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in QUIET_KEYS)
    return f"{kind} {rest}".rstrip()


class EventLog(Static):
    """The latest events that fit, newest last."""

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        border: round $panel-lighten-2;
        border-title-color: $text-accent;
        padding: 0 1;
    }
    """

    def on_mount(self) -> None:
        self.border_title = "events"
        self._shown = ""

    def show(self, state: ClusterState) -> None:
        rows = max(1, self.size.height - 2) if self.size.height else 8
        width = max(10, self.size.width - 4) if self.size.width else 60
        events = list(state.events)[-rows:]
        text = Text(no_wrap=True, overflow="ellipsis")
        if not events:
            text.append("no events yet", style="dim")
        for i, event in enumerate(events):
            text.append(format_clock(float(event.get("t", 0.0))) + " ", style="dim")
            line = describe(event)
            text.append(line[: max(0, width - 11)], style=STYLES.get(event.get("type", ""), ""))
            if i < len(events) - 1:
                text.append("\n")
        if text.plain != self._shown:
            self._shown = text.plain
            self.update(text)
