"""Site-scale recording: `record_prometheus_1h_s` (1 GW, ~433K GPUs), `record_prometheus_54d_s` and
`recording_prometheus_54d_mb` (its 54 days: ~8M steps, ~600K checkpoints, ~7,800 interruptions; and
`record_prometheus_54d_cpu_s`, the CPU seconds of all its threads), and `peak_rss_hyperion_mb` (5 GW, ~2.2M
GPUs).

Each runs `clustertop record` in a child process at the scenario's default sampling interval, so the peak RSS
is the child's alone (its own, through a small launcher: not the largest of all children so far, nor this
process's RSS at the fork).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Linux counts a child's peak RSS from its fork, before its exec: a child forked from this (large) process
# would report this process's RSS when that is larger than its own. A small launcher forks the recording
# instead and reports that grandchild's own peak.
_LAUNCHER = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL); r = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(r.ru_maxrss, r.ru_utime + r.ru_stime)")


def _record(scenario: str, out: Path, duration: str = "1h") -> tuple[float, float, float]:
    """Wall seconds, peak RSS (MB) and CPU seconds (all its threads: the simulation and the gzip thread) of
    one `clustertop record` child. On a shared machine the CPU seconds move less than the wall time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, sys.executable, "-m", "clustertop", "record",
                           scenario, "--duration", duration, "-o", str(out)],
                          check=True, capture_output=True, text=True)
    rss, cpu = done.stdout.split()[-2:]
    return time.perf_counter() - start, int(rss) / 1024, float(cpu)


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        prometheus, _, _ = _record("prometheus-1gw", Path(tmp) / "prometheus.jsonl.gz")
        long = Path(tmp) / "prometheus-54d.jsonl.gz"
        prometheus_54d, _, cpu_54d = _record("prometheus-1gw", long, "54d")
        size_54d = long.stat().st_size
        long.unlink()
        hyperion, peak_mb, _ = _record("hyperion-5gw", Path(tmp) / "hyperion.jsonl.gz")
        size = (Path(tmp) / "hyperion.jsonl.gz").stat().st_size
    return {"record_prometheus_1h_s": round(prometheus, 2), "record_hyperion_1h_s": round(hyperion, 2),
            "record_prometheus_54d_s": round(prometheus_54d, 2),
            "record_prometheus_54d_cpu_s": round(cpu_54d, 2),
            "recording_prometheus_54d_mb": round(size_54d / 1e6, 2),
            "recording_hyperion_1h_mb": round(size / 1e6, 2), "peak_rss_hyperion_mb": round(peak_mb, 1)}
