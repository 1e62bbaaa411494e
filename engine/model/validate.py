"""The performance model against published training runs: every row of the calibration set
(model/calibration.py); and the serving model against published serving runs (model/serving_calibration.py).

Each row is a scenario, the figure its source published and that source's measure (tokens/s per GPU, or
TFLOP/s per GPU in its FLOPs convention); the prediction is put in the same measure. The report gives each
row's error (a signed fraction: 0.05 = predicted 5% too fast), the mean absolute percentage error per source
and overall, and the same for the rows the efficiency constants were fitted on and for the rows held out. A
row misses when its error is beyond its tolerance; the Llama 3 rows must also come out in their published
order.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from . import compute as cm
from . import serving_calibration
from .calibration import SKIPPED, Prediction, predict, rows, scenario
from .uncertainty import Residual, size_class, stack_of

ORDER = (("llama3-405b-8k", "llama3-405b-16k", "llama3-405b-16k-128k"),
         "Llama 3 Table 4: 430 > 400 > 380 TFLOP/s per GPU")


@dataclass(frozen=True)
class Report:
    predictions: tuple[Prediction, ...]
    order_ok: bool

    @property
    def ok(self) -> bool:
        return self.order_ok and all(p.error is not None and abs(p.error) <= p.row.tolerance
                                     for p in self.predictions)

    def mape(self, which: str = "all", source: str | None = None, measure: str | None = None) -> float:
        """Mean absolute error over the rows ("all", "fit" or "held out"), of one source (and measure) or
        every one."""
        errors = [abs(p.error) for p in self.predictions if p.error is not None
                  and (source is None or p.row.source == source)
                  and (measure is None or p.row.measure == measure)
                  and (which == "all" or p.row.fit == (which == "fit"))]
        return statistics.mean(errors) if errors else 0.0

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(p.row.source for p in self.predictions))

    @property
    def measures(self) -> list[str]:
        return list(dict.fromkeys(p.row.measure for p in self.predictions))


def run(names: list[str] | None = None) -> Report:
    """Predict every row (or those named) and check the Llama 3 order."""
    predictions = tuple(predict(row) for row in rows() if not names or row.name in names)
    by = {p.row.name: p.predicted for p in predictions}
    order = [by.get(n) for n in ORDER[0]]
    values = [v for v in order if v is not None]
    ok = len(values) == len(order) and all(a > b for a, b in itertools.pairwise(values))
    return Report(predictions, ok if all(n in by for n in ORDER[0]) else True)


def run_serving(names: list[str] | None = None) -> Report:
    """Predict every serving row (engine/model/serving_calibration.py), or those named."""
    return Report(tuple(predict(row) for row in serving_calibration.rows() if not names or row.name in names),
                  True)


def skipped() -> dict[str, str]:
    """Tables and rows of calibration_runs.toml the scenario format cannot express, with the reason."""
    return dict(SKIPPED)


def residuals(training: Report, serving: Report) -> list[Residual]:
    """Each row's error with what makes runs alike (engine/model/uncertainty.py): the training rows, and the
    serving rows measured in output tokens/s (the throughput the band is put on)."""
    out = []
    for report, kind in ((training, "training"), (serving, "serving")):
        for p in report.predictions:
            if p.error is None or (kind == "serving" and p.row.measure != serving_calibration.OUTPUT):
                continue
            job = p.estimate.job
            params, _ = cm.total_params(job.model)
            out.append(Residual(name=p.row.name, kind=kind, gpu=job_gpu(p), size=size_class(params),
                                stack=stack_of(job.kind, job.zero), fit=p.row.fit, error=round(p.error, 4)))
    return out


def job_gpu(p: Prediction) -> str:
    """The GPU the row ran on (its scenario's; a roomier copy for a run out of memory keeps the name)."""
    return str(scenario(p.row).cluster.gpu.name)
