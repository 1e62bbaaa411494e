"""Site-scale recording: `record_prometheus_1h_s` (1 GW, ~433K GPUs), `record_prometheus_54d_s` and
`recording_prometheus_54d_mb` (its 54 days: ~8M steps, ~600K checkpoints, ~7,800 interruptions), and
`peak_rss_hyperion_mb` (5 GW, ~2.2M GPUs).

Each runs `clustertop record` in a child process at the scenario's default sampling interval, so the peak RSS
is the child's alone (os.wait4: that child's, not the largest of all children so far).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _record(scenario: str, out: Path, duration: str = "1h") -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one `clustertop record` child."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "clustertop", "record", scenario, "--duration", duration,
                              "-o", str(out)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        prometheus, _ = _record("prometheus-1gw", Path(tmp) / "prometheus.jsonl.gz")
        long = Path(tmp) / "prometheus-54d.jsonl.gz"
        prometheus_54d, _ = _record("prometheus-1gw", long, "54d")
        size_54d = long.stat().st_size
        long.unlink()
        hyperion, peak_mb = _record("hyperion-5gw", Path(tmp) / "hyperion.jsonl.gz")
        size = (Path(tmp) / "hyperion.jsonl.gz").stat().st_size
    return {"record_prometheus_1h_s": round(prometheus, 2), "record_hyperion_1h_s": round(hyperion, 2),
            "record_prometheus_54d_s": round(prometheus_54d, 2),
            "recording_prometheus_54d_mb": round(size_54d / 1e6, 2),
            "recording_hyperion_1h_mb": round(size / 1e6, 2), "peak_rss_hyperion_mb": round(peak_mb, 1)}
