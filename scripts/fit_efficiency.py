"""Fit the kernel constants of the GPU catalog on the calibration set's fitting rows
(docs/performance-model.md 9).

The constants: H100 BF16 and FP8 `gemm_efficiency` / `fp8_gemm_efficiency` and A100 `gemm_efficiency` (the
sustained fraction of peak in a GEMM's main loop), and `FLASH1_SHARE` (FlashAttention-1 / Triton attention's
rate as a share of FlashAttention-2's, engine/config/catalog.py). Everything else is measured (kernel tables,
datasheets) or structural. The fit is a grid search over the rows marked `fit` (every other row of each
source, and the Llama 3 and BLOOM rows), keeping the Llama 3 rows within 5%: the efficiencies, then the share
with them fixed, then the efficiencies again with the share. It minimises the mean over sources of each
source's mean absolute error: each source is one measurement campaign, and one that publishes many rows
(llm-foundry: 31) should not outweigh the others. It prints the best constants and the error over the fitting
rows and the held-out rows. Run from the repository root:

    python scripts/fit_efficiency.py
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics

from clustertop.engine.config import catalog
from clustertop.engine.model import calibration
from clustertop.engine.model.estimate import clear_caches

H100, A100 = "h100-sxm-80gb", "a100-sxm-80gb"
GRID = {"h100": [x / 100 for x in range(60, 77)], "fp8": [x / 100 for x in range(54, 71, 2)],
        "a100": [x / 100 for x in range(64, 77)], "flash1": [x / 100 for x in range(35, 80, 5)]}


def errors(h100: float, fp8: float, a100: float) -> list[tuple[calibration.Row, float]]:
    gpus = catalog.gpus()
    overrides = {H100: dataclasses.replace(gpus[H100], gemm_efficiency=h100, fp8_gemm_efficiency=fp8),
                 A100: dataclasses.replace(gpus[A100], gemm_efficiency=a100)}
    clear_caches()
    out = []
    for row in calibration.rows():
        if row.scenario["cluster"]["gpu"] not in overrides:
            continue
        p = calibration.predict(row, overrides)
        out.append((row, p.error if p.error is not None else 1.0))
    return out


def mape(errs: list[tuple[calibration.Row, float]], fit: bool) -> float:
    return statistics.mean(abs(e) for row, e in errs if row.fit == fit)


def per_source(errs: list[tuple[calibration.Row, float]]) -> float:
    """The mean over sources of each source's mean absolute error on its fitting rows."""
    by: dict[str, list[float]] = {}
    for row, e in errs:
        if row.fit:
            by.setdefault(row.source, []).append(abs(e))
    return statistics.mean(statistics.mean(v) for v in by.values())


def efficiencies(fp8: float) -> tuple[float, float]:
    """The best H100 BF16 and A100 efficiencies for an FP8 efficiency, keeping the Llama 3 rows within 5%."""
    best = None
    for h100, a100 in itertools.product(GRID["h100"], GRID["a100"]):
        errs = errors(h100, fp8, a100)
        if any(abs(e) > 0.05 for row, e in errs if row.source == "llama3"):
            continue
        score = per_source(errs)
        if best is None or score < best[0]:
            best = (score, h100, a100)
    assert best is not None
    return best[1], best[2]


def main() -> None:
    # H100 BF16 and A100 first (FP8 rows held at the middle), then the FlashAttention-1 share, then the
    # efficiencies again, then FP8 with them fixed: the grid stays small
    h100, a100 = efficiencies(0.62)
    scores = []
    for share in GRID["flash1"]:
        catalog.FLASH1_SHARE = share
        scores.append((per_source(errors(h100, 0.62, a100)), share))
    share = min(scores)[1]
    catalog.FLASH1_SHARE = share
    h100, a100 = efficiencies(0.62)
    fits = [(per_source(errs := errors(h100, fp8, a100)), fp8, errs) for fp8 in GRID["fp8"]]
    _, fp8, errs = min(fits, key=lambda f: f[0])
    print(f"h100 gemm_efficiency = {h100:.2f}, fp8_gemm_efficiency = {fp8:.2f}; "
          f"a100 gemm_efficiency = {a100:.2f}; FLASH1_SHARE = {share:.2f}")
    print(f"fitting rows {100 * mape(errs, True):.1f}%, held-out rows {100 * mape(errs, False):.1f}% "
          f"(rows on H100 and A100: {len(errs)})")


if __name__ == "__main__":
    main()
