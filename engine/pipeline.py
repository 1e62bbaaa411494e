"""The pipeline schedule of one training step, simulated with SimPy: one process per stage of one replica.

Schedules: GPipe (all forwards, then all backwards), 1F1B (PipeDream-Flush: p - r - 1 warm-up forwards on
stage r, then one forward / one backward), and interleaved 1F1B with v model chunks per stage (Narayanan et
al. SC21, as Megatron-LM orders it: rounds of p microbatches, warm-up 2 (p - r - 1) + (v - 1) p chunks).
A stage runs its operations in order; an operation waits for its input from the previous (next, for backward)
virtual stage plus the point-to-point transfer. Sends are asynchronous (as in Llama 3). The bubble is whatever
waiting comes out; the formula (p - 1) / (v m) is only used to test it.

SimPy is imported here and nowhere in engine/__init__.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import simpy

from .errors import UserError

Segment = tuple[str, float]          # (phase, seconds)
OpKey = tuple[str, int, int]         # ("F" | "B", chunk, microbatch)


@dataclass(frozen=True)
class StageRun:
    """What one stage did: its intervals (start, end, phase) from 0 to its last operation."""

    intervals: tuple[tuple[float, float, str], ...]
    end_s: float
    last_backward: tuple[tuple[float, float], ...]   # per chunk: (start, end) of its last backward


@dataclass(frozen=True)
class PipelineRun:
    stages: tuple[StageRun, ...]

    @property
    def end_s(self) -> float:
        return max(s.end_s for s in self.stages)


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


@lru_cache(maxsize=1024)
def order(schedule: str, p: int, v: int, m: int, rank: int) -> tuple[OpKey, ...]:
    """The operations stage `rank` runs, in order."""
    if schedule == "gpipe":
        return tuple([("F", 0, i) for i in range(m)] + [("B", 0, i) for i in range(m)])
    total = m * v
    if v == 1:
        warm = min(p - rank - 1, m)
    else:
        warm = min(2 * (p - rank - 1) + (v - 1) * p, total)

    def fwd(k: int) -> OpKey:
        return ("F", (k % (p * v)) // p, (k // (p * v)) * p + k % p) if v > 1 else ("F", 0, k)

    def bwd(k: int) -> OpKey:
        return ("B", v - 1 - (k % (p * v)) // p, (k // (p * v)) * p + k % p) if v > 1 else ("B", 0, k)

    ops = [fwd(k) for k in range(warm)]
    for j in range(total - warm):
        ops += [fwd(warm + j), bwd(j)]
    ops += [bwd(k) for k in range(total - warm, total)]
    return tuple(ops)


def peak_inflight(ops: Sequence[OpKey], chunk_bytes: Sequence[float]) -> float:
    """Largest activation memory the stage holds: a forward allocates its chunk's bytes, a backward frees them."""
    return max(itertools.accumulate((chunk_bytes[c] if kind == "F" else -chunk_bytes[c] for kind, c, _ in ops),
                                    initial=0.0))


@lru_cache(maxsize=256)
def _program(schedule: str, p: int, v: int, m: int) -> tuple[tuple[tuple[bool, int, int, int, int], ...], ...]:
    """Per stage, its operations in order as (backward, chunk, microbatch, op id, id of the op it waits for or -1).

    Ids number every operation of the step: ((kind * p + stage) * v + chunk) * m + microbatch.
    """
    def op_id(backward: bool, r: int, c: int, i: int) -> int:
        return (((p if backward else 0) + r) * v + c) * m + i

    def dependency(backward: bool, r: int, c: int, i: int) -> int:
        if not backward:
            if r > 0:
                return op_id(False, r - 1, c, i)
            return op_id(False, p - 1, c - 1, i) if c > 0 else -1
        if r < p - 1:
            return op_id(True, r + 1, c, i)
        return op_id(True, 0, c + 1, i) if c < v - 1 else -1

    return tuple(tuple((kind == "B", c, i, op_id(kind == "B", r, c, i), dependency(kind == "B", r, c, i))
                       for kind, c, i in order(schedule, p, v, m, r)) for r in range(p))


def simulate(schedule: str, p: int, v: int, m: int, fwd: Sequence[Sequence[Sequence[Segment]]],
             bwd: Sequence[Sequence[Sequence[Segment]]], send_fwd: Sequence[float],
             send_bwd: Sequence[float]) -> PipelineRun:
    """Run one step. fwd[r][c] / bwd[r][c]: segments of one microbatch of chunk c on stage r.

    send_fwd[r]: transfer time of activations out of stage r (to r + 1, or to stage 0 of the next chunk);
    send_bwd[r]: of gradients out of stage r (to r - 1, or to the last stage of the previous chunk).

    One SimPy process per stage, one timeout per operation: the wait for its input's transfer (when it has
    not arrived yet) and its segments. An operation whose producer has not finished yet first waits for an
    event the producer triggers when it does; an input already there costs no event. Each process keeps its
    own clock, adding exactly what SimPy's clock would add (waits, then the segments), so times do not
    depend on how SimPy rounds the sum of a wait and a run.
    """
    why = check(schedule, p, v, m)
    if why:
        raise UserError(why)
    program = _program(schedule, p, v, m)
    env = simpy.Environment()
    finished: list[float | None] = [None] * (2 * p * v * m)     # end time of every operation, once it ran
    waiting: dict[int, simpy.Event] = {}                        # op id -> event its (single) consumer waits on
    results: list[StageRun | None] = [None] * p

    def stage(r: int):  # type: ignore[no-untyped-def]
        intervals: list[tuple[float, float, str]] = []
        add = intervals.append
        segments = ([tuple(s for s in fwd[r][c] if s[1] > 0) for c in range(v)],
                    [tuple(s for s in bwd[r][c] if s[1] > 0) for c in range(v)])
        delays = (send_fwd[(r - 1) % p], send_bwd[(r + 1) % p])
        last_b: dict[int, tuple[float, float]] = {}
        now = env.now           # this stage's clock
        free = 0.0              # when its last operation finished
        for backward, c, i, op, dep in program[r]:
            if dep >= 0:
                produced = finished[dep]
                if produced is None:
                    event = waiting[dep] = env.event()
                    produced = yield event
                if produced > now:
                    now = produced
                arrive = produced + delays[backward]
                if arrive > now:
                    now += arrive - now                 # waiting for the transfer
                if now > free:
                    split = min(max(produced, free), now)
                    if split > free:
                        add((free, split, "bubble"))
                    if now > split:
                        add((split, now, "pp"))
            start = t = now
            for phase, dur in segments[backward][c]:
                add((t, t + dur, phase))
                t += dur
            now = free = start + (t - start)
            if backward and i == m - 1:
                last_b[c] = (start, free)
            finished[op] = free             # known from now on: its consumer need not wait for the event
            event = waiting.pop(op, None)
            if event is not None:
                event.succeed(free)
            yield env.timeout(max(0.0, free - env.now))
        results[r] = StageRun(tuple(intervals), free, tuple(last_b.get(c, (free, free)) for c in range(v)))

    for r in range(p):
        env.process(stage(r))
    env.run()
    if any(s is None for s in results):
        raise RuntimeError(f"pipeline schedule {schedule} p={p} v={v} m={m} deadlocked")
    return PipelineRun(tuple(s for s in results if s is not None))


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
