"""A job's wait passed at once when nothing else can happen during it: no SimPy event for it.

A site's job waits a few steps, checkpoints, waits again, ~17,500 times in the flagship's 54 days; each wait
is a timeout event (two with the job's wake, engine/sim/lifecycle.py's `_until`), and each change of what its
GPUs draw one more (the site's look at its level once the instant is done, engine/sim/site_power.py). When the
run's event queue holds nothing at or before the wait's end but that look, SimPy would do exactly this: the
look (it is the first event), then the job's wake-up at the wait's end, with nothing in between. `skip` does
the same in place: it takes the look out of the queue and runs it, then sets the time to the wait's end (the
same float SimPy computes: now + delay). Anything else due by then (a sample, a fault, another job, an
interrupt, the end of the run, a live run's pause) and the job waits as usual.

It reads SimPy's queue (a heap of (time, priority, event id, event)) and sets its clock: simpy 4's
`Environment._queue` and `_now`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import simpy


def skip(env: simpy.Environment, delay: float, horizon: float, pending: simpy.Event | None,
         look: Callable[[], None]) -> bool:
    """Move the time on by `delay` now if nothing but `pending` (run first, by `look`) is due by then and
    the end is at most `horizon`; False (nothing done): wait with a timeout."""
    queue = getattr(env, "_queue", None)
    if queue is None:                       # not the SimPy this was written for: wait
        return False
    end = env._now + delay
    if not end <= horizon:
        return False
    if pending is None:
        if queue and not end < queue[0][0]:
            return False
    else:                                   # the look first, then nothing up to the end (the heap's root's
        if not queue or queue[0][3] is not pending:                  # children are the next smallest)
            return False
        n = len(queue)
        if (n > 1 and not end < queue[1][0]) or (n > 2 and not end < queue[2][0]):
            return False
        heapq.heappop(queue)
        look()
    env._now = end
    return True
