"""Signals the command line ends on quietly: Ctrl-C while Python is still importing, SIGTERM during a sweep.

Both end the process with the shell's code for the signal (130, 143) and no traceback. A sweep's local workers
are ended by their pool when the parent leaves it, and die of SIGTERM quietly whatever the parent's handler is
(engine/sweep/signals.py sets theirs), so none of them prints a BrokenPipeError from a parent that is gone.
"""

from __future__ import annotations

import _signal  # the C module: `signal` imports enum, operator, collections (10 ms of imports)
import sys

INTERRUPTED: int = 128 + _signal.SIGINT


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def quiet_until_main() -> None:
    """Ctrl-C during the imports before main() runs exits with 130 instead of a KeyboardInterrupt traceback
    from whichever module was loading (main() puts Python's own handler back)."""
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _exit)


def interrupts_as_usual() -> None:
    """Python's handler again: Ctrl-C raises KeyboardInterrupt, which the commands clean up after."""
    if _signal.getsignal(_signal.SIGINT) is _exit:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


class terminate_quietly:
    """SIGTERM inside the block raises SystemExit(143) in the main thread, so the block's cleanup runs (a pool
    terminates its workers, the output is closed after its last complete record) and nothing is printed."""

    def __enter__(self) -> None:
        try:
            self.previous = _signal.signal(_signal.SIGTERM, _exit)
        except ValueError:                   # not the main thread: leave signals alone
            self.previous = None

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            _signal.signal(_signal.SIGTERM, self.previous)
        sys.stderr.flush()
