"""How a sweep's pool and its workers meet SIGINT and SIGTERM (cli/signals.py turns them into exit codes).

The parent turns them into exceptions at any bytecode (KeyboardInterrupt, and SystemExit(143) under
cli/signals.py's `terminate_quietly`), which end the pool and close the output after its last complete record.
Some steps must not be cut: starting a worker (a signal inside `os.fork` is swallowed by the fork hooks, with
a traceback, and the sweep runs on) and compressing a chunk of records (a gzip stream cut between its data and
its checksum is unreadable: cli/commands/sweep.py). `held()` makes signals wait for the end of such a block. A
worker ignores SIGINT (Ctrl-C reaches the whole process group; the parent ends the pool), dies of SIGTERM at
once, and gets SIGTERM when its parent dies, so it never outlives the sweep holding the terminal's stderr.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ENDING = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as they would have. Blocked for this thread (so
    processes started inside the block inherit them blocked, until `worker_ready`), and caught by a handler
    that only notes them when another thread of the process receives them. Outside the main thread: nothing
    to hold."""
    if threading.current_thread() is not threading.main_thread() or \
            any(signal.getsignal(sig) is None for sig in ENDING):     # a handler not from Python: left alone
        yield
        return
    caught: list[int] = []
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in ENDING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)     # a pending signal runs its own handler now
        for signum in caught[:1]:
            signal.raise_signal(signum)


def worker_ready(parent: int) -> None:
    """In a worker, first thing: SIGINT ignored, SIGTERM ends it at once whatever its parent's handler was,
    and SIGTERM when the parent dies (Linux); then signals held since the start are let through."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _end_with_parent()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING)
    if os.getppid() != parent:            # the parent died before the line above: nobody reads the results
        os.kill(os.getpid(), signal.SIGTERM)


def _end_with_parent() -> None:
    """Linux: SIGTERM this process when its parent dies (even of SIGKILL), not leave it to compute on."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
