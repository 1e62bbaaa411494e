"""The seek index of an event stream: a compact store of its events, and the two ways to read it: rebuild and
advance. The dashboard reads every source (a file, a pipe, a live engine) through one; benchmarks time the same.

Samples carry full state, so each is a keyframe: the state at time t is the last keyframe at or before t,
plus the job figures of the last `step` per job, the discrete events (for the log) and the sparkline history.
The index keeps samples as zlib-compressed lines (symmetric clusters compress a hundredfold), steps and discrete
events as raw lines, and the per-sample site power and link maxima as plain floats for the sparklines.

One thread appends (the reader), the UI thread reads; a lock guards the lists. In live mode the index is
bounded (`max_keyframes`): old keyframes and steps are thinned so memory stays flat however long it runs.
"""

from __future__ import annotations

import bisect
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import orjson

from ..config.errors import UserError
from . import schema
from .reader import Reader
from .state import EVENT_LOG, HISTORY, ClusterState, energy_mwh

# Kinds of event that change job status; always kept (few) so a rebuilt state knows which jobs run.
JOB_EVENTS = frozenset({schema.JOB_START, schema.JOB_STOP, schema.CONTENTION})


class EventIndex:
    """Every event of a stream in arrival order, stored for seeking. Thread-safe: one writer, many readers."""

    def __init__(self, header: dict[str, Any], max_keyframes: int | None = None) -> None:
        self.header = header
        self.max_keyframes = max_keyframes
        self.lock = threading.Lock()
        self.sample_t: list[float] = []
        self.sample_seq: list[int] = []         # arrival number of each event (for advancing without gaps)
        self.sample_blob: list[bytes] = []
        self.sample_mw: list[float | None] = []
        self.sample_links: list[dict[str, float]] = []
        self.sample_mwh: list[float] = []        # the site's energy up to each sample (its MW x the time since)
        self.step_t: list[float] = []
        self.step_seq: list[int] = []
        self.step_line: list[bytes] = []
        self.event_t: list[float] = []          # discrete events (everything but samples and steps)
        self.event_seq: list[int] = []
        self.event_line: list[bytes] = []
        self.job_events: list[tuple[float, bytes]] = []
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
        for event, line in reader.pairs():
            index.add(event, line)
            if note is not None and index.count % 4096 == 0 and time.monotonic() - last_note > 2.0:
                last_note = time.monotonic()
                note(f"reading {path}: {index.count:,} events, t = {index.end_t:,.0f} s "
                     f"({last_note - started:.0f} s)")
        if index.keyframe_count() == 0:
            raise UserError("has a header but no sample events; expected a recording with at least one sample",
                            path)
        index.finish()
        return index

    # -- writing (the reader thread) ---------------------------------------------------------------------

    def add(self, event: dict[str, Any], line: bytes | None = None) -> None:
        """Append one parsed event; `line` is its raw JSON when the caller has it (saves a dump)."""
        if line is None:       # a tight copy: orjson's own result keeps a 4 KB buffer, which a long index holds
            line = bytes(bytearray(orjson.dumps(event)))
        t = float(event["t"])
        kind = event["type"]
        with self.lock:
            seq = self.count + 1
            if kind == schema.SAMPLE:
                self.sample_t.append(t)
                self.sample_seq.append(seq)
                self.sample_blob.append(zlib.compress(line, 1))
                mw = event.get("site_mw")
                self.sample_mw.append(float(mw) if mw is not None else None)
                self._mwh += energy_mwh(mw, t - self._mwh_t)
                self._mwh_t = t
                self.sample_mwh.append(self._mwh)
                self.sample_links.append({tier: _max(load) for tier, load in event.get("links", {}).items()})
                if self.max_keyframes and len(self.sample_t) > self.max_keyframes:
                    self._thin_samples()
            elif kind == schema.STEP:
                self.step_t.append(t)
                self.step_seq.append(seq)
                self.step_line.append(line)
                if self.max_keyframes and len(self.step_t) > 2 * self.max_keyframes:
                    k = self.max_keyframes
                    del self.step_t[:k], self.step_seq[:k], self.step_line[:k]
            else:
                self.event_t.append(t)
                self.event_seq.append(seq)
                self.event_line.append(line)
                if kind in JOB_EVENTS:
                    self.job_events.append((t, line))
                if self.max_keyframes and len(self.event_t) > 8 * self.max_keyframes:
                    k = 4 * self.max_keyframes
                    del self.event_t[:k], self.event_seq[:k], self.event_line[:k]
            self.end_t = max(self.end_t, t)
            self.count += 1

    def _thin_samples(self) -> None:
        """Drop every other keyframe of the older half, keeping the recent history (for sparklines) whole."""
        half = len(self.sample_t) // 2
        keep = list(range(0, half, 2)) + list(range(half, len(self.sample_t)))
        for name in ("sample_t", "sample_seq", "sample_blob", "sample_mw", "sample_links", "sample_mwh"):
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
            candidates = [v[0] for v in (self.sample_t, self.step_t, self.event_t) if v]
        return min(candidates) if candidates else 0.0

    def keyframe_count(self) -> int:
        with self.lock:
            return len(self.sample_t)

    def event_times(self) -> list[float]:
        """Times of the discrete events (faults, checkpoints, job starts...), for the timeline and [ ]."""
        with self.lock:
            return list(self.event_t)

    def state_at(self, t: float) -> ClusterState:
        """The state at simulated time t, rebuilt from the last keyframe at or before t."""
        state = ClusterState(self.header)
        with self.lock:
            k = bisect.bisect_right(self.sample_t, t)
            hist0 = max(0, k - HISTORY)
            history = [(self.sample_t[i], self.sample_mw[i], self.sample_links[i]) for i in range(hist0, k - 1)]
            keyframe = (self.sample_t[k - 1], self.sample_blob[k - 1]) if k else None
            e = bisect.bisect_right(self.event_t, t)
            events = [(self.event_t[i], self.event_line[i]) for i in range(max(0, e - EVENT_LOG), e)]
            jobs = [(jt, line) for jt, line in self.job_events if jt <= t]
            s = bisect.bisect_right(self.step_t, t)
            steps = self._last_steps(s)
            energy = (self.sample_t[k - 1], self.sample_mwh[k - 1]) if k else None
        seen = {line for _, line in events}
        state = _fold(state, [(jt, line) for jt, line in jobs if line not in seen], steps, history, keyframe, events)
        if energy is not None:      # the energy of every sample before, not only of those folded
            state.energy_t, state.energy_mwh = energy
        return state

    def _last_steps(self, end: int) -> list[tuple[float, bytes]]:
        """The last step event of each job among step_line[:end] (scans back; jobs are few)."""
        jobs = max(1, len(self.header.get("jobs", [])))
        found: dict[bytes, tuple[float, bytes]] = {}
        i = end - 1
        names: set[str] = set()
        while i >= 0 and len(names) < jobs and end - i <= 64 * jobs:
            event = orjson.loads(self.step_line[i])
            name = event.get("job", "")
            if name not in names:
                names.add(name)
                found[self.step_line[i]] = (self.step_t[i], self.step_line[i])
            i -= 1
        return sorted(found.values())

    def cursor_at(self, t: float) -> int:
        """How many events a state at time t has folded (arrival order is time order)."""
        with self.lock:
            return self._cursor(t)

    def _cursor(self, t: float) -> int:
        last = 0
        for times, seqs in ((self.sample_t, self.sample_seq), (self.step_t, self.step_seq),
                            (self.event_t, self.event_seq)):
            i = bisect.bisect_right(times, t)
            if i:
                last = max(last, seqs[i - 1])
        return last

    def advance(self, state: ClusterState, cursor: int, t1: float) -> tuple[ClusterState, int]:
        """Fold the events after `cursor` (an arrival number) up to time t1 into `state`; a long jump rebuilds
        from a keyframe instead. Returns the state and the new cursor. Counting arrivals rather than comparing
        times means an event that arrives after a frame with the same timestamp is still folded."""
        with self.lock:
            a, b = bisect.bisect_right(self.sample_seq, cursor), bisect.bisect_right(self.sample_t, t1)
            sa, sb = bisect.bisect_right(self.step_seq, cursor), bisect.bisect_right(self.step_t, t1)
            ea, eb = bisect.bisect_right(self.event_seq, cursor), bisect.bisect_right(self.event_t, t1)
            new_cursor = max(cursor, self._cursor(t1))
            jump = (b - a) > HISTORY // 2 or (sb - sa) > 256 or (eb - ea) > EVENT_LOG // 2
            if not jump:
                history = [(self.sample_t[i], self.sample_mw[i], self.sample_links[i]) for i in range(a, b - 1)]
                keyframe = (self.sample_t[b - 1], self.sample_blob[b - 1]) if b > a else None
                steps = [(self.step_t[i], self.step_line[i]) for i in range(sa, sb)]
                events = [(self.event_t[i], self.event_line[i]) for i in range(ea, eb)]
        if jump:
            return self.state_at(t1), new_cursor
        return _fold(state, [], steps, history, keyframe, events), new_cursor


