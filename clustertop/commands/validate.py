"""`clustertop validate`: the performance model against published training runs; non-zero exit on a miss."""

from __future__ import annotations

import argparse
import json

from clustertop.engine.model.validate import run_checks

METRIC_LABELS = {"model": "model TFLOP/s", "hardware": "hardware TFLOP/s",
                 "megatron": "TFLOP/s (Megatron formula)"}


def main(args: argparse.Namespace) -> int:
    checks, orders = run_checks()
    ok = all(c.ok for c in checks) and all(o.ok for o in orders)
    if args.json:
        print(json.dumps({
            "ok": ok,
            "runs": [{"name": c.name, "label": c.label, "source": c.source, "metric": c.metric,
                      "published": c.published, "predicted": None if c.predicted is None else round(c.predicted, 1),
                      "error": None if c.error is None else round(c.error, 4), "tolerance": c.tolerance,
                      "ok": c.ok, "chosen": c.chosen} for c in checks],
            "order": [{"runs": list(o.runs), "ok": o.ok, "source": o.source} for o in orders],
        }))
        return 0 if ok else 1
    width = max(len(c.name) for c in checks)
    print(f"{'run':<{width}}  {'published':>9}  {'predicted':>9}  {'error':>7}  {'tol':>4}  {'':4}  measure")
    for c in checks:
        pred = "OOM" if c.predicted is None else f"{c.predicted:.1f}"
        err = "-" if c.error is None else f"{100 * c.error:+.1f}%"
        print(f"{c.name:<{width}}  {c.published:>9.1f}  {pred:>9}  {err:>7}  {100 * c.tolerance:>3.0f}%  "
              f"{'ok' if c.ok else 'MISS':4}  {METRIC_LABELS.get(c.metric, c.metric)}"
              + (f"; auto: {_chosen(c.chosen)}" if c.chosen else ""))
    for o in orders:
        print(f"order {' > '.join(o.runs)}: {'ok' if o.ok else 'MISS'}")
    print("sources: engine/config/catalogs/reference_runs.toml")
    return 0 if ok else 1


def _chosen(chosen: dict[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in chosen.items())
