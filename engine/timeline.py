"""The contract between the cost model and the engine run: one training step of one representative replica.

The cost model (engine/estimate.py) produces a StepPlan; the engine run repeats it over simulated time and
broadcasts each pipeline stage's timeline to every GPU of that stage (all DP replicas behave the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Interval:
    start_s: float     # from the start of the step
    end_s: float
    phase: str         # a name from engine.phases.PHASES


@dataclass(frozen=True)
class StepPlan:
    step_time_s: float
    # stages[p] is the timeline of pipeline stage p: contiguous, non-overlapping intervals covering
    # [0, step_time_s]. Every GPU of stage p follows it.
    stages: tuple[tuple[Interval, ...], ...]
    # Mean load (0..1 of the tier's capacity) each link tier carries over the step, per tier name.
    tier_load: dict[str, float] = field(default_factory=dict)
    # Busy periods per tier within the step: (start_s, end_s, load 0..1). Optional; tier_load is the mean.
    tier_busy: dict[str, tuple[tuple[float, float, float], ...]] = field(default_factory=dict)
    tokens: int = 0
    model_flops: float = 0.0       # per step, whole job (model FLOPs: no recomputation)
