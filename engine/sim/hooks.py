"""What the run's parts see of it: narrow interfaces that engine/sim/run.py's Run implements.

As in SimPy (a small core, hook methods), a part of the run gets only what it uses, never the whole Run: the
simulated time (the SimPy environment), a way to write an event, a random stream of its own, and, for what
runs inside a job's process, the hooks that change what the job does (docs/events.md, "Extending the run").
The exception is a process added with Run.add_process: its factory is called with the Run itself.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import simpy

if TYPE_CHECKING:
    from .activity import Activity
    from .overrides import Override
    from .track import JobTrack


def rng(seed: int, name: str) -> np.random.Generator:
    """An independent, reproducible random stream per named process: adding a process, or drawing in another
    order, does not shift the others' draws."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


class Emit(Protocol):
    """Write a discrete event at the current simulated time (the steps that ended before it come first)."""

    def __call__(self, kind: str, **fields: Any) -> None: ...


class JobHooks(Protocol):
    """What runs inside a job's SimPy process (its lifecycle, a Perturbation) may do to the run."""

    env: simpy.Environment        # the time now, timeouts, events

    def emit(self, kind: str, **fields: Any) -> None:
        """An event now (Emit)."""

    def advance(self, t: float) -> None:
        """Write the steps that ended by t: the job's step and token counters are current."""

    def skip(self, delay: float) -> bool:
        """Pass a wait of `delay` at once when nothing else is due during it; False: nothing done (yield
        env.timeout(delay) instead). The same run either way."""

    def switch(self, track: JobTrack, activity: Activity) -> None:
        """From now on the job does `activity`."""

    def resume(self, track: JobTrack, step: int | None = None, tokens: int | None = None) -> None:
        """Train from now (from a checkpoint's step and tokens after a restart)."""

    def override(self, first: int, count: int, phase: str) -> Override:
        """Force a phase on GPUs [first, first + count) from now until clear_override."""

    def clear_override(self, item: Override) -> None:
        """End an override now."""

    def running_changed(self) -> None:
        """The job stopped or came back: the steps of the jobs that share its tiers change."""


class Perturbation(Protocol):
    """Something that interrupts a job (a checkpoint, a stall): runs inside the job's SimPy process, where it
    may switch, wait, emit and resume (Run.interrupt)."""

    def __call__(self, run: JobHooks, track: JobTrack) -> Generator[Any, Any, None]: ...
