"""`clustertop validate`: the performance model against published training runs; non-zero exit on a miss.

One row per published run (engine/model/calibration.py): its source, its published figure and measure, the
prediction and the signed error; then the mean absolute percentage error per source, overall, and over the
rows the efficiency constants were fitted on and those held out.
"""

from __future__ import annotations

import argparse
import json

from clustertop.engine.model.calibration import TOKENS, Prediction
from clustertop.engine.model.validate import ORDER, Report, run, run_serving, skipped

MEASURES = {TOKENS: "tokens/s/GPU", "tflops_per_gpu_model": "TFLOP/s (model)",
            "tflops_per_gpu_megatron": "TFLOP/s (Megatron eq. 3)", "tflops_per_gpu_nemo": "TFLOP/s (NeMo)"}


def main(args: argparse.Namespace) -> int:
    report, serving = run(), run_serving()
    if args.json:
        print(json.dumps(as_json(report, serving)))
        return 0 if report.ok and serving.ok else 1
    width = max(len(p.row.name) for p in report.predictions + serving.predictions)
    _table(report, width)
    print(f"overall {100 * report.mape():.1f}% over {len(report.predictions)} runs; fitted rows "
          f"{100 * report.mape('fit'):.1f}%, held-out rows {100 * report.mape('held out'):.1f}%")
    print(f"order {' > '.join(ORDER[0])}: {'ok' if report.order_ok else 'MISS'}")
    for what, why in skipped().items():
        print(f"not expressible: {what}: {why}")
    print("sources: engine/config/catalogs/calibration_runs.toml, reference_runs.toml; "
          "docs/performance-model.md section 8")
    print("\nserving")
    _table(serving, width)
    print(f"serving: fitted rows {100 * serving.mape('fit'):.1f}%, held-out rows "
          f"{100 * serving.mape('held out'):.1f}%; source: engine/config/catalogs/serving_runs.toml, "
          "docs/performance-model.md section 12")
    return 0 if report.ok and serving.ok else 1


def _table(report: Report, width: int) -> None:
    """Each row's figures and error, then the mean absolute error of each source (and of each measure)."""
    print(f"{'source':<16} {'run':<{width}}  {'published':>10}  {'predicted':>10}  {'error':>7}  measure")
    for p in report.predictions:
        pred = "-" if p.predicted is None else f"{p.predicted:,.1f}"
        err = "-" if p.error is None else f"{100 * p.error:+.1f}%"
        miss = "" if p.error is not None and abs(p.error) <= p.row.tolerance else "  MISS"
        fit = "" if p.row.fit else "  (held out)"
        print(f"{p.row.source:<16} {p.row.name:<{width}}  {p.row.published:>10,.1f}  {pred:>10}  {err:>7}  "
              f"{MEASURES.get(p.row.measure, p.row.measure)}{fit}{miss}"
              + (f"  [{p.memory_note}]" if p.memory_note else ""))
    print()
    print("mean absolute error: "
          + ", ".join(f"{s} {100 * report.mape(source=s):.1f}%" for s in report.sources))
    measures = report.measures
    if len(measures) > 1:
        print("by measure: " + ", ".join(f"{m} {100 * report.mape(measure=m):.1f}%" for m in measures))


def as_json(report: Report, serving: Report) -> dict[str, object]:
    """{"rows": [...], "sources": {SOURCE: MAPE}, "mape": MAPE, ..., "serving": {...}}, errors as signed
    fractions; the training figures over the training rows, the serving ones under "serving"."""
    return {
        "rows": ([_row(p, "training") for p in report.predictions]
                 + [_row(p, "serving") for p in serving.predictions]),
        "sources": {s: round(report.mape(source=s), 4) for s in report.sources},
        "mape": round(report.mape(), 4),
        "mape_fit": round(report.mape("fit"), 4),
        "mape_held_out": round(report.mape("held out"), 4),
        "order": {"runs": list(ORDER[0]), "ok": report.order_ok, "source": ORDER[1]},
        "ok": report.ok and serving.ok,
        "skipped": skipped(),
        "serving": {"sources": {s: round(serving.mape(source=s), 4) for s in serving.sources},
                    "measures": {m: round(serving.mape(measure=m), 4) for m in serving.measures},
                    "mape_fit": round(serving.mape("fit"), 4),
                    "mape_held_out": round(serving.mape("held out"), 4), "ok": serving.ok},
    }


def _row(p: Prediction, kind: str) -> dict[str, object]:
    return {"source": p.row.source, "name": p.row.name, "published": p.row.published,
            "predicted": None if p.predicted is None else round(p.predicted, 3),
            "measure": p.row.measure, "error": None if p.error is None else round(p.error, 4),
            "fit": p.row.fit, "tolerance": p.row.tolerance, "note": p.memory_note, "kind": kind}
