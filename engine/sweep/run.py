"""Running a sweep: its chunks in point order, whatever computes them (this process, the local pool, a Dask
cluster), written to a sink and ranked as they come."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Protocol

from ..config.errors import UserError
from .evaluate import chunk_size, ranges, run_chunk
from .pool import available_cpus, run_pool
from .results import Outcome, Ranking, Slo
from .space import Sweep


class RecordSink(Protocol):
    """Where a sweep's records go: a binary file, stdout's buffer, or cli/commands/sweep.py's gzip stream."""

    def write(self, data: bytes, /) -> object: ...
    def flush(self) -> None: ...


def run(sweep: Sweep, workers: int | None = None,
        dask: str | None = None) -> Generator[list[Outcome], None, None]:
    """Outcomes in point order, a chunk at a time."""
    if dask is not None:
        from .dask_cluster import run_dask

        yield from run_dask(sweep, dask)
        return
    tasks, count = _local(sweep, workers)
    if count <= 1:
        for start, stop in tasks:
            yield run_chunk(sweep, start, stop)
        return
    yield from run_pool(sweep, tasks, count)


def processes(sweep: Sweep, workers: int | None) -> int:
    """How many processes compute a local run with `workers` (None: one per CPU): at most one per task."""
    return _local(sweep, workers)[1]


def _local(sweep: Sweep, workers: int | None) -> tuple[list[tuple[int, int]], int]:
    workers = workers or available_cpus()
    if workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")
    tasks = ranges(sweep.size, chunk_size(sweep.size, workers))
    return tasks, min(workers, len(tasks))


def sweep_to(sweep: Sweep, sink: RecordSink | None = None, top: int = 10, workers: int | None = None,
             dask: str | None = None, progress: Callable[[Ranking], None] | None = None,
             rank: str | None = None, slo: Slo | None = None) -> Ranking:
    """Run the sweep, writing every record to `sink` in point order (flushed per chunk); rank as it goes (by
    `rank`, a key of RANKS, when given; only the points that meet `slo`, when given)."""
    ranking = Ranking(top, rank, slo)
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
        chunks.close()        # a failed write (a full disk) ends the pool now, not when the generator goes
    return ranking
