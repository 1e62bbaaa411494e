"""The clustertop dashboard app: one clock over one or two event sources, drawn at a fixed frame rate.

Every frame the clock advances (wall time x speed, or to the live edge), each source folds the events up to
the clock into its view (tui/display.py), and the screen redraws what changed. Readers never post per-event
messages: the frame timer polls them, so updates are coalesced to the frame rate however fast the engine
writes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from typing import ClassVar

from clustertop.engine.config.errors import escape
from clustertop.engine.stream import protocol
from rich.markup import escape as markup_escape
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen

from . import jobinfo, screenshot
from .display import DisplayState
from .playback import Playback, format_clock
from .screens.compare import CompareScreen
from .screens.dashboard import DashboardScreen
from .screens.help import HelpScreen
from .screens.main import MainScreen
from .sources import Source
from .widgets.event_log import shown
from .widgets.heatmap import Heatmap

FPS = 30


# one help line for each pair of keys (the help screen lists a tooltip once)
SPEED_TIP = "faster / slower: 0.1x to 1,000,000x simulated seconds per second"
SEEK_TIP = "seek back / forward (a hundredth of the run; shift: a tenth)"

class ClusterTopApp(App[None]):
    """Live, replayed or compared clusters."""

    TITLE = "clustertop"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_pause", "Play/Pause", tooltip="play / pause"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+",
                tooltip=SPEED_TIP),
        Binding("minus,underscore", "slower", "Slower", key_display="-",
                tooltip=SPEED_TIP),
        Binding("left", "seek(-1)", "Seek", key_display="←→",
                tooltip=SEEK_TIP),
        Binding("right", "seek(1)", "Seek forward", show=False,
                tooltip=SEEK_TIP),
        Binding("shift+left", "seek(-10)", "Seek back x10", show=False,
                tooltip=SEEK_TIP),
        Binding("shift+right", "seek(10)", "Seek forward x10", show=False,
                tooltip=SEEK_TIP),
        Binding("home", "seek_start", "Start", show=False, key_display="home  end",
                tooltip="start / end (end follows the engine in live mode)"),
        Binding("end", "seek_end", "End", show=False,
                tooltip="start / end (end follows the engine in live mode)"),
        Binding("left_square_bracket", "prev_event", "Event", key_display="[]",
                tooltip="previous / next event (fault, checkpoint, restart...)"),
        Binding("right_square_bracket", "next_event", "Next event", show=False,
                tooltip="previous / next event (fault, checkpoint, restart...)"),
        Binding("f", "follow_live", "Follow live", show=False, tooltip="follow live (live mode)"),
        Binding("i", "inject_fault", "Inject fault", show=False,
                tooltip="inject a fault at the cursor's GPU (live mode)"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="this help (escape closes)"),
        Binding("s", "save_screenshot", "Screenshot", show=False, tooltip="save an SVG screenshot"),
        Binding("t", "toggle_theme", "Theme", show=False, tooltip="dark / light theme"),
        Binding("q", "quit", "Quit", tooltip="quit"),
    ]

    def __init__(self, sources: list[Source], *, start_t: float | None = None, paused: bool = False,
                 speed: float = 1.0, metric: str = "util", compare: bool = False,
                 screenshot_dir: str = ".", back: str | None = None) -> None:
        """`back`: where quitting returns to (a sweep's table): escape quits too, and the footer says so."""
        super().__init__()
        if back is not None:
            self.bind("escape", "quit", description=f"Back to {back}", show=False)
        self.sources = sources
        self.compare = compare or len(sources) > 1
        self.screenshot_dir = screenshot_dir
        self.initial_metric = metric
        self.status_note = ""
        live = any(s.live for s in sources)
        start = min(s.start_t for s in sources)
        if start_t is None and not live:
            start_t = self._first_interval(sources)
        driving = any(s.controllable and not s.done for s in sources)
        interval = float(sources[0].header.get("sample_interval_s") or 1.0)
        self.playback = Playback(t=start, start=start, end=self._end(), speed=speed, paused=paused,
                                 follow=self._followable(sources) and start_t is None and not paused,
                                 edge=start if driving else None, lead=interval,
                                 horizon=self._horizon(sources))
        self._sent_edge: float | None = None
        if start_t is not None:
            self.playback.t = min(max(start_t, start), max(self.playback.end, start))
        self.states: list[DisplayState] = [s.state_at(self.playback.t) for s in sources]
        self._cursors = [s.cursor_at(self.playback.t) for s in sources]
        self._applied_t = self.playback.t
        self._last_wall = time.monotonic()
        self._seen_end = self.playback.end
        self._reported_error = [False] * len(sources)
        self._frozen = False
        first = sources[0]
        self.sub_title = escape(f"{first.kind} {jobinfo.describe(self.states[0], first.name)}")
        if self.compare:
            self.sub_title = escape(f"compare {sources[0].name} ↔ {sources[1].name}")

    @staticmethod
    def _horizon(sources: list[Source]) -> float | None:
        """The runs' end (the headers' duration_s), when every header gives one."""
        ends = [s.header.get("duration_s") for s in sources]
        numbers = [float(e) for e in ends
                   if isinstance(e, (int, float)) and not isinstance(e, bool) and e > 0]
        return max(numbers) if numbers and len(numbers) == len(ends) else None

    @staticmethod
    def _first_interval(sources: list[Source]) -> float | None:
        """Where a replay opens: the first sample that covers an interval (the one at the start is the instant
        the jobs start, all idle: an all-zero first frame tells nothing)."""
        times = [s.index.sample_t[1] for s in sources if len(s.index.sample_t) > 1]
        return min(times) if times else None

    # -- lifecycle ----------------------------------------------------------------------------------------

    def on_mount(self) -> None:
        for source in self.sources:
            source.start()
        screen: Screen[None] = CompareScreen() if self.compare else MainScreen()
        self.dashboard = screen
        self.push_screen(screen)
        self._send(protocol.speed(self.playback.speed))
        self.set_interval(1 / FPS, self.frame)

    def on_unmount(self) -> None:
        for source in self.sources:
            source.close()
        if self._frozen:              # tests run many apps in one process, and a frozen cycle is never freed
            gc.unfreeze()

    @property
    def live(self) -> bool:
        """A source is still being written (an engine or a pipe)."""
        return any(s.live and not s.done for s in self.sources)

    @staticmethod
    def _followable(sources: list[Source]) -> bool:
        """A live edge worth following: an engine or a real cluster still running. A pipe (`replay -`) is a
        replay: it plays from its start at the chosen speed, however fast it is written."""
        return any(s.live and not s.done and s.kind != "replay" for s in sources)

    @property
    def followable(self) -> bool:
        return self._followable(self.sources)

    def _end(self) -> float:
        ends = [s.end_t for s in self.sources]
        return min(ends) if self.live else max(ends)

    # -- the frame ----------------------------------------------------------------------------------------

    def frame(self) -> None:
        """Advance the clock by one frame and fold the new events into the states."""
        if not self._frozen:
            # What startup made (the app, its screens, the recording's index: some 80,000 objects that live as
            # long as the app) is never scanned again: each full collection scanned them all (50 to 100 ms,
            # a dropped frame)
            self._frozen = True
            gc.freeze()
        now = time.monotonic()
        dt, self._last_wall = now - self._last_wall, now
        end = self._end()
        t = self.playback.tick(dt, end)
        self._drive()
        changed = self.set_time(t)
        if end != self._seen_end:
            self._seen_end = end
            changed = True
        if self.playback.follow and self.playback.at_end and all(s.done for s in self.sources):
            self.playback.follow = False           # the stream ended: nothing live to follow any more
        if (not self.playback.paused and not self.playback.follow and self.playback.at_end
                and all(s.done for s in self.sources)):
            self.playback.paused = True
            changed = True
        for i, source in enumerate(self.sources):
            if source.index.error and not self._reported_error[i]:
                self._reported_error[i] = True
                self.notify(markup_escape(escape(source.index.error)), title="stream stopped",
                            severity="error", timeout=10)
        if changed:
            self.redraw()

    def _drive(self) -> None:
        """Give the engine the live edge (run_to): it simulates up to the clock on screen and no further."""
        p = self.playback
        if p.edge is None:
            return
        if all(s.done for s in self.sources if s.controllable):
            p.stop_driving()
        elif p.edge != self._sent_edge:
            self._sent_edge = p.edge
            self._send(protocol.run_to(p.edge))

    def set_time(self, t: float) -> bool:
        """Bring every state to simulated time t (folding events that arrived since); True when anything
        changed."""
        changed = False
        for i, source in enumerate(self.sources):
            if t >= self._applied_t:
                if source.index.count != self._cursors[i] or t != self._applied_t:
                    version = self.states[i].version
                    self.states[i], self._cursors[i] = source.advance(self.states[i], self._cursors[i], t)
                    changed = changed or self.states[i].version != version or t != self._applied_t
            else:
                self.states[i] = source.state_at(t)
                self._cursors[i] = source.cursor_at(t)
                changed = True
        self._applied_t = t
        return changed

    def redraw(self) -> None:
        screen = getattr(self, "dashboard", None)
        if isinstance(screen, DashboardScreen) and screen.is_mounted:
            try:
                screen.update_frame()
            except NoMatches:          # the app is closing: its widgets are going away under the frame timer
                pass

    # -- transport actions ----------------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        paused = self.playback.toggle_pause()
        if not paused and self.playback.at_end and not self.live:
            self.seek(self.playback.start)   # play again from the start, as a player does
            self.playback.paused = False
        self._send(protocol.pause() if paused else protocol.resume())
        self.redraw()

    def action_faster(self) -> None:
        if not self._real_time():
            self._set_speed(self.playback.faster())

    def action_slower(self) -> None:
        if not self._real_time():
            self._set_speed(self.playback.slower())

    def _real_time(self) -> bool:
        """Watching a real cluster at its live edge: its clock is the wall's, no speed changes it (seek back
        to replay what was recorded at a speed)."""
        if any(s.kind == "watch" for s in self.sources) and self.playback.follow:
            self.notify("watching live: the clock is real time (seek back to replay faster)", timeout=3)
            return True
        return False

    def _set_speed(self, speed: float) -> None:
        self._send(protocol.speed(speed))
        self.redraw()

    def seek_step(self) -> float:
        """One seek step: a hundredth of the run (at least one sample interval)."""
        header = self.sources[0].header
        span = max(self.playback.end - self.playback.start, float(header.get("duration_s") or 0) if
                   self.live else 0.0)
        return max(float(header.get("sample_interval_s") or 0.0), span / 100.0, 1e-3)

    def seek(self, t: float) -> None:
        self.playback.seek(t)
        self.set_time(self.playback.t)
        self.redraw()

    def seek_fraction(self, fraction: float) -> None:
        p = self.playback
        self.seek(p.start + fraction * (p.end - p.start))

    def action_seek(self, steps: float) -> None:
        self.seek(self.playback.t + steps * self.seek_step())

    def action_seek_start(self) -> None:
        self.seek(self.playback.start)

    def action_seek_end(self) -> None:
        if self.followable:
            self.action_follow_live()
        else:
            self.seek(self.playback.end)

    def _event_times(self) -> list[float]:
        """Times of the events [ and ] stop at: those the event log's filter shows, a checkpoint once."""
        mode = getattr(self.dashboard, "event_filter", None)
        times: set[float] = set()
        for source in self.sources:
            for t, kind in source.index.event_kinds():
                if kind != "checkpoint_end" and (mode is None or shown(kind, mode)):
                    times.add(t)
        return sorted(times)

    def action_prev_event(self) -> None:
        earlier = [e for e in self._event_times() if e < self.playback.t - 1e-6]
        if not earlier:
            self.notify("At the first event: none earlier", timeout=3)
            return
        self.seek(earlier[-1])

    def action_next_event(self) -> None:
        times = self._event_times()
        later = [e for e in times if e > self.playback.t + 1e-6]
        if not later:
            last = f"the last was at {format_clock(times[-1])}" if times else "there are none"
            more = "; more may come while the engine runs" if self.live else ""
            self.notify(f"No later event: {last}{more}", timeout=3)
            return
        self.seek(later[0])

    def action_follow_live(self) -> None:
        if not self.followable:
            self.notify("Replaying a recording: nothing live to follow (end jumps to the end)", timeout=3)
            return
        self.playback.end = self._end()
        self.playback.go_live()
        self._send(protocol.resume())
        self.set_time(self.playback.t)
        self.redraw()

    def action_inject_fault(self) -> None:
        """A fault at the cursor's GPU at the time on screen (the live edge when the view is in the past)."""
        heatmap = self.screen.focused
        gpu = getattr(heatmap, "cursor_gpu", None)
        if gpu is None:
            maps = list(self.dashboard.query(Heatmap))
            gpu = maps[0].cursor_gpu if maps else 0
        p = self.playback
        if p.edge is None:
            self.notify("Faults can be injected only into a live engine", severity="warning", timeout=3)
            return
        note = ""
        if p.t < p.edge - 1e-9:                 # looking back: the engine cannot go into the past
            p.follow, p.t = True, p.edge
            note = " (the live edge: a fault cannot go into the past)"
        if self._send(protocol.inject_fault(int(gpu), p.t)):
            self.notify(f"Fault injected at GPU {int(gpu):,} at {format_clock(p.t)}{note}", timeout=4)
            self.redraw()
        else:
            self.notify("The engine has stopped: no fault injected", severity="warning", timeout=3)

    def _send(self, command: dict[str, object]) -> bool:
        sent = False
        for source in self.sources:
            if source.controllable:
                sent = source.send(command) or sent
        return sent

    # -- app actions --------------------------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def action_save_screenshot(self) -> None:
        screenshot.save(self, self.screenshot_dir,
                        f"clustertop-{format_clock(self.playback.t).replace(':', '-').replace(' ', '_')}")

    def action_help_quit(self) -> None:
        """Ctrl+C quits, as in every terminal tool (Textual's default only says to press Ctrl+Q)."""
        self.exit()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Every key's action by its name and description (the bindings of the screen, the focused widget and
        the app), then Textual's own that no key of ours does (theme, maximize...)."""
        titles: set[str] = set()
        for title, help_text, callback in self._binding_commands(screen):
            if title not in titles:
                titles.add(title)
                yield SystemCommand(title, help_text, callback)
        for command in super().get_system_commands(screen):
            if command.title not in ("Keys", "Screenshot", "Quit") and command.title not in titles:
                yield command

    def _binding_commands(self, screen: Screen[object]) -> Iterable[tuple[str, str, Callable[[], None]]]:
        """(title, help, callback) of every binding with a description, from the focused widget outwards."""
        targets: list[object] = []
        focused = screen.focused
        if focused is not None:
            targets += [node for node in focused.ancestors_with_self if node not in (screen, self)]
        targets += [*screen.query(Heatmap), *screen.query("EventLog"), screen, self]
        seen: set[int] = set()
        for target in targets:
            if id(target) in seen:
                continue
            seen.add(id(target))
            bindings = getattr(target, "_bindings", None)       # the class's and its bases' (Textual's map)
            groups = bindings.key_to_bindings.values() if bindings is not None else []
            for binding in (b for group in groups for b in group):
                if not binding.description or binding.system:
                    continue
                if binding.action in ("follow_live",) and not self.followable:
                    continue
                if binding.action in ("inject_fault",) and self.playback.edge is None:
                    continue
                keys = self.get_key_display(binding)
                tip = binding.tooltip or binding.description
                yield (binding.description, f"{tip} ({keys})",
                       self._run(binding.action, target))

    def _run(self, action: str, target: object) -> Callable[[], None]:
        def run() -> None:
            self.call_later(self.run_action, action, target)
        return run


def show(sources: list[Source], compare: bool = False, speed: float = 1.0, metric: str = "util",
         back: str | None = None) -> None:
    """Run the dashboard on `sources` until the user quits; the sources are closed whatever happens. `back`:
    what quitting returns to (escape quits too)."""
    try:
        ClusterTopApp(sources, compare=compare, speed=speed, metric=metric, back=back).run()
    finally:
        for source in sources:
            source.close()
