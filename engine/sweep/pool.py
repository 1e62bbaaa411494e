"""The local process pool of a sweep: one process per worker, each with a pipe of its own; tasks handed out as
workers finish, results given back in point order.

Not multiprocessing.Pool: its workers share one task queue and one result queue, each behind a lock between
processes, and Pool.terminate() needs both. It put its end-of-results marker on the result queue before it
ended the workers, so a worker half-way through writing a result larger than the pipe (a chunk of records is
100 kB and more) when the result thread had stopped reading held the queue's lock forever: the sweep hung on
SIGTERM or Ctrl-C, its workers alive and holding the terminal's stderr. A worker killed while it held a lock
(a SIGTERM to the whole process group, the OOM killer) hung it the same way, and a task it had taken was never
done. Here nothing is shared: ending the pool is SIGTERM to each worker and a join, and a worker that dies is
an error, not a hang.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, cast

from ..config.errors import UserError
from .evaluate import run_chunk
from .results import Outcome
from .signals import held, worker_ready
from .space import Sweep

IN_FLIGHT = 2               # tasks a worker holds: it starts the next while the parent takes the last result
JOIN_S = 5.0                # a worker that has not died this long after SIGTERM is killed


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def run_pool(sweep: Sweep, tasks: list[tuple[int, int]], processes: int) -> Iterator[list[Outcome]]:
    """The outcomes of each task (start, stop), in task order, computed by `processes` worker processes."""
    # fork costs milliseconds and inherits the loaded catalogs and model; it is unsafe once threads exist
    method = "fork" if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods() \
        else "spawn"
    context: Any = multiprocessing.get_context(method)
    workers: list[tuple[BaseProcess, Connection]] = []
    try:
        with held():                        # a signal here is lost in os.fork, or reaches a worker too early
            for _ in range(processes):
                ours, theirs = context.Pipe()
                process = context.Process(target=_work, args=(sweep, theirs, ours, os.getpid()), daemon=True)
                process.start()
                theirs.close()
                workers.append((process, ours))
        yield from _dispatch(tasks, workers)
    finally:
        with held():
            _stop(workers)


def _dispatch(tasks: list[tuple[int, int]], workers: list[tuple[BaseProcess, Connection]]
              ) -> Iterator[list[Outcome]]:
    """Hand out tasks as workers finish (at most IN_FLIGHT each) and yield their results in task order."""
    todo = iter(enumerate(tasks))
    owner = {conn: process for process, conn in workers}
    taken: dict[Connection, deque[int]] = {conn: deque() for conn in owner}
    done: dict[int, list[Outcome]] = {}

    def hand_out(conn: Connection) -> None:
        while len(taken[conn]) < IN_FLIGHT and (task := next(todo, None)) is not None:
            try:
                conn.send(task[1])
            except OSError:
                raise UserError(_died(owner[conn])) from None
            taken[conn].append(task[0])

    for conn in owner:
        hand_out(conn)
    for position in range(len(tasks)):
        while position not in done:
            for ready in wait([c for c, queue in taken.items() if queue]):
                conn = cast(Connection, ready)
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    raise UserError(_died(owner[conn])) from None
                done[taken[conn].popleft()] = result
                hand_out(conn)
        yield done.pop(position)


def _died(process: BaseProcess) -> str:
    process.join(JOIN_S)
    code = process.exitcode
    how = f"exit code {code}"
    if code is not None and code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    return (f"sweep: worker process {process.pid} died with points to run ({how}); expected it to run to "
            "the end")


def _stop(workers: list[tuple[BaseProcess, Connection]]) -> None:
    """End every worker (idle or not: nothing is shared, so none is cut in a bad place) and wait for them."""
    for process, _ in workers:
        if process.exitcode is None:
            process.terminate()
    for process, conn in workers:
        process.join(JOIN_S)
        if process.exitcode is None:
            process.kill()
            process.join()
        conn.close()


def _work(sweep: Sweep, conn: Connection, parents: Connection, parent: int) -> None:
    """A worker: tasks from `conn`, each answered with its outcomes, until the parent ends it."""
    worker_ready(parent)
    parents.close()                         # the parent's end of the pipe, inherited (fork) or passed (spawn)
    from ..config import catalog

    catalog.gpus(), catalog.fabrics(), catalog.models()   # once per worker (already there after a fork)
    while True:
        try:
            start, stop = conn.recv()
        except (EOFError, ConnectionResetError):    # the parent closed the pipe or died: nothing more to do
            return
        outcomes = run_chunk(sweep, start, stop)
        try:
            conn.send(outcomes)
        except (BrokenPipeError, ConnectionResetError):
            # the parent died (SIGKILL) while this chunk ran: nobody reads it, and the SIGTERM its death sends
            # (PR_SET_PDEATHSIG) may come after this, so end quietly here, not with a traceback on its stderr
            return
