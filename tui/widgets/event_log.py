"""The event log: discrete events (job starts, faults, checkpoints, restarts...) with simulated timestamps.

A checkpoint is one line (its start, its end and the power swings they cause); a filter hides power swings or
keeps faults and restarts only (`e`); focused, the arrows choose an event and enter seeks to it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from clustertop.engine.config import units
from clustertop.engine.config.errors import escape
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message

from ..display import DisplayState
from ..playback import format_clock
from .panel import Panel

STYLES = {"fault": "bold red", "target_down": "red", "target_up": "green", "restart": "yellow",
          "maintenance": "magenta", "checkpoint_start": "cyan",
          "checkpoint_end": "cyan", "power_swing": "yellow", "job_start": "green", "job_stop": "red",
          "contention": "blue"}
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
        for key in ("gpu", "node", "host", "rack", "link", "switch"):
            if key in event:
                value = f"{event[key]:,}" if isinstance(event[key], int) else str(event[key])
                where.append(f"{key}\u00a0{value}")
        cause = event.get("cause") or ""
        component = event.get("component") or event.get("category") or ""
        label = " · ".join(x for x in (cause, f"[{component}]" if component else "") if x)
        injected = " (injected)" if event.get("injected") else ""
        return (f"FAULT {label} · {' '.join(where)}{injected}" if label
                else f"FAULT {' '.join(where)}{injected}")
    if kind == "restart":
        text = f"restart {job or ''}".rstrip()
        if "from_checkpoint_step" in event:
            text += f" from step {event['from_checkpoint_step']:,}"
        if "lost_s" in event:
            text += f", {float(event['lost_s']):,.0f}\u00a0s of work lost"
        if event.get("lost_steps"):
            steps = int(event["lost_steps"])
            text += f" ({steps:,}\u00a0step{'s' if steps != 1 else ''})"
        if "downtime_s" in event:
            text += f", down {float(event['downtime_s']):,.0f}\u00a0s"
        return text
    if kind == "checkpoint_start":
        return f"checkpoint {job or ''} step {event.get('step', '?')} …"
    if kind == "checkpoint_end":
        return f"checkpoint {job or ''} step {event.get('step', '?')} written"
    if kind == "power_swing" and "from_mw" in event and "to_mw" in event:
        return f"power swing {units.power(float(event['from_mw']))} → {units.power(float(event['to_mw']))}"
    if kind == "maintenance":
        parts = [event.get("cause") or "", f"[{event['component']}]" if event.get("component") else ""]
        place = " ".join(f"{k} {event[k]:,}" if isinstance(event[k], int) else f"{k} {event[k]}"
                         for k in ("gpu", "node", "rack") if k in event)
        text = "maintenance " + " · ".join(p for p in parts if p)
        if "duration_s" in event:
            place = (place + " " if place else "") + f"for {float(event['duration_s']):,.0f} s"
        return (text + (f" · {place}" if place else "")).rstrip()
    if kind == "target_down":
        return f"no answer from {event.get('target', '?')}: {event.get('error', '')}".rstrip(": ")
    if kind == "target_up":
        return f"{event.get('target', '?')} answers again"
    if kind == "hosts_placed" and isinstance(event.get("hosts"), list):
        hosts = [str(h) for h in event["hosts"]]
        return f"new hosts from node {event.get('first_node', '?')}: {', '.join(hosts[:3])}" + \
            (f" and {len(hosts) - 3:,} more" if len(hosts) > 3 else "")
    if kind == "contention" and isinstance(event.get("jobs"), list):
        slowed = [f"{e.get('job')} x{float(e['contention_slowdown']):.3f}" for e in event["jobs"]
                  if isinstance(e, dict) and isinstance(e.get("contention_slowdown"), (int, float))
                  and e["contention_slowdown"] > 1.0005]
        running = event.get("running")
        count = f"{len(running)} jobs running" if isinstance(running, list) else "jobs changed"
        return f"shared links: {count}; " + (", ".join(slowed) + " by their neighbours" if slowed
                                             else "no job slowed by its neighbours")
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in QUIET_KEYS)
    return f"{kind} {rest}".rstrip()


FILTERS = ("all events", "no power swings", "faults and restarts")
FAULTS = frozenset({"fault", "restart", "maintenance", "job_stop", "degraded", "target_down", "target_up"})


def shown(kind: str, mode: str) -> bool:
    """Whether the filter `mode` shows events of `kind`."""
    if mode == "no power swings":
        return kind != "power_swing"
    if mode == "faults and restarts":
        return kind in FAULTS
    return True


@dataclass
class Entry:
    """One line of the log: an event, or a checkpoint folded with its end and the power swings around it."""

    t: float
    kind: str
    text: str
    style: str
    end: float | None = None
    swings: list[str] = field(default_factory=list)
    started: str = ""             # a checkpoint's line before its end
    event: dict[str, Any] | None = None     # the event it describes (its first, for a checkpoint)

    def line(self, now: float | None = None) -> str:
        """The line as it reads at time `now` (a checkpoint still being written has no end yet)."""
        if now is not None and self.end is not None and self.end > now + 1e-9:
            return self.started or self.text
        if not self.swings:
            return self.text
        return f"{self.text} · power {' → '.join(self.swings)}"


def slowed_by_links(header: dict[str, Any], job: str) -> list[str]:
    """What the scenario's degraded links (cluster.degraded) do to a job that crosses them, one line each."""
    info = next((j for j in header.get("jobs", []) if j.get("name") == job), None)
    per_pod = int(header.get("topology", {}).get("gpus_per_pod", 0) or 0)
    cluster = header.get("scenario", {}).get("cluster", {}) or {}
    if info is None or per_pod <= 0:
        return []
    first, last = int(info["first_gpu"]), int(info["first_gpu"]) + int(info["gpus"]) - 1
    out = []
    for d in cluster.get("degraded") or []:
        pod = d.get("pod") if isinstance(d, dict) else None
        if (not isinstance(d, dict)
                or (pod is not None and not first // per_pod <= int(pod) <= last // per_pod)):
            continue
        where = f"pod {pod}" if pod is not None else "every pod"
        out.append(f"degraded {d.get('tier')} in {where} ({float(d.get('capacity', 1)) * 100:.0f}% of its "
                   f"links) slows {job}: its rings cross it")
    return out


class LogBuilder:
    """The log's entries, built as events arrive (a whole run's log is never rebuilt per frame): a
    checkpoint's start and end are one line (with how long it took), and the power swings at its start and
    end (within `slack`, a sample interval: swings are seen in samples) fold into it."""

    def __init__(self, slack: float = 0.0, header: dict[str, Any] | None = None) -> None:
        self.slack, self.header = slack, header
        self.entries: list[Entry] = []
        self.fed = 0                                  # events fed so far (the number of the next)
        self._open: dict[str, Entry] = {}
        self._last: Entry | None = None
        self._filtered: tuple[tuple[int, str], list[Entry], list[float]] | None = None

    def feed(self, events: Iterable[dict[str, Any]]) -> None:
        out = self.entries
        for event in events:
            self.fed += 1
            kind = str(event.get("type", ""))
            t = float(event.get("t", 0.0))
            job = str(event.get("job") or "")
            if kind == "checkpoint_end" and job in self._open:
                entry = self._open.pop(job)
                entry.end = t
                ok = event.get("ok", True)
                entry.text = (f"checkpoint {job} step {event.get('step', '?')} "
                              f"{'written' if ok else 'failed'} in {t - entry.t:,.1f}\u00a0s")
                self._last = entry
                continue
            last = self._last
            if kind == "power_swing" and last is not None and "to_mw" in event and (
                    last.t - 1e-6 <= t <= (last.end or last.t) + self.slack + 1e-6):
                if not last.swings:
                    last.swings.append(units.power(float(event.get("from_mw", 0.0))))
                last.swings.append(units.power(float(event["to_mw"])))
                continue
            entry = Entry(t, kind, describe(event), STYLES.get(kind, ""), event=event)
            if kind == "checkpoint_start":
                entry.started = entry.text
                self._open[job] = entry
                self._last = entry
            out.append(entry)
            if kind == "job_start" and self.header is not None:
                out += [Entry(t, "degraded", line, "bold yellow")
                        for line in slowed_by_links(self.header, job)]

    def shown(self, mode: str, now: float | None = None) -> list[Entry]:
        """The entries the filter `mode` shows, over the whole run, up to time `now` (all when None)."""
        key = (len(self.entries), mode)
        if self._filtered is None or self._filtered[0] != key:
            kept = [e for e in self.entries if shown(e.kind, mode)]
            self._filtered = (key, kept, [e.t for e in kept])
        kept, times = self._filtered[1], self._filtered[2]
        return kept if now is None else kept[:bisect.bisect_right(times, now + 1e-9)]


def entries(events: Iterable[dict[str, Any]], mode: str = FILTERS[0], slack: float = 0.0,
            header: dict[str, Any] | None = None) -> list[Entry]:
    """The log's lines of `events` (LogBuilder), filtered."""
    builder = LogBuilder(slack, header)
    builder.feed(events)
    return builder.shown(mode)


class EventLog(Panel, can_focus=True):
    """Every event up to the time on screen, newest last (the whole run: a seekable index, not a window);
    focused (tab), the arrows, Home and End choose an event and enter seeks to it."""

    TITLE = "events"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "choose(-1)", "Earlier event", show=False, key_display="↑ ↓",
                tooltip="event log (focus it with tab or a click): choose an event"),
        Binding("down,j", "choose(1)", "Later event", show=False,
                tooltip="event log (focus it with tab or a click): choose an event"),
        Binding("pageup", "page(-1)", "Page of earlier events", show=False, key_display="pgup pgdn",
                tooltip="event log: a page of earlier / later events"),
        Binding("pagedown", "page(1)", "Page of later events", show=False,
                tooltip="event log: a page of earlier / later events"),
        Binding("home", "first", "First event", show=False, key_display="home end",
                tooltip="event log: the first / the latest event"),
        Binding("end", "latest", "Latest event", show=False,
                tooltip="event log: the first / the latest event"),
        Binding("enter", "go", "Seek to event",
                tooltip="event log: seek to the chosen event; one naming a GPU, node or job moves the map's "
                        "cursor there"),
    ]

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
    }
    EventLog:focus {
        border: round $accent;
    }
    """

    class Chosen(Message):
        """Seek to an event's time (and, when it names a place, move the map's cursor there)."""

        def __init__(self, t: float, event: dict[str, Any] | None = None) -> None:
            super().__init__()
            self.t = t
            self.event = event

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode = FILTERS[0]
        self.chosen: int | None = None        # index into the entries; None: follow the newest
        self._entries: list[Entry] = []
        self._now: float | None = None
        self._builder: LogBuilder | None = None
        self._index: object = None
        self._line_entry: list[int] = []

    def cycle_filter(self) -> str:
        self.mode = FILTERS[(FILTERS.index(self.mode) + 1) % len(FILTERS)]
        self.chosen = None
        self.border_title = self.TITLE if self.mode == FILTERS[0] else f"{self.TITLE} · {self.mode}"
        return self.mode

    def action_choose(self, step: int) -> None:
        if not self._entries:
            return
        last = len(self._entries) - 1
        current = last if self.chosen is None else self.chosen
        self.chosen = min(max(current + step, 0), last)
        self._draw()

    def action_page(self, pages: int) -> None:
        self.action_choose(pages * max(1, (self.size.height or 8) - 1))

    def action_first(self) -> None:
        if self._entries:
            self.chosen = 0
            self._draw()

    def action_latest(self) -> None:
        if self._entries:
            self.chosen = len(self._entries) - 1
            self._draw()

    def action_go(self) -> None:
        if self._entries:
            entry = self._entries[len(self._entries) - 1 if self.chosen is None else self.chosen]
            self.post_message(self.Chosen(entry.t, entry.event))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or not 0 <= offset.y < len(self._line_entry):
            return
        self.chosen = self._line_entry[offset.y]
        self.action_go()

    def on_blur(self) -> None:
        self.chosen = None

    def show(self, state: DisplayState, index: Any = None, now: float | None = None) -> None:
        """The log at time `now`: every event of `index` (tui/index.py) up to it, or, without an index, the
        events `state` kept."""
        slack = float(state.header.get("sample_interval_s") or 0.0)
        if index is None:
            self._entries = entries(state.events, self.mode, slack, state.header)
            self._now = None
        else:
            builder = self._builder
            if builder is None or self._index is not index:
                builder = self._builder = LogBuilder(slack, state.header)
                self._index = index
            first, new = index.events_since(builder.fed)
            if first != builder.fed:                  # older events were thinned away: start again from here
                builder = self._builder = LogBuilder(slack, state.header)
                first, new = index.events_since(0)
                builder.fed = first
            builder.feed(new)
            self._now = state.t if now is None else now
            self._entries = builder.shown(self.mode, self._now)
        if self.chosen is not None and self.chosen >= len(self._entries):
            self.chosen = None
        self._draw()

    def _draw(self) -> None:
        # size: the content, inside border and padding
        rows = max(1, self.size.height) if self.size.height else 8
        width = max(20, self.size.width) if self.size.width else 60
        room = width - 11                       # after the clock
        # Only the entries around what shows are wrapped (a whole run's log has tens of thousands).
        count = len(self._entries)
        at = count - 1 if self.chosen is None else self.chosen
        lo, hi = max(0, at - rows), min(count, at + rows + 1) if self.chosen is not None else count
        # (entry index, clock or indent, text, style): long events wrap
        lines: list[tuple[int, str, str, str]] = []
        for i in range(lo, hi):
            entry = self._entries[i]
            words = escape(entry.line(self._now))      # unknown events echo their keys and values
            clock = format_clock(entry.t) + " "
            while True:
                if len(words) <= room:
                    lines.append((i, clock, words, entry.style))
                    break
                cut = words.rfind(" ", 0, room + 1)
                cut = cut if cut > room // 2 else room
                lines.append((i, clock, words[:cut], entry.style))
                words = "  " + words[cut:].lstrip()
                clock = " " * 11
        if self.chosen is None:                 # the newest events that fit whole
            lines = lines[-rows:]
            while lines and not lines[0][1].strip():
                lines = lines[1:]
        else:                                   # keep the chosen event in view
            at = next(k for k, line in enumerate(lines) if line[0] == self.chosen)
            start = min(max(0, at - rows // 2), max(0, len(lines) - rows))
            lines = lines[start:start + rows]
        self._line_entry = [line[0] for line in lines]
        text = Text(no_wrap=True, overflow="ellipsis")
        if not lines:
            text.append("no events yet" if self.mode == FILTERS[0] else f"no events ({self.mode})",
                        style="dim")
        for k, (i, clock, words, style) in enumerate(lines):
            chosen = self.chosen == i
            text.append(clock, style="reverse" if chosen else "dim")
            text.append(words, style=f"{style} reverse" if chosen else style)
            if k < len(lines) - 1:
                text.append("\n")
        self.show_if_changed(repr((text.plain, self.chosen)), text)
