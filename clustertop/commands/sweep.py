"""`clustertop sweep`."""

from __future__ import annotations

import argparse

from engine import scenario
from engine.errors import UserError


def main(args: argparse.Namespace) -> int:
    scenario.load(args.scenario)
    raise UserError("sweep is not available yet in this version of clustertop")
