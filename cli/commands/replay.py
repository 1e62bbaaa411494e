"""`clustertop replay FILE`: a recording (or `-`, a stream on stdin) in the dashboard.

A results file of `clustertop sweep -o` opens as a table of its points instead (tui/sweep.py); enter on a
row rebuilds that point's scenario (engine/sweep/space.py point_scenario), writes it to a temporary TOML and
runs it live in the dashboard; quitting the dashboard comes back to the table.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clustertop.tui.sources import Source


def open_source(path: str) -> Source:
    """A recording file, or stdin for '-'. UserError on a bad file, before any screen is drawn."""
    if path == "-":
        from clustertop.tui.sources.stdin import stdin_source

        return stdin_source()
    from clustertop.tui.sources.recording import RecordingSource

    return RecordingSource(path)


def point_toml(record: dict[str, Any], directory: str) -> str:
    """The scenario of a sweep record written as TOML in `directory`; UserError when it cannot be rebuilt."""
    from clustertop.engine.config.errors import UserError
    from clustertop.engine.config.tomlfile import dumps
    from clustertop.engine.sweep.space import point_scenario

    base = str(record.get("scenario") or "")
    if not base:
        raise UserError(f"point {record.get('index')} names no base scenario")
    built, table = point_scenario(base, record["point"])          # checks the point as the sweep built it
    # named for the point (`llama3-405b-16k-point-3`; the dashboard titles it by its values: point_title), in
    # the sweep's own directory; only letters, digits, '.', '-' and '_' of the scenario's name (it could hold
    # "../")
    index = int(record.get("index", 0))
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", built.name).strip(".-")[:60] or "sweep"
    path = os.path.join(directory, f"{stem}-point-{index}.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(dumps(table, f"point {index} of a sweep of {built.name}"))
    return path


def run_sweep(path: str, speed: float = 1.0, metric: str = "util") -> int:
    from clustertop.engine.sweep.results import read_results

    records = read_results(path)                      # a bad file is a one-line error before any screen
    from clustertop.tui.sweep import SweepApp, point_title
    directory = tempfile.mkdtemp(prefix="clustertop-sweep-")
    try:
        while True:
            table = SweepApp(records, Path(path).name, prepare=lambda record: point_toml(record, directory))
            chosen = table.run()
            if not chosen or table.chosen is None:
                return 0
            run_live(chosen, point_title(table.chosen), speed, metric)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_live(scenario_path: str, title: str, speed: float = 1.0, metric: str = "util") -> None:
    """A sweep's point live in the dashboard, titled `title` (what the point is, not its temporary file)."""
    from clustertop.tui import app
    from clustertop.tui.sources import live

    source = live.LiveSource(scenario_path)
    source.name = title
    app.show([source], speed=speed, metric=metric, back="the sweep table")


def main(args: argparse.Namespace) -> int:
    from clustertop.engine.sweep.results import looks_like_sweep_results

    if looks_like_sweep_results(args.file):
        return run_sweep(args.file, args.speed, args.metric)
    source = open_source(args.file)
    from clustertop.tui.app import show

    show([source], speed=args.speed, metric=args.metric)
    return 0
