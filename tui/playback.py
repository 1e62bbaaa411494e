"""The transport: simulated time, speed, pause, seeking and following a live stream. Pure logic, no
Textual."""

from __future__ import annotations

from dataclasses import dataclass

# Speeds in simulated seconds per wall-clock second: 0.1x to 1,000,000x in 1-2-5 steps.
SPEEDS: tuple[float, ...] = tuple(m * 10.0 ** e for e in range(-1, 6) for m in (1, 2, 5)) + (1e6,)


def format_speed(speed: float) -> str:
    if speed >= 1000:
        return f"{speed:,.0f}x"
    return f"{speed:g}x"


def format_clock(seconds: float) -> str:
    """Simulated time as [Nd ]HH:MM:SS.s (always the same width for a given day count)."""
    seconds = max(0.0, seconds)
    days, rest = divmod(seconds, 86400.0)
    h, rest = divmod(rest, 3600.0)
    m, s = divmod(rest, 60.0)
    clock = f"{int(h):02d}:{int(m):02d}:{s:04.1f}"
    return f"{int(days)}d {clock}" if days >= 1 else clock


@dataclass
class Playback:
    """Where the dashboard is on the simulated timeline and how fast it moves.

    With an engine to drive (`edge` set), the live edge is a clock of its own: it advances by wall time x
    speed, stops while paused, and never runs more than `lead` (one sample interval) past the latest event, so
    a slow engine holds it back. The app sends it to the engine (run_to), which simulates up to it and no
    further: the time on screen is the engine's time, ticking every frame between samples. A pipe has no edge:
    its live edge is its latest event.

    Neither the edge nor the clock passes the run's end (`horizon`, the header's duration), at any speed.
    """

    t: float = 0.0
    start: float = 0.0
    end: float = 0.0          # latest time available (grows while a stream is written)
    speed: float = 1.0
    paused: bool = False
    follow: bool = False      # pinned to the live edge (live mode)
    edge: float | None = None  # the engine's clock (live mode with an engine to drive)
    lead: float = 0.0
    horizon: float | None = None   # the run's end (its duration) when the header gives it

    @property
    def limit(self) -> float:
        """The latest time the clock may show: the live edge, or the end of what has arrived; never past the
        run's end."""
        limit = self.end if self.edge is None else max(self.edge, self.end)
        return limit if self.horizon is None else min(limit, max(self.horizon, self.end))

    def tick(self, wall_dt: float, end: float) -> float:
        """Advance by one frame of wall time; returns the new simulated time."""
        self.end = max(self.end, end)
        step = 0.0 if self.paused else max(0.0, wall_dt) * self.speed
        if self.edge is not None:   # fast forward may lead by a quarter second of wall time
            lead = max(self.lead, self.speed * 0.25)
            self.edge = max(self.edge, min(self.edge + step, self.end + lead))
            if self.horizon is not None:
                self.edge = min(self.edge, max(self.horizon, self.end))
        if self.follow:
            if not self.paused:
                self.t = self.limit
            return self.t
        self.t = min(self.limit, self.t + step)
        return self.t

    def stop_driving(self) -> None:
        """The engine finished: what arrived is all there is."""
        self.edge = None
        self.t = min(self.t, self.end)

    def seek(self, t: float) -> float:
        """Jump to t (clamped to what is available); leaves the live edge unless t is at it."""
        self.t = min(max(t, self.start), self.limit)
        self.follow = False
        return self.t

    def faster(self) -> float:
        bigger = [s for s in SPEEDS if s > self.speed * 1.0001]
        self.speed = bigger[0] if bigger else SPEEDS[-1]
        return self.speed

    def slower(self) -> float:
        smaller = [s for s in SPEEDS if s < self.speed / 1.0001]
        self.speed = smaller[-1] if smaller else SPEEDS[0]
        return self.speed

    def toggle_pause(self) -> bool:
        self.paused = not self.paused
        return self.paused

    def go_live(self) -> None:
        self.follow = True
        self.paused = False
        self.t = self.limit

    @property
    def at_end(self) -> bool:
        return self.t >= self.limit - 1e-9
