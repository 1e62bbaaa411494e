"""Screenshots: an SVG of the screen under a name no earlier screenshot has (three taken while paused at the
same time are three files), and where it went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App


def unique_path(directory: str, stem: str) -> Path:
    """`directory/stem.svg`, or `stem-2.svg`, `stem-3.svg`... the first that does not exist yet."""
    folder = Path(directory).expanduser().resolve()
    path, n = folder / f"{stem}.svg", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.svg"
    return path


def save(app: App[Any], directory: str, stem: str) -> None:
    """Save the screen as a new SVG file and say where it went (or why it could not)."""
    path = unique_path(directory, stem)
    try:
        saved = app.save_screenshot(filename=path.name, path=str(path.parent))
    except OSError as exc:
        app.notify(f"Could not save the screenshot in {path.parent}: {exc.strerror or exc}",
                   title="screenshot", severity="error", timeout=6)
        return
    app.notify(f"Saved {saved}", title="screenshot", timeout=6)
