"""A sweep on a Dask cluster gives the same records, byte for byte, as one run locally."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import clustertop.commands.sweep as sweep_command
import pytest
from clustertop.cli import main
from clustertop.engine.sweep.results import Ranking
from clustertop.engine.sweep.run import sweep_to
from clustertop.engine.sweep.space import Sweep, plan
from distributed import LocalCluster
from test_sweep import FLAGSHIP_AXES


def local_records(sw: Sweep) -> tuple[bytes, Ranking]:
    sink = io.BytesIO()
    ranking = sweep_to(sw, sink, workers=1)
    return sink.getvalue(), ranking


def test_threads_cluster_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, estimator: Any) -> None:
    monkeypatch.setattr(sweep_command, "ESTIMATOR", estimator)
    local, remote = tmp_path / "local.jsonl", tmp_path / "dask.jsonl"
    argv = ["sweep", "llama3-405b-16k", *[f"--vary={v}" for v in FLAGSHIP_AXES], "--top", "5"]
    assert main([*argv, "-o", str(local), "--workers", "1"]) == 0
    local_out = capsys.readouterr().out
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0") as cluster:
        assert main([*argv, "-o", str(remote), "--dask", cluster.scheduler_address]) == 0
    dask_out = capsys.readouterr().out
    assert remote.read_bytes() == local.read_bytes()
    assert len(remote.read_bytes().splitlines()) == 1000
    assert f"Dask at {cluster.scheduler_address}" in dask_out
    table = local_out[local_out.index("best 5"):]
    assert dask_out[dask_out.index("best 5"):] == table


def test_two_worker_processes(estimator: Any) -> None:
    sw = plan("llama3-405b-16k", FLAGSHIP_AXES[:4], estimator)
    expected, ranking = local_records(sw)
    with LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
        sink = io.BytesIO()
        remote = sweep_to(sw, sink, dask=cluster.scheduler_address)
    assert sink.getvalue() == expected
    assert (remote.fit, remote.oom, remote.invalid) == (ranking.fit, ranking.oom, ranking.invalid)
    assert [o.index for o in remote.best()] == [o.index for o in ranking.best()]
