"""`clustertop scenarios`: the built-in scenarios, one line each."""

from __future__ import annotations

import argparse

from clustertop.engine.config import scenario

DEFAULT_SCENARIO = "llama3-405b-16k"


def main(args: argparse.Namespace) -> int:
    names = scenario.builtin_names()
    width = max(map(len, names), default=0)
    for name in names:
        s = scenario.load(name)
        mark = "  (default)" if name == DEFAULT_SCENARIO else ""
        print(f"{name:<{width}}  {s.description}{mark}")
    return 0
