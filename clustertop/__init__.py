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

from pathlib import Path

_here = Path(__file__).resolve().parent
if not (_here / "engine").is_dir() and (_here.parent / "engine" / "__init__.py").is_file():
    __path__.append(str(_here.parent))   # a source checkout: engine/ and tui/ beside clustertop/


def _version() -> str:
    """The installed distribution's version; in a checkout that was never installed, pyproject.toml's."""
    from importlib import metadata  # 0.1 s of imports: only when the version is asked for

    try:
        return metadata.version("clustertop")
    except metadata.PackageNotFoundError:
        import tomllib

        with open(_here.parent / "pyproject.toml", "rb") as f:
            return str(tomllib.load(f)["project"]["version"])


def __getattr__(name: str) -> str:
    """`clustertop.__version__`, found when first asked (a refused command line never needs it)."""
    if name == "__version__":
        globals()["__version__"] = version = _version()
        return version
    raise AttributeError(f"module 'clustertop' has no attribute {name!r}")
