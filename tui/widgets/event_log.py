"""The event log: discrete events (job starts, faults, checkpoints, restarts...) with simulated timestamps."""

from __future__ import annotations

from typing import Any

from clustertop.engine.config.errors import escape
from clustertop.engine.stream.state import ClusterState
from rich.text import Text

from ..playback import format_clock
from .panel import Panel

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
                value = f"{event[key]:,}" if isinstance(event[key], int) else str(event[key])
                where.append(f"{key}\u00a0{value}")
        cause = event.get("cause") or ""
        component = event.get("component") or event.get("category") or ""
        label = " · ".join(x for x in (cause, f"[{component}]" if component else "") if x)
        injected = " (injected)" if event.get("injected") else ""
        return f"FAULT {label} · {' '.join(where)}{injected}" if label else f"FAULT {' '.join(where)}{injected}"
    if kind == "restart":
        text = f"restart {job or ''}".rstrip()
        if "from_checkpoint_step" in event:
            text += f" from step {event['from_checkpoint_step']:,}"
        if "lost_s" in event:
            text += f", {float(event['lost_s']):.0f}\u00a0s of work lost"
        if event.get("lost_steps"):
            steps = int(event["lost_steps"])
            text += f" ({steps:,}\u00a0step{'s' if steps != 1 else ''})"
        if "downtime_s" in event:
            text += f", down {float(event['downtime_s']):.0f}\u00a0s"
        return text
    if kind == "checkpoint_start":
        return f"checkpoint {job or ''} step {event.get('step', '?')} …"
    if kind == "checkpoint_end":
        return f"checkpoint {job or ''} step {event.get('step', '?')} written"
    if kind == "power_swing" and "from_mw" in event and "to_mw" in event:
        return f"power swing {float(event['from_mw']):.1f} → {float(event['to_mw']):.1f} MW"
    if kind == "maintenance":
        parts = [event.get("cause") or "", f"[{event['component']}]" if event.get("component") else ""]
        where = " ".join(f"{k} {event[k]:,}" if isinstance(event[k], int) else f"{k} {event[k]}"
                         for k in ("gpu", "node", "rack") if k in event)
        text = "maintenance " + " · ".join(p for p in parts if p)
        if "duration_s" in event:
            where = (where + " " if where else "") + f"for {float(event['duration_s']):,.0f} s"
        return (text + (f" · {where}" if where else "")).rstrip()
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in QUIET_KEYS)
    return f"{kind} {rest}".rstrip()


class EventLog(Panel):
    """The latest events that fit, newest last."""

    TITLE = "events"

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
    }
    """

    def show(self, state: ClusterState) -> None:
        rows = max(1, self.size.height - 2) if self.size.height else 8
        width = max(20, self.size.width - 4) if self.size.width else 60
        room = width - 11                       # after the clock
        lines: list[tuple[str, str, str]] = []  # (clock or indent, text, style): long events wrap
        for event in list(state.events)[-rows:]:
            style = STYLES.get(event.get("type", ""), "")
            words = escape(describe(event))       # unknown events echo their keys and values
            clock = format_clock(float(event.get("t", 0.0))) + " "
            while True:
                if len(words) <= room:
                    lines.append((clock, words, style))
                    break
                cut = words.rfind(" ", 0, room + 1)
                cut = cut if cut > room // 2 else room
                lines.append((clock, words[:cut], style))
                words = "  " + words[cut:].lstrip()
                clock = " " * 11
        lines = lines[-rows:]
        text = Text(no_wrap=True, overflow="ellipsis")
        if not lines:
            text.append("no events yet", style="dim")
        for i, (clock, words, style) in enumerate(lines):
            text.append(clock, style="dim")
            text.append(words, style=style)
            if i < len(lines) - 1:
                text.append("\n")
        self.show_if_changed(text.plain, text)
