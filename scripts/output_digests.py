"""The SHA-256 of what clustertop writes, for showing that a change leaves every output byte-identical.

Runs the `clustertop` on PATH (so the same script checks any installed version) over a fixed set of commands:
the estimate of every built-in scenario (`estimate --json`), `validate --json`, recordings of several
scenarios (a short stretch of each, and the flagship's 54 days), two sweep files, and the Perfetto export of
every recording it made. Version strings ("clustertop 0.1.0") are masked, so two versions that write the same
bytes otherwise give the same digests.

    python scripts/output_digests.py > before.txt      # with one version installed
    python scripts/output_digests.py > after.txt       # with the other
    diff before.txt after.txt                          # nothing: byte-identical

Each line is `digest  what`; `--jobs N` runs N commands at once (default 2).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

VERSION = re.compile(rb"clustertop \d+(\.\d+)*(\+\w+)?|0\+unknown")
SPEED = re.compile(rb"^.* points in .* points/s.*$", re.MULTILINE)      # the sweep's timing line
PATH = re.compile(rb"/\S*/(scenarios/[\w.-]+\.toml|[\w.-]+\.(toml|jsonl))")   # where the files are
RECORDINGS = {              # scenario -> the stretch recorded
    "llama3-405b-16k": "6h",
    "llama3-405b-8k": "1h",
    "congested-fabric": "10m",
    "shared-fabric": "1h",
    "inference-serving": "10m",
    "pcie-8gpu": "10m",
    "gb200-nvl72": "1h",
    "tpu-v5p-pod": "1h",
    "deepseek-v3-2048": "1h",
    "prometheus-1gw": "10m",
}
LONG = ("llama3-405b-16k", "54d")
SWEEPS = {
    "flagship-layouts": ["llama3-405b-16k", "--vary", "jobs[0].tp=4,8", "--vary", "jobs[0].pp=8,16",
                         "--vary", "jobs[0].micro_batch=1,2",
                         "--vary", "jobs[0].recompute=none,selective,full"],
    "fabrics": ["llama3-405b-16k", "--vary", "cluster.scale_out=roce-400g,ib-ndr-400g,roce-800g",
                "--vary", "cluster.pod_oversubscription=1,3,7", "--rank", "usd_per_mtoken"],
}


def digest(data: bytes, gz: bool = False) -> str:
    if gz:
        import gzip
        data = gzip.decompress(data)
    data = PATH.sub(rb"\1", SPEED.sub(b"", data))
    return hashlib.sha256(VERSION.sub(b"clustertop VERSION", data)).hexdigest()[:16]


def run(argv: list[str]) -> bytes:
    done = subprocess.run(["clustertop", *argv], capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"clustertop {' '.join(argv)}: exit {done.returncode}: "
                         f"{done.stderr.decode()[-500:]}")
    return done.stdout


def scenarios() -> list[str]:
    return [line.split()[0] for line in run(["scenarios"]).decode().splitlines()
            if line.strip() and not line.startswith((" ", "\t")) and re.match(r"^[a-z0-9][\w.-]+\s", line)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        out = Path(tmp)
        names = scenarios()
        estimates = pool.map(lambda n: (n, run(["estimate", n, "--json"])), names)
        lines += [f"{digest(data)}  estimate {n} --json" for n, data in estimates]
        lines.append(f"{digest(run(['validate', '--json']))}  validate --json")
        jobs = [(n, d, out / f"{n}-{d}.jsonl.gz") for n, d in [*RECORDINGS.items(), LONG]]
        list(pool.map(lambda j: run(["record", j[0], "--duration", j[1], "-o", str(j[2])]), jobs))
        lines += [f"{digest(p.read_bytes(), gz=True)}  record {n} --duration {d}" for n, d, p in jobs]
        traces = [(n, d, p, out / f"{n}-{d}.json") for n, d, p in jobs]
        list(pool.map(lambda j: run(["export", str(j[2]), "--format", "perfetto", "-o", str(j[3])]), traces))
        lines += [f"{digest(t.read_bytes())}  export {n}-{d} --format perfetto" for n, d, _, t in traces]
        for name, argv in SWEEPS.items():
            path = out / f"{name}.jsonl"
            best = out / f"{name}.toml"
            printed = run(["sweep", *argv, "--workers", "2", "-o", str(path), "--best-to", str(best)])
            lines.append(f"{digest(path.read_bytes())}  sweep {name} (results file)")
            lines.append(f"{digest(best.read_bytes())}  sweep {name} (--best-to)")
            lines.append(f"{digest(printed)}  sweep {name} (table)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
