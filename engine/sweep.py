"""Design-space sweeps: the cross product of scenario values, each point validated, estimated and ranked.

A sweep is a base scenario plus axes (`--vary KEY=V1,V2,...`). Point `i` is the i-th combination in
`itertools.product` order (the last axis varies fastest). Each point is the base scenario's raw table with the
point's values set, validated by the scenario loader (an invalid combination becomes a record with its
"error") and then estimated. Results come back in point order whatever runs them (in process, a local process
pool, a Dask cluster), as JSON Lines records that are byte-identical either way.

dp is derived when it is left out: see `_derive_rule` and docs/sweep.md.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import multiprocessing
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from .config import scenario
from .config.errors import UserError
from .config.fields import Context
from .config.overrides import DELETE, Axis, Path, apply, parse_vary
from .config.scenario import Scenario
from .config.tomlfile import dumps, read_toml
from .model.estimate import estimate, to_json
from .stream.sweep_records import RANKS, RATE_PER_GPU, STEP_TIME, Facts, facts, fit_key, objective, oom_key

Estimator = Callable[[Scenario], dict[str, Any]]
MAX_POINTS = 10_000_000
MAX_CHUNK = 256             # points per task: large enough to amortize IPC, small enough to balance and report
DASK_TIMEOUT_S = 10.0
_JSON = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY
_GPU_KEYS = ("tp", "cp", "pp", "gpus")
_NUMBER = re.compile(r"\d[\d,._]*")


def estimate_json(s: Scenario) -> dict[str, Any]:
    """The default estimator: the performance model's `clustertop estimate --json` object.

    Without the StepPlan and the fit hint, which the JSON object does not hold (the figures are the same).
    """
    return to_json(estimate(s, plan=False, hints=False))


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
    estimator: Estimator
    # the loader's memo of the tables every point shares with `base` (engine/config/scenario.py _section)
    sections: scenario.Sections = field(default_factory=dict, compare=False, repr=False)

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
            raise UserError(f"--vary {axis.key}: given twice; expected each key once (list all values in one flag)")
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
                 base=apply(data, changes), axes=tuple(axes), derived=tuple(derived),
                 estimator=estimator or estimate_json)


def point_scenario(scenario_arg: str, point: dict[str, Any]) -> Scenario:
    """The scenario of one point (a record's "point") on its base, as the sweep built it: what a result row runs."""
    flags = [f"{key}={_token(value)}" for key, value in point.items()]
    sw = plan(scenario_arg, flags, estimate_json)
    return scenario.parse(sw.data(0), Context(sw.path), sw.path)


def _token(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _derive_rule(data: dict[str, Any], base: Scenario, varied: set[Path]) -> tuple[list[tuple[Path, Any]], list[str]]:
    """Which keys every point drops so that the loader derives dp = GPUs / (tp*cp*pp).

    For each job whose base sets dp, when the sweep varies its tp, cp, pp or gpus, or cluster.gpus, and does
    not vary its dp: dp is dropped. The job's GPU count then comes from the point's jobs[i].gpus when varied;
    otherwise a job that ran to the end of the base cluster takes the rest of the point's cluster (gpus dropped
    too), and any other job keeps the base's GPU count (gpus pinned), so jobs after it keep their place.
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


@dataclass(frozen=True, slots=True)
class Outcome:
    """One evaluated point: its JSON Lines record and its ranking facts (engine/stream/sweep_records.py)."""
    index: int
    line: bytes                   # the record, newline included
    status: str                   # "ok" | "invalid" (the loader or the model refused it) | "failed" (a bug)
    facts: Facts
    reason: str = ""              # the error of an invalid or failed point

    @property
    def fits(self) -> bool:
        return self.facts.fits


def evaluate(sweep: Sweep, index: int) -> Outcome:
    """Validate and estimate one point; never raises for a bad combination."""
    choice = sweep.choice(index)
    record: dict[str, Any] = {"index": index, "point": {a.key: v for a, v in zip(sweep.axes, choice)}}
    try:
        data = apply(sweep.base, [(a.path, v) for a, v in zip(sweep.axes, choice)])
        s = scenario.parse(data, Context(sweep.path), sweep.path, sweep.sections)
        result = sweep.estimator(s)
    except UserError as exc:
        return _error(record, "invalid", _message(exc))
    except Exception as exc:  # noqa: BLE001  (a bug in the model must not sink a long sweep: the point records it)
        return _error(record, "failed", f"the estimator failed: {type(exc).__name__}: {_message(exc)}")
    try:
        merged = {**record, **result}
        ranked = facts(merged)
        line = orjson.dumps(merged, option=_JSON)
    except Exception as exc:  # noqa: BLE001  (the same for a result of the wrong shape)
        return _error(record, "failed", f"the estimator returned a malformed result: {type(exc).__name__}: "
                      f"{_message(exc)}")
    return Outcome(index, line, "ok", ranked)


def _error(record: dict[str, Any], status: str, message: str) -> Outcome:
    record["error"] = message
    return Outcome(record["index"], orjson.dumps(record, option=_JSON), status, Facts(record["index"], "invalid"),
                   reason=message)


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    where = getattr(exc, "where", None)
    return text[len(where) + 2:] if where and text.startswith(f"{where}: ") else text


def run_chunk(sweep: Sweep, start: int, stop: int) -> list[Outcome]:
    """Points start..stop-1: one task of a pool or a Dask cluster."""
    return [evaluate(sweep, i) for i in range(start, stop)]


# ---- running: in process, on a local process pool, on a Dask cluster -----------------------------------------

def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def chunk_size(points: int, workers: int) -> int:
    """About 32 tasks per worker (heavy points cluster: small tasks balance them), at most MAX_CHUNK points each."""
    return max(1, min(MAX_CHUNK, math.ceil(points / (max(1, workers) * 32))), math.ceil(points / 100_000))


def _ranges(points: int, chunk: int) -> list[tuple[int, int]]:
    return [(a, min(a + chunk, points)) for a in range(0, points, chunk)]


def run(sweep: Sweep, workers: int | None = None, dask: str | None = None) -> Iterator[list[Outcome]]:
    """Outcomes in point order, a chunk at a time."""
    if dask is not None:
        yield from _run_dask(sweep, dask)
        return
    workers = workers or available_cpus()
    if workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")
    ranges = _ranges(sweep.size, chunk_size(sweep.size, workers))
    processes = min(workers, len(ranges))
    if processes <= 1:
        for start, stop in ranges:
            yield run_chunk(sweep, start, stop)
        return
    # fork costs milliseconds and inherits the loaded catalogs and model; it is unsafe once threads exist
    method = "fork" if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods() \
        else "spawn"
    with multiprocessing.get_context(method).Pool(processes, initializer=_init_worker, initargs=(sweep,)) as pool:
        yield from pool.imap(_pool_chunk, ranges)


_WORKER_SWEEP: Sweep | None = None


def _init_worker(sweep: Sweep) -> None:
    global _WORKER_SWEEP
    _WORKER_SWEEP = sweep
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C stops the parent, which ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool ends its workers with SIGTERM: quietly, whatever the
    #                                                parent's handler (cli/signals.py)
    _end_with_parent()
    from .config import catalog
    catalog.gpus(), catalog.fabrics(), catalog.models()   # once per worker (already there after a fork)


def _end_with_parent() -> None:
    """Linux: SIGTERM this worker when its parent dies (even of SIGKILL), instead of leaving it to compute on and
    print a BrokenPipeError traceback when it hands in its next chunk."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pool_chunk(bounds: tuple[int, int]) -> list[Outcome]:
    assert _WORKER_SWEEP is not None
    return run_chunk(_WORKER_SWEEP, *bounds)


def _run_dask(sweep: Sweep, address: str) -> Iterator[list[Outcome]]:
    try:
        from distributed import Client
    except ImportError:
        raise UserError("--dask needs the optional packages dask and distributed: "
                        "pip install 'clustertop[cluster]'") from None
    client = _connect(Client, address)
    try:
        threads = sum(client.nthreads().values()) or 1
        [remote] = client.scatter([sweep], broadcast=True)
        futures = [client.submit(run_chunk, remote, a, b, pure=False)
                   for a, b in _ranges(sweep.size, chunk_size(sweep.size, threads))]
        for future in futures:
            try:
                chunk = future.result()
            except Exception as exc:  # noqa: BLE001  (whatever the remote side raised, as one line)
                raise UserError(f"--dask: a task failed on the cluster ({type(exc).__name__}: {_message(exc)}); "
                                "expected clustertop installed on every worker") from None
            future.release()
            yield chunk
    finally:
        client.close()


def _connect(client_class: Any, address: str) -> Any:
    """A Client of the scheduler at `address`, or one UserError within DASK_TIMEOUT_S. A bad address is refused at
    once; then the scheduler is asked who it is, with a deadline, before a Client is made: a port that accepts and
    never answers (a silent listener, an HTTP server) held the Client's own handshake for minutes, and a Client
    that fails half-way blocks the exit for twice its timeout and prints a traceback from its __del__."""
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if not location:
            raise ValueError("no host:port")
    except ValueError as exc:
        raise UserError(f"--dask: {address!r} is not a Dask scheduler address ({_message(exc)}); expected "
                        "tcp://HOST:PORT") from None
    try:
        identity = asyncio.run(asyncio.wait_for(_identity(address), DASK_TIMEOUT_S))
    except TimeoutError:
        identity = f"no answer in {DASK_TIMEOUT_S:g} s"
    except Exception as exc:  # noqa: BLE001  (OSError, a garbled reply the deserializer chokes on...)
        identity = _message(exc)[:200] or type(exc).__name__
    if not isinstance(identity, dict) or identity.get("type") != "Scheduler":
        why = identity if isinstance(identity, str) else "the reply is not a Dask scheduler's"
        raise UserError(f"--dask: cannot connect to the Dask scheduler at {address}: {why}; expected the address of "
                        "a running dask scheduler")
    try:
        return client_class(address, timeout=DASK_TIMEOUT_S, set_as_default=False)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--dask: cannot connect to the Dask scheduler at {address}: {_message(exc)}") from None


async def _identity(address: str) -> Any:
    """The scheduler's answer to "identity" (its type, id, workers), over one connection."""
    from distributed.comm import connect

    comm = await connect(address, timeout=DASK_TIMEOUT_S)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


# ---- ranking (the keys are engine/stream/sweep_records.py's, shared with the dashboard's table) -----------------

class _Best:
    """The n smallest keys seen, with their outcomes (a bounded max-heap)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.heap: list[tuple[tuple[float, ...], Outcome]] = []

    def add(self, key: tuple[float, ...], outcome: Outcome) -> None:
        item = (tuple(-k for k in key), outcome)
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, item)
        elif item[0] > self.heap[0][0]:
            heapq.heapreplace(self.heap, item)

    def sorted(self) -> list[Outcome]:
        return [o for _, o in sorted(self.heap, reverse=True)]


class Ranking:
    """Counts, reasons and the best points of a sweep, fed one outcome at a time in point order, ranked as
    engine/stream/sweep_records.py says (the best `top` of each kind are kept). `rank`: a key of RANKS to rank
    the fitting points by (None: step time, or tokens/s per GPU once their shapes differ)."""

    def __init__(self, top: int, rank: str | None = None) -> None:
        self.top = max(1, top)
        self.chosen = RANKS[rank] if rank is not None else None
        self._by_chosen = _Best(self.top)
        self.total = self.fit = self.oom = self.invalid = self.failed = 0
        self.reasons: dict[str, list[Any]] = {}     # message with numbers masked -> [count, first message]
        self.failures: list[str] = []               # the first few estimator failures
        self._by_step = _Best(self.top)
        self._by_rate = _Best(self.top)
        self._oom = _Best(self.top)
        self._first: Facts | None = None            # the first fitting point
        self._varied = False                        # some fitting point has another shape

    def add(self, o: Outcome) -> None:
        self.total += 1
        if o.status == "invalid":
            self.invalid += 1
            entry = self.reasons.setdefault(_NUMBER.sub("#", o.reason), [0, o.reason])
            entry[0] += 1
        elif o.status == "failed":
            self.failed += 1
            if len(self.failures) < 3:
                self.failures.append(o.reason)
        elif o.fits:
            self.fit += 1
            if self._first is None:
                self._first = o.facts
            elif not self._varied:
                self._varied = not o.facts.same_shape(self._first)
            if self.chosen is not None:
                self._by_chosen.add(fit_key(o.facts, self.chosen), o)
                return
            self._by_step.add(fit_key(o.facts, STEP_TIME), o)
            self._by_rate.add(fit_key(o.facts, RATE_PER_GPU), o)
        else:
            self.oom += 1
            self._oom.add(oom_key(o.facts), o)

    @property
    def objective(self) -> str:
        return self.chosen if self.chosen is not None else objective(self._varied)

    def best(self, n: int | None = None) -> list[Outcome]:
        """The best n points (default: top), fitting ones first."""
        fitting = self._by_chosen if self.chosen is not None else \
            self._by_step if self.objective == STEP_TIME else self._by_rate
        return (fitting.sorted() + self._oom.sorted())[: self.top if n is None else n]

    def reason_summary(self) -> list[tuple[int, str]]:
        """(count, first message) per kind of invalid point (messages alike but for numbers), most frequent first."""
        return sorted(((c, m) for c, m in self.reasons.values()), key=lambda r: (-r[0], r[1]))


def sweep_to(sweep: Sweep, sink: IO[bytes] | None = None, top: int = 10, workers: int | None = None,
             dask: str | None = None, progress: Callable[[Ranking], None] | None = None,
             rank: str | None = None) -> Ranking:
    """Run the sweep, writing every record to `sink` in point order (flushed per chunk); rank as it goes (by
    `rank`, a key of RANKS, when given)."""
    ranking = Ranking(top, rank)
    chunks = run(sweep, workers, dask)
    try:
        for chunk in chunks:
            for outcome in chunk:
                ranking.add(outcome)
            if sink is not None:
                sink.write(b"".join(o.line for o in chunk))
                sink.flush()
            if progress is not None:
                progress(ranking)
    finally:
        chunks.close()        # a failed write (a full disk) ends the pool now, not when the generator is collected
    return ranking


def best_scenario(sweep: Sweep, outcome: Outcome, ranking: Ranking) -> str:
    """TOML text of a point as a ready scenario: the base file's keys, the point's values, resolved dp/gpus."""
    choice = sweep.choice(outcome.index)
    varied = {a.path for a in sweep.axes}
    data = apply(sweep.source, [(a.path, v) for a, v in zip(sweep.axes, choice)])
    resolved = scenario.parse(sweep.data(outcome.index), Context(sweep.path), sweep.path)
    pinned: list[tuple[Path, Any]] = []
    for i, job in enumerate(resolved.jobs):
        for key in ("dp", "gpus"):
            if key in data["jobs"][i] and ("jobs", i, key) not in varied:
                pinned.append((("jobs", i, key), getattr(job, key)))
    values = ", ".join(f"{a.key} = {v}" for a, v in zip(sweep.axes, choice))
    data = apply(data, [*pinned, (("name",), f"{sweep.name}-sweep-best"),
                        (("description",), f"Best of a {sweep.size:,}-point sweep of {sweep.name} by "
                                           f"{ranking.objective} ({values}). {sweep.description}".strip())])
    header = (f"Written by `clustertop sweep`: point {outcome.index} of {sweep.size:,} from {sweep.path},\n"
              f"ranked first by {ranking.objective}. Comments of the base file are not kept.")
    return dumps(data, header)


def point_label(sweep: Sweep, index: int) -> str:
    return ", ".join(f"{a.key}={v}" for a, v in zip(sweep.axes, sweep.choice(index)))


__all__ = ["Estimator", "Outcome", "Ranking", "Sweep", "best_scenario", "estimate_json", "evaluate", "plan",
           "point_label", "point_scenario", "run", "run_chunk", "sweep_to"]
