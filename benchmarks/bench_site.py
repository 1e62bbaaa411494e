"""Site-scale recording: `record_prometheus_1h_s` (1 GW, ~433K GPUs) and
`peak_rss_hyperion_mb` (5 GW, ~2.2M GPUs).

Each runs `clustertop record` in a child process at the scenario's default sampling interval, so the peak RSS
is the child's alone.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _record(scenario: str, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "clustertop", "record", scenario, "--duration", "1h",
                    "-o", str(out)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        prometheus = _record("prometheus-1gw", Path(tmp) / "prometheus.jsonl.gz")
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        hyperion = _record("hyperion-5gw", Path(tmp) / "hyperion.jsonl.gz")
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        size = (Path(tmp) / "hyperion.jsonl.gz").stat().st_size
    figures = {"record_prometheus_1h_s": round(prometheus, 2), "record_hyperion_1h_s": round(hyperion, 2),
               "recording_hyperion_1h_mb": round(size / 1e6, 2)}
    # ru_maxrss of children is the largest child so far: the hyperion child when it is the larger one.
    figures["peak_rss_hyperion_mb"] = round(max(peak_kb, before) / 1024, 1)
    return figures
