"""The clustertop command in a child Python process with stand-ins of tests/fakes set in first (the fake
planner instead of the cost model, a fake estimator instead of the performance model), for the tests that need
a process of its own: pipes, signals, a killed recorder, a sweep whose worker dies."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

TESTS = str(Path(__file__).resolve().parent.parent)

# argv: the tests folder (where `fakes` is), each replacement as module.attribute=module.function, "--", then
# the command's arguments.
SCRIPT = """\
import importlib, sys
sys.path.insert(0, sys.argv[1])
end = sys.argv.index("--")
for replacement in sys.argv[2:end]:
    target, source = replacement.split("=")
    (where, name), (module, function) = target.rsplit(".", 1), source.rsplit(".", 1)
    setattr(importlib.import_module(where), name, getattr(importlib.import_module(module), function))
from clustertop.cli import main
sys.exit(main(sys.argv[end + 1:]))
"""


class ChildCli:
    """`clustertop ARGS` in a child process, each 'module.attribute' of `replace` set first to a module-level
    function of tests/fakes (the child imports it by its module path)."""

    def __init__(self, replace: dict[str, Callable[..., Any]]) -> None:
        self.replacements = [f"{target}={f.__module__}.{f.__qualname__}" for target, f in replace.items()]

    def command(self, *args: str) -> list[str]:
        """The child's argv, to start it yourself (Popen, a live source)."""
        return [sys.executable, "-c", SCRIPT, TESTS, *self.replacements, "--", *args]

    def __call__(self, *args: str, stdin: bytes | None = None,
                 timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
        """Run it to the end, `stdin` its input: its exit code, stdout and stderr (bytes)."""
        return subprocess.run(self.command(*args), input=stdin, capture_output=True, timeout=timeout,
                              check=False)
