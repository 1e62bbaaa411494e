"""A sweep's points validated and estimated into their records, one point or a chunk of them (one task).

Each point is the base scenario's raw table with the point's values set (engine/sweep/space.py), validated by
the scenario loader (an invalid combination becomes a record with its "error") and then estimated. Whatever
runs the tasks (this process, the local pool, a Dask cluster) calls `run_chunk`, so the records are the same
bytes.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from ..config import scenario
from ..config.errors import UserError
from ..config.fields import Context
from ..config.overrides import apply
from ..config.scenario import Scenario
from ..model.estimate import estimate, to_json
from .results import Facts, Outcome, facts
from .space import Sweep

MAX_CHUNK = 256             # points per task: enough to amortize IPC, few enough to balance and to report
_JSON = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY


def estimate_json(s: Scenario) -> dict[str, Any]:
    """The default estimator: the performance model's `clustertop estimate --json` object.

    Without the StepPlan and the fit hint, which the JSON object does not hold (the figures are the same).
    """
    return to_json(estimate(s, plan=False, hints=False))


def evaluate(sweep: Sweep, index: int) -> Outcome:
    """Validate and estimate one point; never raises for a bad combination."""
    choice = sweep.choice(index)
    record: dict[str, Any] = {"index": index, "point": {a.key: v for a, v in zip(sweep.axes, choice)}}
    try:
        data = apply(sweep.base, [(a.path, v) for a, v in zip(sweep.axes, choice)])
        s = scenario.parse(data, Context(sweep.path), sweep.path, sweep.sections)
        result = (sweep.estimator or estimate_json)(s)
    except UserError as exc:
        return _error(record, "invalid", message(exc))
    except Exception as exc:  # noqa: BLE001  (a bug in the model must not sink a long sweep: its point tells)
        return _error(record, "failed", f"the estimator failed: {type(exc).__name__}: {message(exc)}")
    try:
        merged = {**record, **result}
        ranked = facts(merged)
        line = orjson.dumps(merged, option=_JSON)
    except Exception as exc:  # noqa: BLE001  (the same for a result of the wrong shape)
        return _error(record, "failed", f"the estimator returned a malformed result: {type(exc).__name__}: "
                      f"{message(exc)}")
    return Outcome(index, line, "ok", ranked)


def _error(record: dict[str, Any], status: str, text: str) -> Outcome:
    record["error"] = text
    return Outcome(record["index"], orjson.dumps(record, option=_JSON), status,
                   Facts(record["index"], "invalid"), reason=text)


def message(exc: BaseException) -> str:
    """An error's text on one line, without the file name a UserError starts with (all points share it)."""
    text = " ".join(str(exc).split())
    where = getattr(exc, "where", None)
    return text[len(where) + 2:] if where and text.startswith(f"{where}: ") else text


def run_chunk(sweep: Sweep, start: int, stop: int) -> list[Outcome]:
    """Points start..stop-1: one task of the pool or of a Dask cluster."""
    return [evaluate(sweep, i) for i in range(start, stop)]


def chunk_size(points: int, workers: int) -> int:
    """About 32 tasks per worker (heavy points cluster: small tasks balance them), at most MAX_CHUNK points
    each."""
    return max(1, min(MAX_CHUNK, math.ceil(points / (max(1, workers) * 32))), math.ceil(points / 100_000))


def ranges(points: int, chunk: int) -> list[tuple[int, int]]:
    """The tasks: (start, stop) of every chunk, in point order."""
    return [(a, min(a + chunk, points)) for a in range(0, points, chunk)]
