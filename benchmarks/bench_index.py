"""The dashboard's seek index (tui/index.py) of a recording of many jobs: every sample carries each job's
status, so what a keyframe keeps of them (tui/keyframe.py) decides the index's memory.

- index_rss_many_jobs_mb: 256 training jobs of 32 GPUs (Llama 3.1 8B, TP8 DP4) on 8,192 H100s, 20 simulated
  minutes at the default interval (0.5 s: 2,401 samples), recorded to .jsonl.gz; then, in a child process so
  that nothing else is counted, reading it into the seek index (`EventIndex.of_file`, what `clustertop replay`
  does before the first frame): the child's peak RSS over its RSS before reading.
- index_many_jobs_s: that reading's time; seek_many_jobs_ms: the mean of its state_at at 20 random times (as
  seek_54d_ms in bench_record.py: a seek folds a keyframe, so it pays for unpacking it).
- record_many_jobs_20m_s: the recording's time (not a target; it makes the file).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOBS, GPUS, DURATION = 256, 8192, "20m"


def _scenario() -> str:
    """A scenario of JOBS small training jobs filling GPUS GPUs."""
    job = ('\n[[jobs]]\nname = "train-{i:03d}"\nmodel = "llama3.1-8b"\nseq_len = 8192\nglobal_batch = 32\n'
           'micro_batch = 1\ntp = 8\npp = 1\ndp = 4\n')
    return (f'name = "many-jobs"\nseed = 1\nduration = "{DURATION}"\n\n[cluster]\ngpu = "h100-sxm-80gb"\n'
            f'gpus = {GPUS}\n' + "".join(job.format(i=i) for i in range(JOBS)))


def _record(toml: Path, out: Path) -> float:
    from clustertop.engine.config import scenario
    from clustertop.engine.sim.run import Run
    from clustertop.engine.stream.recorder import Recorder

    start = time.perf_counter()
    run = Run(scenario.load(str(toml)))
    sink = Recorder.open(str(out))
    run.run(sink)
    sink.close()
    return time.perf_counter() - start


def _status_mb(key: str) -> float:
    """VmRSS (now) or VmHWM (the peak) of this process. Not ru_maxrss: a child's keeps its parent's RSS at the
    fork across exec, and the parent holds the recording's simulation."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _index(path: str) -> dict[str, float]:
    """In the child: read the recording into the seek index; its memory, time and seek time."""
    from clustertop.tui.index import EventIndex

    before = _status_mb("VmRSS")
    start = time.perf_counter()
    index = EventIndex.of_file(path)
    seconds = time.perf_counter() - start
    peak = _status_mb("VmHWM")
    rng = random.Random(1)
    times = [rng.uniform(0, index.end_t) for _ in range(20)]
    start = time.perf_counter()
    for t in times:
        index.state_at(t)
    seek_ms = (time.perf_counter() - start) / len(times) * 1000
    return {"index_rss_many_jobs_mb": round(peak - before, 1), "index_many_jobs_s": round(seconds, 3),
            "seek_many_jobs_ms": round(seek_ms, 2)}


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        toml, out = Path(tmp) / "many-jobs.toml", Path(tmp) / "many-jobs.jsonl.gz"
        toml.write_text(_scenario())
        recorded = _record(toml, out)
        child = subprocess.run([sys.executable, __file__, str(out)], capture_output=True, check=True)
    figures: dict[str, float] = json.loads(child.stdout)
    figures["record_many_jobs_20m_s"] = round(recorded, 2)
    return figures


if __name__ == "__main__":
    print(json.dumps(_index(sys.argv[1])) if len(sys.argv) > 1 else run())
