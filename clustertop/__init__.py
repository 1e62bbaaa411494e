"""clustertop: see how a large AI cluster really behaves. The command line lives in clustertop.cli.

The wheel installs one package: `clustertop`, with the engine as `clustertop.engine` and the dashboard as
`clustertop.tui`. In a source checkout those two folders sit beside this one (engine/, tui/): the package's
search path then includes the checkout, so `clustertop.engine` imports the same code with or without an install.
"""

from __future__ import annotations

import sys

if sys.argv and (sys.argv[0] == "-m" or sys.argv[0].endswith("clustertop")):   # the command line is starting:
    from clustertop.signals import quiet_until_main  # first, so Ctrl-C during the

    quiet_until_main()                                                        # imports below exits quietly

from importlib import metadata
from pathlib import Path

_here = Path(__file__).resolve().parent
if not (_here / "engine").is_dir() and (_here.parent / "engine" / "__init__.py").is_file():
    __path__.append(str(_here.parent))   # a source checkout: engine/ and tui/ beside clustertop/


def _version() -> str:
    """The installed distribution's version; in a checkout that was never installed, pyproject.toml's."""
    try:
        return metadata.version("clustertop")
    except metadata.PackageNotFoundError:
        import tomllib

        with open(_here.parent / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])


__version__ = _version()
