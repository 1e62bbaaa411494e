"""clustertop: see how a large AI cluster really behaves. The command line lives in clustertop.cli.

The wheel installs one package, `clustertop`: this folder (cli/ in the repository) is the package itself, with
the engine as `clustertop.engine` and the dashboard as `clustertop.tui` (the folders engine/ and tui/, mapped
in pyproject.toml). No folder of the checkout is named `clustertop`, so Python run from the checkout imports
the installed package, never a half of it.
"""

from __future__ import annotations

import sys

if sys.argv and (sys.argv[0] == "-m" or sys.argv[0].endswith("clustertop")):   # the command line is starting:
    from clustertop.signals import quiet_until_main  # first, so Ctrl-C during the

    quiet_until_main()                                                        # imports below exits quietly


def __getattr__(name: str) -> str:
    """`clustertop.__version__`, found when first asked (a refused command line never needs it)."""
    if name == "__version__":
        from clustertop.engine.stream.version import version

        globals()["__version__"] = found = version()
        return found
    raise AttributeError(f"module 'clustertop' has no attribute {name!r}")