def _max(load: Any) -> float:
    if isinstance(load, (list, tuple)):
        return float(max(load)) if load else 0.0
    return float(load)


def _fold(state: ClusterState, jobs: list[tuple[float, bytes]], steps: list[tuple[float, bytes]],
          history: list[tuple[float, float | None, dict[str, float]]], keyframe: tuple[float, bytes] | None,
          events: list[tuple[float, bytes]]) -> ClusterState:
    """Fold stored lines into `state` in time order; at the same time: job status, steps, sparkline history,
    the keyframe, then discrete events."""
    timeline: list[tuple[float, int, dict[str, Any]]] = []
    timeline += [(jt, 0, orjson.loads(line)) for jt, line in jobs]
    timeline += [(st, 1, orjson.loads(line)) for st, line in steps]
    timeline += [(ht, 2, _history_sample(ht, mw, links)) for ht, mw, links in history]
    if keyframe is not None:
        timeline.append((keyframe[0], 3, orjson.loads(zlib.decompress(keyframe[1]))))
    timeline += [(et, 4, orjson.loads(line)) for et, line in events]
    timeline.sort(key=lambda item: (item[0], item[1]))
    for _, _, event in timeline:
        state.apply(event)
    return state


def _history_sample(t: float, mw: float | None, links: dict[str, float]) -> dict[str, Any]:
    """A sample stripped to what the sparklines need (no per-GPU arrays: cheap to fold)."""
    event: dict[str, Any] = {"t": t, "type": schema.SAMPLE, "links": links}
    if mw is not None:
        event["site_mw"] = mw
    return event
