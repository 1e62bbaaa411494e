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

from dataclasses import dataclass

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


def order(schedule: str, p: int, v: int, m: int, rank: int) -> list[OpKey]:
    """The operations stage `rank` runs, in order."""
    if schedule == "gpipe":
        return [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in range(m)]
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
    return ops


def peak_inflight(ops: list[OpKey], chunk_bytes: list[float]) -> float:
    """Largest activation memory the stage holds: a forward allocates its chunk's bytes, a backward frees them."""
    held = peak = 0.0
    for kind, chunk, _ in ops:
        if kind == "F":
            held += chunk_bytes[chunk]
            peak = max(peak, held)
        else:
            held -= chunk_bytes[chunk]
    return peak


def simulate(schedule: str, p: int, v: int, m: int, fwd: list[list[list[Segment]]],
             bwd: list[list[list[Segment]]], send_fwd: list[float], send_bwd: list[float]) -> PipelineRun:
    """Run one step. fwd[r][c] / bwd[r][c]: segments of one microbatch of chunk c on stage r.

    send_fwd[r]: transfer time of activations out of stage r (to r + 1, or to stage 0 of the next chunk);
    send_bwd[r]: of gradients out of stage r (to r - 1, or to the last stage of the previous chunk).
    """
    why = check(schedule, p, v, m)
    if why:
        raise UserError(why)
    env = simpy.Environment()
    done: dict[tuple[str, int, int, int], simpy.Event] = {}
    for r in range(p):
        for c in range(v):
            for i in range(m):
                done[("F", r, c, i)] = env.event()
                done[("B", r, c, i)] = env.event()
    results: list[StageRun | None] = [None] * p

    def dependency(kind: str, r: int, c: int, i: int) -> tuple[simpy.Event, float] | None:
        if kind == "F":
            if r > 0:
                return done[("F", r - 1, c, i)], send_fwd[r - 1]
            if c > 0:
                return done[("F", p - 1, c - 1, i)], send_fwd[p - 1]
            return None
        if r < p - 1:
            return done[("B", r + 1, c, i)], send_bwd[r + 1]
        if c < v - 1:
            return done[("B", 0, c + 1, i)], send_bwd[0]
        return None

    def stage(r: int):  # type: ignore[no-untyped-def]
        intervals: list[tuple[float, float, str]] = []
        last_b: dict[int, tuple[float, float]] = {}
        free = 0.0
        for kind, c, i in order(schedule, p, v, m, r):
            dep = dependency(kind, r, c, i)
            if dep is not None:
                event, delay = dep
                produced = yield event
                arrive = produced + delay
                if arrive > env.now:
                    yield env.timeout(arrive - env.now)
                if env.now > free:
                    split = min(max(produced, free), env.now)
                    if split > free:
                        intervals.append((free, split, "bubble"))
                    if env.now > split:
                        intervals.append((split, env.now, "pp"))
            start = env.now
            segs = fwd[r][c] if kind == "F" else bwd[r][c]
            t = start
            for phase, dur in segs:
                if dur > 0:
                    intervals.append((t, t + dur, phase))
                    t += dur
            yield env.timeout(t - start)
            if kind == "B" and i == m - 1:
                last_b[c] = (start, env.now)
            free = env.now
            done[(kind, r, c, i)].succeed(env.now)
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
