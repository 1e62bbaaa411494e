"""`clustertop validate`."""

from __future__ import annotations

import argparse

from engine.errors import UserError


def main(args: argparse.Namespace) -> int:
    raise UserError("validate is not available yet in this version of clustertop")
