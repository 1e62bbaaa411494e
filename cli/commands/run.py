"""`clustertop run SCENARIO` (and `clustertop` alone):
the engine in a child process, live in the dashboard."""

from __future__ import annotations

import argparse

from clustertop.engine.config import scenario


def main(args: argparse.Namespace) -> int:
    scenario.load(args.scenario)   # a bad scenario is a one-line error here, before any process starts
    from clustertop.tui.app import show
    from clustertop.tui.sources.live import LiveSource

    show([LiveSource(args.scenario, seed=args.seed)], speed=args.speed, metric=args.metric)
    return 0
