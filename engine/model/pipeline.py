"""The pipeline schedule of one training step: one SimPy process per stage of one replica.

Schedules: GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush: p - r - 1 warm-up forwards on
stage r, then one forward / one backward), and interleaved 1F1B with v model chunks per stage (Narayanan et
al. SC21, as Megatron-LM orders it: rounds of p microbatches, warm-up 2 (p - r - 1) + (v - 1) p chunks).
A stage runs its operations in order; an operation waits for its input from the previous (next, for backward)
virtual stage plus the point-to-point transfer. Sends are asynchronous (as in Llama 3). The bubble is whatever
waiting comes out; the formula (p - 1) / (v m) is only used to test it.

`simulate` runs the stages as SimPy processes: the reference. `evaluate` gives the same times (bit for bit:
tests hold them equal, and the plans made from both) without processes, for every estimate (searches and
sweeps compare thousands of layouts; the step plan the dashboard animates comes from it too): an operation
starts at max(its stage's previous end, its input's end plus the transfer), so the step is a longest path
through the schedule's dependency graph, computed a wave of independent operations at a time with numpy (a
few hundred waves where SimPy resumes a process tens of thousands of times).

SimPy is imported here and nowhere in engine/__init__.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import simpy

from ..config.errors import UserError
from ..config.phases import CODE, PHASES

Segment = tuple[str, float]          # (phase name, seconds): what a chunk's operation does
Segments = Sequence[Sequence[Sequence[Segment]]]    # [stage][chunk]: the segments of one microbatch
OpKey = tuple[str, int, int]         # ("F" | "B", chunk, microbatch)

# evaluate: below this many operations per wave on average, one Python loop over the operations beats numpy
# over the waves (measured with the waves' tables cached, as a sweep runs: 8 stages and 16 microbatches, 5.6 a
# wave, 96 us walked and 114 us by waves; 16 and 16, 8.3 a wave, 153 and 155 us; an estimate, tables made
# cold, moves the crossover to about 4 a wave)
PER_WAVE_MIN = 8
STEADY_MIN = 256                     # below this many microbatches, peak_inflight walks the whole schedule
MAX_SCHEDULE_OPS = 1 << 20           # operations of one simulated schedule: ~450 MiB of arrays, ~3 s
SCHEDULE_BYTES_PER_OP = 450          # measured peak of simulate + intervals (262,144 operations: ~115 MB)



@dataclass(frozen=True, eq=False)
class Intervals:
    """Intervals (start, end, phase) of every stage as flat arrays: stage after stage, each stage's in the
    order it went through them. Phases are the stream's codes (engine/config/phases.py), from the schedule
    to the StepPlan and the run; `of` and `of_stage` take and give names, for people."""

    stage: np.ndarray
    start: np.ndarray
    end: np.ndarray
    phase: np.ndarray                # phase codes (engine.config.phases.CODE)

    @classmethod
    def of(cls, stages: Sequence[Sequence[tuple[float, float, str]]]) -> Intervals:
        flat = [(r, a, b, CODE[phase]) for r, s in enumerate(stages) for a, b, phase in s]
        r, a, b, c = zip(*flat) if flat else ((), (), (), ())
        return cls(np.array(r, dtype=np.intp), np.array(a, dtype=float), np.array(b, dtype=float),
                   np.array(c, dtype=np.int8))

    def of_stage(self, r: int) -> tuple[tuple[float, float, str], ...]:
        lo, hi = np.searchsorted(self.stage, [r, r + 1])
        return tuple(zip(self.start[lo:hi].tolist(), self.end[lo:hi].tolist(),
                         [PHASES[c] for c in self.phase[lo:hi].tolist()]))

    def phase_seconds(self) -> np.ndarray:
        """Seconds in each phase (by code), summed over the stages."""
        return np.bincount(self.phase, weights=self.end - self.start, minlength=len(PHASES))

    def then(self, other: Intervals) -> Intervals:
        """Each stage's intervals followed by the other's of that stage."""
        at = np.searchsorted(self.stage, other.stage, side="right")
        fields = ("stage", "start", "end", "phase")
        return Intervals(*(np.insert(getattr(self, f), at, getattr(other, f)) for f in fields))


@dataclass(frozen=True, eq=False)
class PipelineRun:
    """One simulated step: for every stage r and its k-th operation (in the stage's order), when the input it
    waited for was produced (NaN: none from another stage), when it started and when it ended. The intervals
    are derived from these when asked (a run kept in a cache holds only these three arrays)."""

    program: _Program
    segments: _Segments
    produced: np.ndarray             # [stage, operation]
    start: np.ndarray
    end: np.ndarray

    @property
    def end_s(self) -> float:
        return float(self.end[:, -1].max())

    @property
    def ends(self) -> list[float]:
        """When each stage finished its last operation."""
        ends: list[float] = self.end[:, -1].tolist()
        return ends

    @property
    def last_backward(self) -> list[list[tuple[float, float]]]:
        """Per stage and chunk: (start, end) of the chunk's last backward."""
        k = self.program.last_backward + np.arange(0, self.end.size, self.end.shape[1])[:, None]
        return [list(zip(a, b)) for a, b in zip(self.start.ravel()[k].tolist(), self.end.ravel()[k].tolist())]

    def _waits(self) -> tuple[np.ndarray, np.ndarray]:
        """Per operation: its stage's previous end, and when its input was produced clipped to [that end, its
        start]: bubble before that, pp after. An operation that did not wait (no input, NaN, which fmax skips,
        or one that came in time) starts at its stage's previous end, where both clip: no bubble, no pp."""
        prev = np.concatenate([np.zeros((self.end.shape[0], 1)), self.end[:, :-1]], axis=1)
        return prev, np.fmin(np.fmax(self.produced, prev), self.start)

    def phase_seconds(self) -> np.ndarray:
        """Seconds in each phase (by code), summed over the stages from 0 to each one's last operation: what
        the intervals add up to, without building them (every chunk runs m forwards and m backwards)."""
        seg = self.segments
        m = self.end.shape[1] // (2 * seg.duration.shape[2])
        out: np.ndarray = m * np.bincount(seg.phase.ravel(), weights=seg.duration.ravel(),
                                          minlength=len(PHASES))
        prev, split = self._waits()
        out[CODE["bubble"]] += (split - prev).sum()         # 0.0 where it did not wait
        out[CODE["pp"]] += (self.start - split).sum()
        return out

    @property
    def intervals(self) -> Intervals:
        """Every stage's intervals in the order it went through them: per operation the wait for its input
        (bubble until the input was produced, pp while it travelled), then its segments."""
        prev, split = self._waits()
        starts, ends = [prev, split], [split, self.start]
        phases = [np.full(prev.shape, CODE["bubble"]), np.full(prev.shape, CODE["pp"])]
        present = [split > prev, self.start > split]
        kind, chunk = self.program.kind, self.program.chunk
        stage = np.arange(kind.shape[0])[:, None]
        durations = self.segments.duration[stage, kind, chunk]          # [stage, operation, segment]
        elapsed = self.segments.elapsed[stage, kind, chunk]              # the last one is the operation's
        t = self.start
        for j in range(durations.shape[2]):
            starts.append(t)
            t = self.start + elapsed[:, :, j]
            ends.append(t)
            phases.append(self.segments.phase[stage, kind, chunk, j])
            present.append(durations[:, :, j] > 0)
        keep = np.stack(present, axis=2)                                  # [stage, operation, slot]
        stages = np.broadcast_to(stage[:, :, None], keep.shape)
        return Intervals(stages[keep], np.stack(starts, axis=2)[keep], np.stack(ends, axis=2)[keep],
                         np.stack(phases, axis=2)[keep].astype(np.int8))


@dataclass(frozen=True, eq=False)
class _Segments:
    """The segments that take time (positive durations), in order, as arrays [stage, kind, chunk, segment]
    (kind 0 forward, 1 backward) padded with zeros; `elapsed` is their running sum, and total[stage, kind,
    chunk] (its last column) what the operation takes: its end is its start plus that, in every path. Kept
    once per distinct chunk (`at`: [stage, kind, chunk] index into them) and spread when read: an estimate
    reads `total`, the phase sums read `duration` and `phase`, only a plan's intervals read `elapsed`."""

    at: np.ndarray
    distinct_duration: np.ndarray
    distinct_phase: np.ndarray
    distinct_elapsed: np.ndarray
    total: np.ndarray

    @classmethod
    def of(cls, fwd: Segments, bwd: Segments) -> _Segments:
        # stages mostly share their chunks' segments (equal ones), and stages alike one tuple of chunks: each
        # distinct tuple of chunks is looked at once (by identity), each distinct chunk built once, from flat
        # sequences (numpy reads a flat sequence of numbers much faster than nested ones)
        which: dict[tuple[Segment, ...], int] = {}
        rows: dict[int, list[int]] = {}
        index: list[int] = []
        for stage in (*fwd, *bwd):
            places = rows.get(id(stage))
            if places is None:
                places = rows[id(stage)] = [which.setdefault(tuple(segs), len(which)) for segs in stage]
            index += places
        # a segment of no time (or a negative one) is kept as 0.0, in its place: it moves no running sum
        # (x + 0.0 is x) and no interval is made of it; shorter chunks are padded with such segments
        n = max(1, *map(len, which))
        names, seconds = zip(*itertools.chain.from_iterable(
            segs if len(segs) == n else (*segs, *[("idle", 0.0)] * (n - len(segs))) for segs in which))
        duration = np.array(seconds).reshape(-1, n)
        duration = np.where(duration > 0, duration, 0.0)
        elapsed = np.cumsum(duration, axis=1)
        at = np.array(index).reshape(2, len(fwd), -1).transpose(1, 0, 2)       # [stage, kind, chunk]
        phase = np.array(list(map(CODE.__getitem__, names)), dtype=np.int8).reshape(-1, n)
        return cls(at, duration, phase, elapsed, elapsed[:, -1][at])

    @cached_property
    def duration(self) -> np.ndarray:
        duration: np.ndarray = self.distinct_duration.take(self.at, axis=0)
        return duration

    @cached_property
    def phase(self) -> np.ndarray:
        phase: np.ndarray = self.distinct_phase.take(self.at, axis=0)
        return phase

    @cached_property
    def elapsed(self) -> np.ndarray:
        elapsed: np.ndarray = self.distinct_elapsed.take(self.at, axis=0)
        return elapsed


def check(schedule: str, p: int, v: int, m: int) -> str | None:
    """Why this schedule cannot run (None when it can)."""
    if v > 1 and schedule != "1f1b":
        return "interleaved stages need schedule = \"1f1b\""
    if v > 1 and p == 1:
        return "interleaving needs pp > 1"
    if v > 1 and m % p:
        return (f"interleaved 1F1B runs rounds of pp = {p} microbatches; the {m} microbatches per replica "
                f"are not a multiple of {p}")
    return None


def _operations(schedule: str, p: int, v: int, m: int, rank: Any) -> tuple[np.ndarray, ...]:
    """The operations stage `rank` runs, in order: kinds (0 forward, 1 backward), chunks, microbatches. For
    an array of ranks (shaped [stages, 1]), one row per stage."""
    j = np.arange(2 * m * v)                      # the j-th operation of the stage
    if schedule == "gpipe":
        j = np.broadcast_to(j, np.broadcast_shapes(np.shape(rank), j.shape))
        return (j >= m).astype(np.intp), np.zeros_like(j), j % m
    total = m * v
    warm = np.minimum(p - rank - 1, m) if v == 1 else np.minimum(2 * (p - rank - 1) + (v - 1) * p, total)
    steady = total - warm
    # the warm-up forwards, then one forward and one backward, then the remaining backwards; k numbers the
    # forwards (and the backwards) in the order they run
    i = j - warm                                  # position among the alternating ones
    alternating = (i >= 0) & (i < 2 * steady)
    kind = np.where(alternating, i % 2, (i >= 0).astype(np.intp))
    k = np.where(i < 0, j, np.where(alternating, np.where(kind == 0, warm + i // 2, i // 2), j - total))
    if v == 1:
        return kind, np.zeros_like(k), k
    # interleaved: rounds of p microbatches through chunks 0, 1, ... (backwards through v - 1, v - 2, ...)
    chunk = k % (p * v) // p
    return kind, np.where(kind == 1, v - 1 - chunk, chunk), k // (p * v) * p + k % p


@lru_cache(maxsize=1024)
def order(schedule: str, p: int, v: int, m: int, rank: int) -> tuple[OpKey, ...]:
    """The operations stage `rank` runs, in order."""
    kind, chunk, micro = _operations(schedule, p, v, m, rank)
    return tuple(zip(["FB"[x] for x in kind.tolist()], chunk.tolist(), micro.tolist()))


def peak_inflight(schedule: str, p: int, v: int, m: int,
                  chunk_bytes: Sequence[Sequence[float]]) -> list[float]:
    """Per stage, the largest activation memory it holds: going through its operations in order, a forward
    allocates its chunk's bytes (chunk_bytes[stage][chunk]), a backward frees them.

    The cost does not grow with m past the steady state: GPipe holds all m forwards before its first backward
    (closed form); 1F1B and interleaved 1F1B hold a warm-up's worth and then alternate, so what a stage holds
    repeats every round of p microbatches and a longer step peaks as one of `steady_microbatches(p)`."""
    per_chunk = np.asarray(chunk_bytes, dtype=float)
    if m > STEADY_MIN:
        if schedule == "gpipe":
            gpipe: list[float] = np.maximum(m * per_chunk[:, 0], 0.0).tolist()
            return gpipe
        m = min(m, steady_microbatches(p))
    if operations(p, v, m) <= MAX_SCHEDULE_OPS:            # the whole program at once (cached)
        program = _program(schedule, p, v, m)
        # a forward holds its chunk's bytes, a backward frees them (-x: exactly)
        held = program.per_operation(per_chunk[:, program.chunk_f], -per_chunk[:, program.chunk_b], float)
        peaks: list[float] = np.maximum(np.add.accumulate(held, axis=1).max(axis=1), 0.0).tolist()
        return peaks
    out = []
    for r in range(p):                  # one stage at a time: 2 m v operations each, however many stages
        kind, chunk, _ = _operations(schedule, p, v, m, r)
        held = np.where(kind == 1, -per_chunk[r][chunk], per_chunk[r][chunk])
        out.append(max(float(np.add.accumulate(held).max()), 0.0))
    return out


def steady_microbatches(p: int) -> int:
    """Microbatches after which 1F1B (interleaved or not) on p stages is in its steady state on every stage:
    the warm-up (under v + 1 rounds of p) and a whole round (v p operations) fit in 4 p; a multiple of p
    (rounds)."""
    return -(-max(STEADY_MIN, 4 * p) // p) * p


def operations(p: int, v: int, m: int) -> int:
    """How many operations a schedule of p stages, v chunks and m microbatches has (each takes memory and time
    to simulate: about SCHEDULE_BYTES_PER_OP bytes of arrays and a few microseconds)."""
    return 2 * p * v * m


@dataclass(frozen=True, eq=False)
class _Program:
    """The operations of every stage. Each stage runs the same forwards in the same order (forward i: chunk
    chunk_f[i], microbatch micro[i]) and the same backwards (backward i: chunk chunk_b[i], microbatch
    micro[i]); stage r runs its i-th forward as its operation pos_f[r, i] and its i-th backward as its
    operation pos_b[r, i].
    Forward i of stage r > 0 waits for forward i of stage r - 1, of stage 0 (a later chunk) for forward i - p
    of the last stage; backward i of stage r < p - 1 for backward i of stage r + 1, of the last stage (an
    earlier chunk) for backward i - p of stage 0 (`upstream`). Op id: ((kind * p + stage) * v + chunk) * m +
    microbatch."""

    p: int
    v: int
    m: int
    pos_f: np.ndarray              # [stage, i]
    pos_b: np.ndarray              # [stage, i]
    chunk_f: np.ndarray            # [i]
    chunk_b: np.ndarray            # [i]
    last_backward: np.ndarray      # [stage, chunk]: which operation is the chunk's last backward

    @cached_property
    def micro(self) -> np.ndarray:
        """[i]: the microbatch of the i-th forward and of the i-th backward."""
        i, p = np.arange(self.pos_f.shape[1]), self.p
        micro: np.ndarray = i // (p * self.v) * p + i % p
        return micro

    def upstream(self, forward: np.ndarray, backward: np.ndarray,
                 none: Any) -> tuple[np.ndarray, np.ndarray]:
        """Per stage and forward (backward) i, the value `forward` (`backward`) has for the operation it waits
        for (`none`: it waits for no other stage's)."""
        p = self.p
        up_f, up_b = np.empty_like(forward), np.empty_like(backward)
        up_f[1:], up_b[:-1] = forward[:-1], backward[1:]
        up_f[0], up_b[-1] = none, none
        if self.v > 1:            # chunk c > 0 of stage 0 after chunk c - 1 of the last stage; backwards back
            up_f[0, p:] = np.where(self.chunk_f[p:] > 0, forward[-1, :-p], none)
            up_b[-1, p:] = np.where(self.chunk_b[p:] < self.v - 1, backward[0, :-p], none)
        return up_f, up_b

    def per_operation(self, forward: Any, backward: Any, dtype: Any = np.intp) -> np.ndarray:
        """[stage, operation]: `forward` [stage, i] (or broadcast to it) at each stage's forwards, `backward`
        at its backwards."""
        out = np.empty((self.p, 2 * self.pos_f.shape[1]), dtype=dtype)
        flat = out.reshape(-1)
        flat[self.flat_f] = forward
        flat[self.flat_b] = backward
        return out

    @cached_property
    def kind(self) -> np.ndarray:
        """[stage, operation]: 0 forward, 1 backward."""
        return self.per_operation(0, 1)

    @cached_property
    def chunk(self) -> np.ndarray:
        """[stage, operation]: the chunk it runs."""
        return self.per_operation(self.chunk_f, self.chunk_b)

    @cached_property
    def flat_f(self) -> np.ndarray:
        """[stage, i]: the flat index (stage * operations per stage + operation) of each stage's i-th
        forward."""
        per_stage = 2 * self.pos_f.shape[1]
        flat: np.ndarray = np.arange(0, self.p * per_stage, per_stage)[:, None] + self.pos_f
        return flat

    @cached_property
    def flat_b(self) -> np.ndarray:
        """[stage, i]: the flat index of each stage's i-th backward."""
        per_stage = 2 * self.pos_b.shape[1]
        flat: np.ndarray = np.arange(0, self.p * per_stage, per_stage)[:, None] + self.pos_b
        return flat

    @cached_property
    def source(self) -> np.ndarray:
        """[stage, operation]: the flat index of the operation it waits for, or -1."""
        return self.per_operation(*self.upstream(self.flat_f, self.flat_b, -1))

    @cached_property
    def ids(self) -> np.ndarray:
        """[stage, operation]: op id."""
        stage = np.arange(self.p)[:, None]
        ids: np.ndarray = ((self.kind * self.p + stage) * self.v + self.chunk) * self.m + \
            self.per_operation(self.micro, self.micro)
        return ids

    @cached_property
    def dep(self) -> np.ndarray:
        """[stage, operation]: id of the operation it waits for, or -1."""
        return np.where(self.source >= 0, self.ids.ravel()[self.source], -1)

    @cached_property
    def stage_kind(self) -> np.ndarray:
        """[stage, operation]: stage * 2 + kind, the index into [stage, kind] arrays."""
        flat: np.ndarray = np.arange(self.p)[:, None] * 2 + self.kind
        return flat

    @cached_property
    def segment(self) -> np.ndarray:
        """[stage, operation]: (stage * 2 + kind) * v + chunk, the index into [stage, kind, chunk] arrays."""
        flat: np.ndarray = self.stage_kind * self.v + self.chunk
        return flat

    @cached_property
    def ops(self) -> tuple[tuple[tuple[bool, int, int, int], ...], ...]:
        """Per stage, per operation: (backward, chunk, op id, id of the operation it waits for or -1)."""
        return tuple(tuple(zip(k.astype(bool).tolist(), c.tolist(), i.tolist(), d.tolist()))
                     for k, c, i, d in zip(self.kind, self.chunk, self.ids, self.dep))


def _warm_up(schedule: str, p: int, v: int, m: int) -> np.ndarray:
    """[stage, 1]: the forwards each stage runs before its first backward (GPipe: all of them)."""
    r = np.arange(p)[:, None]
    if schedule == "gpipe":
        return np.full((p, 1), m)
    return np.minimum(p - r - 1, m) if v == 1 else np.minimum(2 * (p - r - 1) + (v - 1) * p, m * v)


@lru_cache(maxsize=256)
def _program(schedule: str, p: int, v: int, m: int) -> _Program:
    # the warm-up forwards, then one forward and one backward, then the remaining backwards (`_operations`)
    n = m * v
    i = np.arange(n)
    warm = _warm_up(schedule, p, v, m)
    pos_f = i + np.maximum(i - warm, 0)
    pos_b = i + np.minimum(i + warm + 1, n)
    # interleaved: rounds of p microbatches through chunks 0, 1, ... (backwards through v - 1, v - 2, ...)
    chunk_f = i % (p * v) // p
    chunk_b = v - 1 - chunk_f
    # the last backward of chunk c: microbatch m - 1's, in the last round (v = 1: the last backward)
    last_i = n - 1 - np.arange(v) * p
    return _Program(p, v, m, pos_f, pos_b, chunk_f, chunk_b, pos_b[:, last_i])


def simulate(schedule: str, p: int, v: int, m: int, fwd: Segments, bwd: Segments, send_fwd: Sequence[float],
             send_bwd: Sequence[float]) -> PipelineRun:
    """Run one step. fwd[r][c] / bwd[r][c]: segments of one microbatch of chunk c on stage r.

    send_fwd[r]: transfer time of activations out of stage r (to r + 1, or to stage 0 of the next chunk);
    send_bwd[r]: of gradients out of stage r (to r - 1, or to the last stage of the previous chunk).

    One SimPy process per stage goes through the stage's operations in order. An operation starts when the
    stage is free and its input has arrived (its producer's end plus the transfer); its segments then give
    its end, which the process announces at once. The process goes straight on to the next operation when
    that one's input has been announced; when it has not, the process sleeps until the stage is free and, if
    the input is still not announced, waits for an event the producer triggers when it announces it. So
    SimPy only handles the waits, not one event per operation. Each process keeps its own clock and records
    per operation when its input was produced, when it started and when it ended: the intervals are derived
    from these (PipelineRun.intervals).
    """
    program, segments = _prepare(schedule, p, v, m, fwd, bwd)
    total = segments.total.tolist()
    env = simpy.Environment()
    finished: list[float | None] = [None] * (2 * p * v * m)     # end of every operation, once it started
    waiting: dict[int, simpy.Event] = {}                        # op id -> event its one consumer waits on
    records: list[tuple[list[float], list[float], list[float]] | None] = [None] * p
    nan = float("nan")

    def stage(r: int) -> Generator[simpy.Event, Any, None]:
        produced_at: list[float] = []
        started: list[float] = []
        ended: list[float] = []
        takes = total[r]
        delays = (send_fwd[(r - 1) % p], send_bwd[(r + 1) % p])
        now = env.now           # this stage's clock
        for backward, c, op, dep in program.ops[r]:
            produced: float | None
            if dep < 0:
                produced = nan
            else:
                produced = finished[dep]
                if produced is None:
                    if now > env.now:
                        yield env.timeout(now - env.now)    # busy until its last operation ends
                        produced = finished[dep]
                    if produced is None:
                        waiting[dep] = event = env.event()
                        produced = yield event
                now = max(now, produced + delays[backward])     # free, and the input has arrived
            produced_at.append(produced)
            started.append(now)
            now = now + takes[backward][c]
            ended.append(now)
            finished[op] = now
            if op in waiting:
                waiting.pop(op).succeed(now)
        yield env.timeout(max(0.0, now - env.now))
        records[r] = (produced_at, started, ended)

    for r in range(p):
        env.process(stage(r))
    env.run()
    if any(rec is None for rec in records):
        raise RuntimeError(f"pipeline schedule {schedule} p={p} v={v} m={m} deadlocked")
    produced, started, ended = (np.array(x, dtype=float) for x in zip(*records))
    return PipelineRun(program, segments, produced, started, ended)


def evaluate(schedule: str, p: int, v: int, m: int, fwd: Segments, bwd: Segments, send_fwd: Sequence[float],
             send_bwd: Sequence[float]) -> PipelineRun:
    """What `simulate` gives, the same floating-point operations on the same numbers, a wave at a time: each
    operation starts at max(previous end, input end + transfer) (NaN for no input, which fmax skips) and ends
    `total` later. A wave is a row of every stage's clock: a stage with no operation in the wave waits for
    no input (NaN) and takes 0.0, which leaves its clock as it was (x + 0.0 is x)."""
    program, segments = _prepare(schedule, p, v, m, fwd, bwd)
    waves = _waves(schedule, p, v, m)
    # the transfer an operation waits for, by stage * 2 + kind: a forward's from the previous stage, a
    # backward's from the next (then 0.0, what a stage with no operation in a wave reads)
    send_f, send_b = np.asarray(send_fwd, dtype=float), np.asarray(send_bwd, dtype=float)
    delays = np.empty(2 * p + 1)
    delays[0], delays[2:-1:2] = send_f[-1], send_f[:-1]
    delays[1:-2:2], delays[-2] = send_b[1:], send_b[0]
    delays[-1] = 0.0
    total = segments.total.ravel()
    shape = (p, 2 * v * m)
    if 2 * p * v * m < PER_WAVE_MIN * waves.count:
        start, end = _walk(waves, delays[waves.walk_delay].tolist(), total[waves.walk_segment].tolist())
        return PipelineRun(program, segments, end[waves.walk_input], start[:-2].reshape(shape),
                           end[:-2].reshape(shape))
    count, size = waves.count, waves.size
    takes = np.append(total, 0.0).take(waves.segment)                  # [wave, stage]
    ends = np.empty(size + 1)
    ends[size] = np.nan                           # what "no input" reads
    clock = ends[:size].reshape(count, p)         # row w: the clocks after wave w
    # a wave a row (the iterators give each row as a view, made in C), after the clocks of the wave before
    prev = np.zeros(p)
    fmax, add = np.fmax, np.add
    delayed = bool(delays.any())
    if delayed:
        waits = delays[waves.delay]
        for dep, dl, tk, e in zip(waves.dep, waits, takes, clock):
            fmax(prev, ends[dep] + dl, e)         # (out positional: no keywords for numpy to parse)
            add(e, tk, e)
            prev = e
    else:                                         # x + 0.0 is x: no additions for the transfers
        for dep, tk, e in zip(waves.dep, takes, clock):
            fmax(prev, ends[dep], e)
            add(e, tk, e)
            prev = e
    produced, end = ends[waves.input_of], ends[waves.slot]
    # when each operation started: the loop's max again, of the same numbers
    arrived = produced + waits.ravel()[waves.slot] if delayed else produced
    start = fmax(np.concatenate((np.zeros((p, 1)), end[:, :-1]), axis=1), arrived)
    return PipelineRun(program, segments, produced, start, end)


def _walk(waves: _Waves, delay: list[float], takes: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """`evaluate`'s loop one operation at a time in plain Python floats, in wave order, for schedules whose
    waves are narrow (numpy's cost per wave would dominate): the same additions, and taking y when y > x is
    fmax(x, y) where x is never NaN (NaN > x is false). delay and takes in wave order; start and end by flat
    index (stage * operations per stage + k), then NaN and 0.0 (what "no input" and "no previous operation"
    read)."""
    order = waves.walk_order
    n = len(order)
    end = [0.0] * n + [math.nan, 0.0]
    start = [0.0] * (n + 2)
    for i, a, d, dl, tk in zip(order, waves.walk_prev, waves.walk_dep, delay, takes):
        x = end[a]
        y = end[d] + dl
        if y > x:                  # noqa: PLR1730  (max() costs a call per operation)
            x = y
        start[i] = x
        end[i] = x + tk
    return np.array(start), np.array(end)


def _prepare(schedule: str, p: int, v: int, m: int, fwd: Segments,
             bwd: Segments) -> tuple[_Program, _Segments]:
    why = check(schedule, p, v, m)
    if why:
        raise UserError(why)
    return _program(schedule, p, v, m), _Segments.of(fwd, bwd)


@dataclass(frozen=True, eq=False)
class _Waves:
    """A program's operations in waves: an operation depends only on operations of earlier waves, and a stage
    runs at most one operation a wave. `evaluate` keeps its times a wave a row and a stage a column: stage r's
    operation of wave w in slot w * p + r of the start and end times (slot `size` of the ends: NaN, what "no
    input" reads).

    slot[r, k]: where stage r's k-th operation is; input_of[r, k]: where its input's producer is (`size`:
    none). By [wave, stage], what the loop reads: dep (input_of, or `size` where the stage has no operation)
    and segment (the flat index into [stage, kind, chunk] arrays; one past them where no operation)."""

    program: _Program
    count: int                     # waves
    slot: np.ndarray
    input_of: np.ndarray
    dep: np.ndarray
    segment: np.ndarray

    @property
    def size(self) -> int:
        return int(self.count * self.slot.shape[0])

    @cached_property
    def delay(self) -> np.ndarray:
        """[wave, stage]: stage * 2 + kind, the index into [stage, kind] arrays (one past them where no
        operation, whose input is NaN)."""
        delay: np.ndarray = self.segment // self.program.v
        return delay

    @cached_property
    def walk_index(self) -> np.ndarray:
        """`_walk`'s order: the operations' flat indices in wave order (by stage within a wave)."""
        order: np.ndarray = np.argsort(self.slot.ravel(), kind="stable")
        return order

    @cached_property
    def walk_order(self) -> list[int]:
        order: list[int] = self.walk_index.tolist()
        return order

    @cached_property
    def walk_prev(self) -> list[int]:
        """In `walk_order`, the flat index of the stage's previous operation (n + 1: none)."""
        k = self.slot.shape[1]
        flat = self.walk_index
        prev: list[int] = np.where(flat % k, flat - 1, self.slot.size + 1).tolist()
        return prev

    @cached_property
    def walk_dep(self) -> list[int]:
        """In `walk_order`, the flat index of the input's producer (n: none)."""
        dep: list[int] = self.walk_input.ravel()[self.walk_index].tolist()
        return dep

    @cached_property
    def walk_segment(self) -> np.ndarray:
        """In `walk_order`, the flat index into [stage, kind, chunk] arrays."""
        segment: np.ndarray = self.program.segment.ravel()[self.walk_index]
        return segment

    @cached_property
    def walk_delay(self) -> np.ndarray:
        """In `walk_order`, the flat index into [stage, kind] arrays."""
        delay: np.ndarray = self.program.stage_kind.ravel()[self.walk_index]
        return delay

    @cached_property
    def walk_input(self) -> np.ndarray:
        """[stage, operation]: the flat index of the input's producer (n: none)."""
        source = self.program.source
        return np.where(source >= 0, source, source.size)


@lru_cache(maxsize=256)
def _waves(schedule: str, p: int, v: int, m: int) -> _Waves:
    """Each operation's wave is one more than the latest of its stage's previous operation and its input's
    producer (the longest chain of operations ending at it: any such layering gives `evaluate` the same
    numbers, as the operations of a wave depend only on earlier ones)."""
    program = _program(schedule, p, v, m)
    layered = _longest_chains(program, *_wave_guess(schedule, p, v, m), 2 * p + 2)
    if layered is None:
        walked = _walked_waves(schedule, p, v, m, program)
        layered = walked[program.flat_f], walked[program.flat_b], walked.reshape(p, -1)
    wave_f, wave_b, wave = layered
    count = int(wave[:, -1].max()) + 1           # a stage's waves increase along its operations
    rows = np.arange(p)[:, None]
    slot_f, slot_b = wave_f * p + rows, wave_b * p + rows
    size = count * p
    input_f, input_b = program.upstream(slot_f, slot_b, size)
    dep = np.full(size, size)
    dep[slot_f], dep[slot_b] = input_f, input_b
    segment = np.full(size, 2 * p * v)
    segment[slot_f] = 2 * v * rows + program.chunk_f
    segment[slot_b] = (2 * rows + 1) * v + program.chunk_b
    return _Waves(program, count, wave * p + rows, program.per_operation(input_f, input_b),
                  dep.reshape(count, p), segment.reshape(count, p))


def _wave_guess(schedule: str, p: int, v: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """[stage, i]: the wave of each stage's i-th forward and i-th backward when every operation takes one
    step (the schedule's closed form). Exact for 1F1B and GPipe; for interleaved 1F1B it misses the waits of
    stage 0's later chunks for the last stage and of the last backwards, which `_longest_chains` adds."""
    r = np.arange(p)[:, None]
    i = np.arange(m * v)
    if schedule == "gpipe":                                   # all forwards down, then all backwards up
        return r + i, m + 2 * p - 2 - r + i
    warm = _warm_up(schedule, p, v, m)
    first_b = (v + 1) * p - 1 - r                             # the first gradient's round trip
    forward = np.where(i <= warm, r + i, first_b + 2 * (i - warm) - 1)
    # a forward and a backward, and (interleaved) one backward after another once the forwards are done
    backward = first_b + 2 * i if v == 1 else first_b + i + np.minimum(i, m * v - warm - 1)
    return forward, backward


def _longest_chains(program: _Program, forward: np.ndarray, backward: np.ndarray,
                    rounds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Waves from a guess ([stage, i] of the forwards and backwards): raise each operation to one more than
    its input's wave and its stage's previous operation's, until they are (a valid layering, the least one
    above the guess) or `rounds` pass (None). A round goes along the chains of forwards (forward i down the
    stages and on to the next chunk: w[t] - t is a running max along the chain), of backwards, and along the
    stages (w[k] - k along a stage's operations). Gives the forwards', the backwards' and [stage, operation]
    waves."""
    p, v = program.p, program.v
    r = np.arange(p)[:, None]
    k = np.arange(2 * forward.shape[1])
    waves: np.ndarray | None = None     # after a round: rising along every stage
    for n in range(rounds):
        if n or v == 1:             # (an interleaved schedule's guess is short: raised once before a look)
            if v == 1:
                chained = (forward[1:] > forward[:-1]).all() and (backward[:-1] > backward[1:]).all()
            else:
                up_f, up_b = program.upstream(forward, backward, -1)
                chained = (up_f < forward).all() and (up_b < backward).all()
            if waves is None:
                waves = program.per_operation(forward, backward)
                chained = chained and (waves[:, 1:] > waves[:, :-1]).all()
            if chained:
                return forward, backward, waves
        if v == 1:
            forward = np.maximum.accumulate(forward - r, axis=0) + r
            backward = np.maximum.accumulate((backward + r)[::-1], axis=0)[::-1] - r
        else:
            forward, backward = _along_chains(forward, p, v), _along_chains(backward[::-1], p, v)[::-1]
        waves = np.maximum.accumulate(program.per_operation(forward, backward) - k, axis=1) + k
        forward, backward = waves.ravel()[program.flat_f], waves.ravel()[program.flat_b]
    return None


def _along_chains(waves: np.ndarray, p: int, v: int) -> np.ndarray:
    """[stage, i] of interleaved forwards (or of backwards, stages reversed) raised along their chains: i =
    (round * v + chunk) * p + microbatch in the round, the chain of a round and microbatch runs through the
    chunks and in each through the stages (t = chunk * p + stage)."""
    n = waves.shape[1]
    chains = waves.reshape(p, n // (p * v), v, p).transpose(1, 3, 2, 0).reshape(-1, p * v)
    t = np.arange(p * v)
    raised = np.maximum.accumulate(chains - t, axis=1) + t
    return raised.reshape(n // (p * v), p, v, p).transpose(3, 0, 2, 1).reshape(p, n)


def _walked_waves(schedule: str, p: int, v: int, m: int, program: _Program) -> np.ndarray:
    """The waves by walking the stages in turn, each as far as its inputs' waves are known (one operation at
    a time: what `_longest_chains` does not finish); a schedule that cannot finish is a deadlock."""
    k_max = program.kind.shape[1]
    n = p * k_max
    sources = program.source.tolist()
    wave = [-1] * n                  # by flat index; -1 until known
    done = [0] * p
    left = n
    while left:
        before = left
        for r in range(p):
            k, base, source = done[r], r * k_max, sources[r]
            w = wave[base + k - 1] + 1 if k else 0
            while k < k_max:
                i = source[k]
                if i >= 0:
                    if wave[i] < 0:
                        break
                    if wave[i] >= w:
                        w = wave[i] + 1
                wave[base + k] = w
                k += 1
                w += 1
            left -= k - done[r]
            done[r] = k
        if left == before:
            raise RuntimeError(f"pipeline schedule {schedule} p={p} v={v} m={m} deadlocked")
    return np.array(wave)


def split_layers(layers: int, stages: int) -> list[int]:
    """Layers per virtual stage: as even as possible, the shortfall taken from the ends first.

    The first stage also holds the embedding and the last the output layer, so they get the fewer layers:
    Llama 3's 126 layers on 16 stages are 7 + 14 x 8 + 7.
    """
    if stages > layers:
        raise UserError(f"{stages} pipeline stages (pp x virtual_stages) exceed the model's {layers} layers")
    base = -(-layers // stages)
    counts = [base] * stages
    deficit = base * stages - layers
    lo, hi = 0, stages - 1
    turn = 0
    while deficit:
        idx = lo if turn % 2 == 0 else hi
        counts[idx] -= 1
        if turn % 2 == 0:
            lo += 1
        else:
            hi -= 1
        turn += 1
        deficit -= 1
    return counts
