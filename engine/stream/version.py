"""The generator version a stream's header names: the installed distribution's ("clustertop 0.1.0").

The stream contract writes it (engine/stream/header.py); the command line's `--version` reads it here too.
"""

from __future__ import annotations

from functools import cache

DISTRIBUTION = "clustertop"


@cache
def version() -> str:
    """The installed distribution's version (importlib.metadata: 0.1 s of imports, so only when asked for)."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:      # run from files that were never installed
        return "0+unknown"


def generator() -> str:
    """The header's `generator`: who wrote the stream."""
    return f"{DISTRIBUTION} {version()}"
