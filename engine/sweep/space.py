"""The design space of a sweep: a base scenario, the axes of `--vary KEY=V1,V2,...`, and its points.

Point `i` is the i-th combination in `itertools.product` order (the last axis varies fastest): the base
scenario's raw table with the point's values set, as the scenario loader takes it. dp is derived when it is
left out: see `_derive_rule` and docs/sweep.md. Nothing here imports the performance model: `clustertop
replay` (cli/commands/replay.py) rebuilds the scenario of a results file's point with `point_scenario`, to
run it in the dashboard, without loading the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import scenario
from ..config.errors import UserError
from ..config.fields import Context, Sections
from ..config.overrides import DELETE, Axis, Path, apply, parse_vary
from ..config.scenario import Scenario
from ..config.tomlfile import dumps, read_toml

Estimator = Callable[[Scenario], dict[str, Any]]
MAX_POINTS = 10_000_000
_GPU_KEYS = ("tp", "cp", "pp", "gpus")


@dataclass(frozen=True)
class Sweep:
    """Everything a worker needs to evaluate any point; small and picklable (the estimator by reference)."""
    path: str                     # the base scenario file
    name: str                     # the base scenario's name
    description: str
    source: dict[str, Any]        # the base scenario's raw table, as written
    base: dict[str, Any]          # the same with the derivation rule applied (dp dropped where it is derived)
    axes: tuple[Axis, ...]
    derived: tuple[str, ...]      # keys dropped from every point so the loader derives them ("jobs[0].dp")
    estimator: Estimator | None   # None: the performance model (engine/sweep/evaluate.py estimate_json)
    # the loader's memo of the tables every point shares with `base` (engine/config/fields.py memo_section)
    sections: Sections = field(default_factory=dict, compare=False, repr=False)

    @property
    def size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    def choice(self, index: int) -> tuple[Any, ...]:
        """The values of point `index` (mixed radix, last axis fastest)."""
        values = []
        for axis in reversed(self.axes):
            index, r = divmod(index, len(axis.values))
            values.append(axis.values[r])
        return tuple(reversed(values))

    def point(self, index: int) -> dict[str, Any]:
        return {a.key: v for a, v in zip(self.axes, self.choice(index))}

    def data(self, index: int) -> dict[str, Any]:
        """The raw scenario table of point `index`, as the loader takes it."""
        return apply(self.base, [(a.path, v) for a, v in zip(self.axes, self.choice(index))])


def plan(scenario_arg: str, vary: Sequence[str], estimator: Estimator | None = None) -> Sweep:
    """Load the base scenario and check every `--vary` flag before anything runs; UserError otherwise."""
    if not vary:
        raise UserError("sweep: expected at least one --vary KEY=V1,V2,... (e.g. --vary jobs[0].tp=4,8)")
    path = scenario.resolve_path(scenario_arg)
    data, text = read_toml(path)
    base = scenario.parse(data, Context(str(path), text), str(path))
    if isinstance(data.get("jobs"), dict):
        data = {**data, "jobs": [data["jobs"]]}
    axes: list[Axis] = []
    for flag in vary:
        axis = parse_vary(flag, data)
        if any(a.key == axis.key for a in axes):
            raise UserError(f"--vary {axis.key}: given twice; expected each key once (list all values in one "
                            "flag)")
        for other in axes:
            inner, outer = sorted((axis, other), key=lambda a: len(a.path))
            if outer.path[: len(inner.path)] == inner.path:
                raise UserError(f"--vary {outer.key}: {inner.key} is varied too; expected one or the other")
        axes.append(axis)
    size = math.prod(len(a.values) for a in axes)
    if size > MAX_POINTS:
        raise UserError(f"sweep: {size:,} points; expected at most {MAX_POINTS:,} (vary fewer values)")
    changes, derived = _derive_rule(data, base, {a.path for a in axes})
    return Sweep(path=str(path), name=base.name, description=base.description, source=data,
                 base=apply(data, changes), axes=tuple(axes), derived=tuple(derived), estimator=estimator)


def _derive_rule(data: dict[str, Any], base: Scenario,
                 varied: set[Path]) -> tuple[list[tuple[Path, Any]], list[str]]:
    """Which keys every point drops so that the loader derives dp = GPUs / (tp*cp*pp).

    For each job whose base sets dp, when the sweep varies its tp, cp, pp or gpus, or cluster.gpus, and does
    not vary its dp: dp is dropped. The job's GPU count then comes from the point's jobs[i].gpus when varied;
    otherwise a job that ran to the end of the base cluster takes the rest of the point's cluster (gpus
    dropped too), and any other job keeps the base's GPU count (gpus pinned), so jobs after it keep their
    place.
    """
    changes: list[tuple[Path, Any]] = []
    derived: list[str] = []
    for i, job in enumerate(base.jobs):
        raw = data["jobs"][i]
        triggered = ("cluster", "gpus") in varied or any(("jobs", i, k) in varied for k in _GPU_KEYS)
        if "dp" not in raw or ("jobs", i, "dp") in varied or not triggered:
            continue
        changes.append((("jobs", i, "dp"), DELETE))
        derived.append(f"jobs[{i}].dp")
        if ("jobs", i, "gpus") in varied:
            continue
        if job.first_gpu + job.gpus == base.cluster.gpus:
            if "gpus" in raw:
                changes.append((("jobs", i, "gpus"), DELETE))
                derived.append(f"jobs[{i}].gpus")
        else:
            changes.append((("jobs", i, "gpus"), job.gpus))
    return changes, derived


def point_scenario(scenario_arg: str, point: dict[str, Any]) -> tuple[Scenario, dict[str, Any]]:
    """The scenario of one point (a record's "point") on its base, built and checked as the sweep built it,
    and the raw table it was loaded from (what a TOML file of the point holds): what a results table's row
    runs. UserError when the base or the point is not valid."""
    flags = [f"{key}={_token(value)}" for key, value in point.items()]
    sw = plan(scenario_arg, flags)
    data = sw.data(0)
    return scenario.parse(data, Context(sw.path), sw.path), data


def _token(value: Any) -> str:
    """A point's value as `--vary` writes it (TOML-like: true, 4, 1.5, "text")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def best_scenario(sweep: Sweep, index: int, objective: str) -> str:
    """TOML text of point `index`, ranked first by `objective`, as a ready scenario: the base file's keys, the
    point's values, dp and gpus resolved."""
    choice = sweep.choice(index)
    varied = {a.path for a in sweep.axes}
    data = apply(sweep.source, [(a.path, v) for a, v in zip(sweep.axes, choice)])
    resolved = scenario.parse(sweep.data(index), Context(sweep.path), sweep.path)
    pinned: list[tuple[Path, Any]] = []
    for i, job in enumerate(resolved.jobs):
        for key in ("dp", "gpus"):
            if key in data["jobs"][i] and ("jobs", i, key) not in varied:
                pinned.append((("jobs", i, key), getattr(job, key)))
    values = ", ".join(f"{a.key} = {v}" for a, v in zip(sweep.axes, choice))
    data = apply(data, [*pinned, (("name",), f"{sweep.name}-sweep-best"),
                        (("description",), f"Best of a {sweep.size:,}-point sweep of {sweep.name} by "
                                           f"{objective} ({values}). {sweep.description}".strip())])
    header = (f"Written by `clustertop sweep`: point {index} of {sweep.size:,} from {sweep.path},\n"
              f"ranked first by {objective}. Comments of the base file are not kept.")
    return dumps(data, header)


def point_label(sweep: Sweep, index: int) -> str:
    return ", ".join(f"{a.key}={v}" for a, v in zip(sweep.axes, sweep.choice(index)))
