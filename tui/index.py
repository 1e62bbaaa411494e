"""The seek index of an event stream: its events as the reader parsed them, kept compact, and the two ways to
read it: rebuild the dashboard's view at a time, and advance one. The dashboard reads every source (a file, a
pipe, a live engine) through one; benchmarks time the same.

Samples carry full state, so each is a keyframe: the view at time t is the last keyframe at or before t, plus
the job figures of the last `step` per job, the discrete events (for the log) and the sparkline history. Every
event is parsed once, by the reader (engine/stream/reader.py), and kept in the form the state reads: a
keyframe's per-GPU run-length arrays as numpy arrays, zlib-packed when large, and the rest of it (the jobs'
statuses, the phase mix) as a zlib-packed JSON blob parsed again when it is folded (tui/keyframe.py), steps as
columns of their figures (tui/steps.py), discrete events as parsed, and per sample its site power and link
peaks for the sparklines.

One thread appends (the reader), the UI thread reads; a lock guards the lists. In live mode the index is
bounded (`max_keyframes`): old keyframes and steps are thinned so memory stays flat however long it runs.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from typing import Any

from clustertop.engine.config import units
from clustertop.engine.config.errors import UserError
from clustertop.engine.stream import schema
from clustertop.engine.stream.reader import Reader

from .display import EVENT_LOG, HISTORY, DisplayState, energy_mwh, link_peaks
from .keyframe import Keyframe
from .steps import Steps

# Kinds of event that change job status; always kept (few) so a rebuilt state knows which jobs run.
JOB_EVENTS = frozenset({schema.JOB_START, schema.JOB_STOP, schema.CONTENTION})
History = tuple[float, float | None, dict[str, float]]      # a sample's time, site MW and link peaks


class EventIndex:
    """Every event of a stream in arrival order, stored for seeking. Thread-safe: one writer, many readers."""

    def __init__(self, header: dict[str, Any], max_keyframes: int | None = None) -> None:
        self.header = header
        self.gpus = int(header["topology"]["gpus"])
        self.max_keyframes = max_keyframes
        self.lock = threading.Lock()
        self.sample_t: list[float] = []
        self.sample_seq: list[int] = []          # arrival number of each event (for advancing without gaps)
        self.keyframes: list[Keyframe] = []
        self.sample_mw: list[float | None] = []
        self.sample_links: list[dict[str, float]] = []
        self.sample_mwh: list[float] = []        # the site's energy up to each sample (MW x the time since)
        self.steps = Steps()
        self.event_t: list[float] = []           # discrete events (everything but samples and steps)
        self.event_seq: list[int] = []
        self.events: list[dict[str, Any]] = []
        self.job_events: list[tuple[float, dict[str, Any]]] = []
        self.events_dropped = 0                  # discrete events thinned away (a live index is bounded)
        self._mwh, self._mwh_t = 0.0, 0.0
        self.end_t = 0.0                         # time of the latest event
        self.count = 0                           # events appended (the reader's progress)
        self.done = False                        # the stream ended
        self.error: str | None = None            # why it ended early, if it did

    @classmethod
    def of_file(cls, path: str, note: Callable[[str], None] | None = None) -> EventIndex:
        """Every event of a recording file, indexed; UserError on a bad file or one without a sample.
        `note(text)` hears about progress every 2 s of a long read."""
        reader = Reader(path)
        index = cls(reader.header)
        started = last_note = time.monotonic()
        for event in reader.events():
            index.add(event)
            if note is not None and index.count % 4096 == 0 and time.monotonic() - last_note > 2.0:
                last_note = time.monotonic()
                note(f"reading {path}: {index.count:,} events, t = {index.end_t:,.0f} s "
                     f"({units.seconds(round(last_note - started))})")
        if index.keyframe_count() == 0:
            raise UserError("has a header but no sample events; expected a recording with at least one "
                            "sample", path)
        index.finish()
        return index

    # -- writing (the reader thread) ---------------------------------------------------------------------

    def add(self, event: dict[str, Any]) -> None:
        """Append one parsed event (checked by the reader, or an engine's own)."""
        t = float(event["t"])
        kind = event["type"]
        if kind == schema.SAMPLE:
            self._add_sample(event, t)
            return
        with self.lock:
            seq = self.count + 1
            if kind == schema.STEP:
                self.steps.add(event, t, seq)
                if self.max_keyframes and len(self.steps.t) > 2 * self.max_keyframes:
                    self.steps.drop(self.max_keyframes)
            else:
                self.event_t.append(t)
                self.event_seq.append(seq)
                self.events.append(event)
                if kind in JOB_EVENTS:
                    self.job_events.append((t, event))
                if self.max_keyframes and len(self.event_t) > 8 * self.max_keyframes:
                    k = 4 * self.max_keyframes
                    del self.event_t[:k], self.event_seq[:k], self.events[:k]
                    self.events_dropped += k
            self.end_t = max(self.end_t, t)
            self.count = seq

    def _add_sample(self, event: dict[str, Any], t: float) -> None:
        keyframe = Keyframe(event)                # the arrays' conversion, outside the lock
        mw = event.get("site_mw")
        peaks = link_peaks(event.get("links", {}))
        with self.lock:
            self.sample_t.append(t)
            self.sample_seq.append(self.count + 1)
            self.keyframes.append(keyframe)
            self.sample_mw.append(float(mw) if mw is not None else None)
            self._mwh += energy_mwh(mw, t - self._mwh_t)
            self._mwh_t = t
            self.sample_mwh.append(self._mwh)
            self.sample_links.append(peaks)
            if self.max_keyframes and len(self.sample_t) > self.max_keyframes:
                self._thin_samples()
            self.end_t = max(self.end_t, t)
            self.count += 1

    def _thin_samples(self) -> None:
        """Drop every other keyframe of the older half, keeping the recent history (for sparklines) whole."""
        half = len(self.sample_t) // 2
        keep = list(range(0, half, 2)) + list(range(half, len(self.sample_t)))
        for name in ("sample_t", "sample_seq", "keyframes", "sample_mw", "sample_links", "sample_mwh"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in keep])

    def finish(self, error: str | None = None) -> None:
        with self.lock:
            self.done = True
            self.error = error

    # -- reading (the UI thread) ---------------------------------------------------------------------------

    @property
    def start_t(self) -> float:
        with self.lock:
            candidates = [v[0] for v in (self.sample_t, self.steps.t, self.event_t) if v]
        return min(candidates) if candidates else 0.0

    def keyframe_count(self) -> int:
        with self.lock:
            return len(self.sample_t)

    def event_times(self) -> list[float]:
        """Times of the discrete events (faults, checkpoints, job starts...), for the timeline and [ ]."""
        with self.lock:
            return list(self.event_t)

    def events_since(self, number: int) -> tuple[int, list[dict[str, Any]]]:
        """The discrete events from the `number`-th on (counting from the stream's first), every one that
        arrived, whatever its time: (the number of the first returned, the events). The number is larger than
        asked when older events were thinned away (a bounded live index)."""
        with self.lock:
            first = max(number, self.events_dropped)
            return first, self.events[first - self.events_dropped:]

    def event_kinds(self) -> list[tuple[float, str]]:
        """Each discrete event's time and type."""
        with self.lock:
            return [(t, str(event.get("type", ""))) for t, event in zip(self.event_t, self.events)]

    def utilization(self, times: list[float], gpus: list[int]) -> list[list[float]]:
        """The utilization (0..1) of `gpus` in the state at each of `times`: their values in the keyframe at
        or before it, without rebuilding a state (the worst-GPUs table's sparklines)."""
        with self.lock:
            frames = [self.keyframes[k - 1] if k else None
                      for k in (bisect.bisect_right(self.sample_t, when) for when in times)]
        return [frame.util_of(gpus, self.gpus) if frame is not None else [0.0] * len(gpus)
                for frame in frames]

    def state_at(self, t: float) -> DisplayState:
        """The view at simulated time t, rebuilt from the last keyframe at or before t."""
        state = DisplayState(self.header)
        with self.lock:
            k = bisect.bisect_right(self.sample_t, t)
            history = self._history(max(0, k - HISTORY), k - 1)
            keyframe = (self.sample_t[k - 1], self.keyframes[k - 1]) if k else None
            e = bisect.bisect_right(self.event_t, t)
            events = [(self.event_t[i], self.events[i]) for i in range(max(0, e - EVENT_LOG), e)]
            jobs = [(jt, event) for jt, event in self.job_events if jt <= t]
            steps = self.steps.last_per_job(self.steps.count_to(t), len(self.header.get("jobs", [])))
            energy = (self.sample_t[k - 1], self.sample_mwh[k - 1]) if k else None
        seen = {id(event) for _, event in events}
        jobs = [(jt, event) for jt, event in jobs if id(event) not in seen]
        state = _fold(state, jobs, steps, history, keyframe, events)
        if energy is not None:      # the energy of every sample before, not only of those folded
            state.energy_t, state.energy_mwh = energy
        return state

    def _history(self, first: int, end: int) -> list[History]:
        return [(self.sample_t[i], self.sample_mw[i], self.sample_links[i]) for i in range(first, end)]

    def cursor_at(self, t: float) -> int:
        """How many events a state at time t has folded (arrival order is time order)."""
        with self.lock:
            return self._cursor(t)

    def _cursor(self, t: float) -> int:
        last = 0
        for times, seqs in ((self.sample_t, self.sample_seq), (self.steps.t, self.steps.seq),
                            (self.event_t, self.event_seq)):
            i = bisect.bisect_right(times, t)
            if i:
                last = max(last, seqs[i - 1])
        return last

    def advance(self, state: DisplayState, cursor: int, t1: float) -> tuple[DisplayState, int]:
        """Fold the events after `cursor` (an arrival number) up to time t1 into `state`; a long jump rebuilds
        from a keyframe instead. Returns the state and the new cursor. Counting arrivals rather than comparing
        times means an event that arrives after a frame with the same timestamp is still folded."""
        with self.lock:
            a, b = bisect.bisect_right(self.sample_seq, cursor), bisect.bisect_right(self.sample_t, t1)
            sa, sb = bisect.bisect_right(self.steps.seq, cursor), self.steps.count_to(t1)
            ea, eb = bisect.bisect_right(self.event_seq, cursor), bisect.bisect_right(self.event_t, t1)
            new_cursor = max(cursor, self._cursor(t1))
            jump = (b - a) > HISTORY // 2 or (sb - sa) > 256 or (eb - ea) > EVENT_LOG // 2
            if not jump:
                history = self._history(a, b - 1)
                keyframe = (self.sample_t[b - 1], self.keyframes[b - 1]) if b > a else None
                steps = [(self.steps.t[i], self.steps.event(i)) for i in range(sa, sb)]
                events = [(self.event_t[i], self.events[i]) for i in range(ea, eb)]
        if jump:
            return self.state_at(t1), new_cursor
        return _fold(state, [], steps, history, keyframe, events), new_cursor


Timed = list[tuple[float, dict[str, Any]]]     # events with their times


def _fold(state: DisplayState, jobs: Timed, steps: Timed, history: list[History],
          keyframe: tuple[float, Keyframe] | None, events: Timed) -> DisplayState:
    """Fold stored events into `state` in time order; at the same time: job status, steps, sparkline history,
    the keyframe, then discrete events."""
    timeline: list[tuple[float, int, Any]] = []
    timeline += [(jt, 0, event) for jt, event in jobs]
    timeline += [(st, 1, event) for st, event in steps]
    timeline += [(ht, 2, (mw, peaks)) for ht, mw, peaks in history]
    if keyframe is not None:
        timeline.append((keyframe[0], 3, keyframe[1].event()))
    timeline += [(et, 4, event) for et, event in events]
    timeline.sort(key=lambda item: (item[0], item[1]))
    for t, order, item in timeline:
        if order == 2:
            state.remember(t, *item)
        else:
            state.fold((item,))
    return state
