"""A sweep on a Dask cluster (`--dask tcp://scheduler:8786`), through the public `distributed.Client` only.

The same chunks as the local pool (engine/sweep/evaluate.py), one task each, their results taken in order. The
scheduler must answer within DASK_TIMEOUT_S: a synchronous Client waits for a port that accepts and never
answers (a silent listener) for as long as it stays open, and one that fails half-way prints a traceback from
its __del__. So an asynchronous Client first connects under a deadline and is closed; only then is the
synchronous Client made. A bad address, a port that never answers and a server that is not a Dask scheduler
are one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from ..config import units
from ..config.errors import UserError
from .evaluate import chunk_size, message, ranges, run_chunk
from .results import Outcome
from .space import Sweep

DASK_TIMEOUT_S = 10.0


def run_dask(sweep: Sweep, address: str) -> Iterator[list[Outcome]]:
    """Outcomes in point order, a chunk at a time, computed by the cluster whose scheduler is at `address`."""
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
                   for a, b in ranges(sweep.size, chunk_size(sweep.size, threads))]
        for future in futures:
            try:
                chunk = future.result()
            except Exception as exc:  # noqa: BLE001  (whatever the remote side raised, as one line)
                raise UserError(f"--dask: a task failed on the cluster ({type(exc).__name__}: "
                                f"{message(exc)}); expected clustertop installed on every worker") from None
            future.release()
            yield chunk
    finally:
        client.close()


def _connect(client_class: Any, address: str) -> Any:
    """A Client of the scheduler at `address`, or one UserError within DASK_TIMEOUT_S."""
    try:
        asyncio.run(asyncio.wait_for(_reach(client_class, address), DASK_TIMEOUT_S))
    except ValueError as exc:            # raised before any connection: unknown scheme, no port...
        raise UserError(f"--dask: {address!r} is not a Dask scheduler address ({message(exc)}); expected "
                        "tcp://HOST:PORT") from None
    except Exception as exc:  # noqa: BLE001  (OSError, a reply the deserializer chokes on, MemoryError...)
        why = f"no answer in {units.seconds(DASK_TIMEOUT_S)}" if isinstance(exc, TimeoutError) else \
            message(exc)[:200] or type(exc).__name__
        raise UserError(f"--dask: cannot connect to the Dask scheduler at {address}: {why}; expected the "
                        "address of a running dask scheduler") from None
    try:
        return client_class(address, timeout=DASK_TIMEOUT_S, set_as_default=False)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"--dask: cannot connect to the Dask scheduler at {address}: "
                        f"{message(exc)}") from None


async def _reach(client_class: Any, address: str) -> None:
    """Connect an asynchronous Client to `address` (the scheduler answers who it is) and close it."""
    client = client_class(address, asynchronous=True, timeout=DASK_TIMEOUT_S, set_as_default=False)
    try:
        await client
    finally:
        await client.close()
