"""Run every benchmarks/bench_*.py module's run() and print their figures as one flat JSON object.

Each module contributes its own keys (estimate_flagship_s, record_flagship_6h_s, tui_frame_16k_ms, ...).
`--only NAME` runs the modules whose name contains NAME.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys

import benchmarks


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (default: one line per key)")
    parser.add_argument("--only", metavar="NAME",
                        help="run only the bench_* modules whose name contains NAME")
    args = parser.parse_args()
    figures: dict[str, float] = {}
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda m: m.name):
        if not info.name.startswith("bench_") or (args.only and args.only not in info.name):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        print(f"running {info.name}...", file=sys.stderr)
        figures.update(module.run())
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
