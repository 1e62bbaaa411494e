"""How far to trust an estimate: a band from the validation residuals of the published runs most like it.

`clustertop validate` compares the model with every published run it can express; each row's residual (the
signed error of the prediction, 0.05 = 5% too fast) is kept in engine/config/catalogs/residuals.json,
written by scripts/residuals.py and checked against `validate` by tests/test_uncertainty.py, so it never
drifts from the model. Only the held-out rows count: the fitted rows' errors are small by construction (the
constants were chosen on them), and a band drawn from them promised 90% and held 81-88% of the held-out rows.
For a job, the runs most like it are those of the same GPU, size class and software stack; when fewer than
`MIN_RUNS` are, the match is widened (GPU and stack, then stack, then every run of its kind: training or
serving). The band's half-width is the split-conformal quantile of those runs' absolute errors: the
ceil(0.9 (n + 1))-th smallest of n, so that a new run like them falls inside with a probability of at least
90% (the runs taken as exchangeable). The test holds this over `validate`'s rows, each left out of its own
band, fitted and held-out rows separately.

A prediction p with the true value inside the band means a true step time of p (1 - u) to p (1 + u): the error
is on throughput, and a throughput too high by e is a step too short by the same factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

import orjson

# written by a script, so JSON: every estimate process and sweep worker reads it, in 0.4 ms (as TOML: ~6 ms)
RESIDUALS_FILE = "residuals.json"
COVERAGE = 0.9              # the share of runs like it that the band holds
MIN_RUNS = 20               # fewer runs alike than this widen the match (10 held 88% of the serving rows)
SMALL, LARGE = 15e9, 100e9  # size classes by parameter count: small < 15B <= mid < 100B <= large


@dataclass(frozen=True)
class Residual:
    name: str
    kind: str               # "training" | "serving"
    gpu: str
    size: str               # size_class()
    stack: str              # "megatron" | "fsdp" (training), "serving"
    fit: bool
    error: float


@dataclass(frozen=True)
class Band:
    uncertainty: float      # half-width, a fraction of the estimate
    runs: int               # published runs it comes from
    alike: str              # what they share with the job ("h100-sxm-80gb, megatron" or "every training run")

    def step(self, seconds: float) -> tuple[float, float]:
        """Where a run's true step falls: a throughput too high by u is a step too short by as much."""
        return seconds * (1 - self.uncertainty), seconds * (1 + self.uncertainty)

    def rate(self, per_s: float) -> tuple[float, float]:
        """Where a run's true rate falls, for a predicted `per_s`."""
        return per_s / (1 + self.uncertainty), per_s / max(1e-9, 1 - self.uncertainty)


def size_class(params: float) -> str:
    return "small" if params < SMALL else "mid" if params < LARGE else "large"


def stack_of(kind: str, zero: int) -> str:
    """A training job's stack class: FSDP (every layer gathered each microbatch) or Megatron-class."""
    return "serving" if kind == "inference" else "fsdp" if zero == 3 else "megatron"


@cache
def residuals() -> tuple[Residual, ...]:
    data = orjson.loads(resources.files("clustertop.engine.config.catalogs").joinpath(RESIDUALS_FILE)
                        .read_bytes())
    return tuple(Residual(**row) for row in data["rows"])


def quantile(errors: list[float], coverage: float = COVERAGE) -> float | None:
    """The split-conformal quantile of the absolute errors; None when there are too few for the coverage."""
    ranked = sorted(abs(e) for e in errors)
    k = math.ceil(coverage * (len(ranked) + 1))
    return ranked[k - 1] if k <= len(ranked) else None


# the matches tried, closest first: the keys a run must share with the job
MATCHES = (("gpu", "size", "stack"), ("gpu", "stack"), ("stack",), ())


def band_of(rows: tuple[Residual, ...] | list[Residual], kind: str, gpu: str, size: str,
            stack: str) -> Band | None:
    """The band from the closest match with enough runs (`rows`: the residuals to draw on)."""
    job = {"gpu": gpu, "size": size, "stack": stack}
    of_kind = [r for r in rows if r.kind == kind]
    for keys in MATCHES:
        alike = [r.error for r in of_kind if all(getattr(r, k) == job[k] for k in keys)]
        if len(alike) < MIN_RUNS and keys:
            continue
        q = quantile(alike)
        if q is None:
            continue
        said = ", ".join(job[k] for k in keys) if keys else f"every {kind} run"
        if not any(r.gpu == gpu for r in of_kind):      # an accelerator no published run measured
            said += f"; none on {gpu}: its own error is not in the band"
        elif not any(r.size == size for r in of_kind):  # nor a model of its size (a 405B served)
            said += f"; none of its size ({size}): its own error is not in the band"
        return Band(q, len(alike), said)
    return None


@cache
def band(kind: str, gpu: str, params: float, zero: int) -> Band | None:
    """The band of a job: its kind ("training" | "inference"), GPU, parameter count and ZeRO stage."""
    rows_kind = "serving" if kind == "inference" else "training"
    return band_of(held_out(), rows_kind, gpu, size_class(params), stack_of(kind, zero))


@cache
def held_out() -> tuple[Residual, ...]:
    """The residuals of the rows the constants were not fitted on: what the band is drawn from."""
    return tuple(r for r in residuals() if not r.fit)
