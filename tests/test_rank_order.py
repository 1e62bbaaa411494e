"""A job's rank order (`rank_order`): Llama 3's (TP, CP, PP, DP outermost) or Megatron-Core's
"tp-cp-ep-dp-pp" (PP outermost, EP the inner part of DP). The geometry (strides, stages, ranks), the model's
groups, the stream's header and the CLI agree on where every rank sits."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.config.geometry import RANK_ORDERS, JobGeometry
from clustertop.engine.model import collectives as col
from clustertop.engine.stream import header as stream_header

SIZES = {"tp": 2, "cp": 2, "pp": 3, "dp": 4}


def _geometry(order: str, ep: int = 2) -> JobGeometry:
    gpus = int(np.prod(list(SIZES.values())))
    return JobGeometry(0, gpus, SIZES["tp"], SIZES["cp"], SIZES["pp"], ep, RANK_ORDERS[order])


@pytest.mark.parametrize("order", sorted(RANK_ORDERS))
def test_every_gpu_has_one_rank_tuple_and_ranks_follow_the_strides(order: str) -> None:
    g = _geometry(order)
    seen = set()
    for gpu in range(g.gpus):
        r = g.ranks(gpu)
        seen.add(tuple(r[d] for d in SIZES))
        assert r["ep"] == r["dp"] % g.ep
        for d, n in SIZES.items():    # one stride along a dimension moves its rank by one, no other rank
            if r[d] + 1 < n:
                moved = g.ranks(gpu + g.stride(d))
                assert moved[d] == r[d] + 1
                assert all(moved[o] == r[o] for o in SIZES if o != d)
    assert seen == set(itertools.product(*(range(n) for n in SIZES.values())))
    stage = g.stage_of()
    assert [int(stage[gpu]) for gpu in range(g.gpus)] == [g.ranks(gpu)["pp"] for gpu in range(g.gpus)]
    first, unit_stage = g.units()
    assert [int(s) for s in unit_stage] == [g.ranks(int(f))["pp"] for f in first]


def test_megatron_order_puts_pp_outermost_and_ep_next_to_tp() -> None:
    llama, megatron = _geometry("tp-cp-pp-dp"), _geometry("tp-cp-ep-dp-pp")
    assert (llama.stride("pp"), llama.stride("dp")) == (4, 12)
    assert (megatron.stride("dp"), megatron.stride("ep"), megatron.stride("pp")) == (4, 4, 16)
    assert megatron.stage_of()[:16].max() == 0 and megatron.stage_of()[16] == 1


@pytest.mark.parametrize("order", sorted(RANK_ORDERS))
@pytest.mark.parametrize("dims", [("tp",), ("cp",), ("pp",), ("dp",), ("ep",), ("dp", "cp")])
def test_the_models_groups_are_the_geometrys(order: str, dims: tuple[str, ...]) -> None:
    """collectives.members builds each group from the order: its members differ only in `dims`."""
    g = _geometry(order)
    place = col.Placement(0, g.gpus, g.tp, g.cp, g.pp, g.dp, g.ep, g.order)
    groups = col.members(place, dims)
    size = int(np.prod([g.ep if d == "ep" else SIZES[d] for d in dims]))
    assert groups.shape == (g.gpus // size, size)
    assert sorted(groups.ravel().tolist()) == list(range(g.gpus))
    for row in groups:
        ranks = [g.ranks(int(gpu)) for gpu in row]
        fixed = [d for d in SIZES if d not in dims and not (d == "dp" and "ep" in dims)]
        assert all(r[d] == ranks[0][d] for r in ranks for d in fixed)
        if "ep" in dims:          # an EP group: consecutive DP ranks
            dp = [r["dp"] for r in ranks]
            assert dp == list(range(dp[0], dp[0] + g.ep))


def test_a_scenario_sets_it_and_the_header_carries_it(tmp_path: Path) -> None:
    base = scenario.load("deepseek-v3-2048")
    job = dataclasses.replace(base.jobs[0], rank_order="tp-cp-ep-dp-pp")
    entry = stream_header.job_entry(job)
    assert entry["rank_order"] == ["tp", "cp", "ep", "dp", "pp"]
    read = JobGeometry.from_entry(entry)
    assert read == JobGeometry.of(job) and read.stride("pp") == job.tp * job.cp * job.dp
    # an entry from before orders were written, or a hostile one, reads as the default order
    for bad in (None, "pp-dp", ["tp", 3], {"x": 1}):
        assert JobGeometry.from_entry({**entry, "rank_order": bad}).order == ("tp", "cp", "pp", "dp")


def test_an_unknown_order_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\n[cluster]\ngpu = "h100-sxm-80gb"\ngpus = 16\n'
                    '[[jobs]]\nmodel = "llama3.1-8b"\nseq_len = 4096\nglobal_batch = 16\ntp = 8\n'
                    'rank_order = "dp-pp-tp-cp"\n')
    out = subprocess.run([sys.executable, "-m", "clustertop", "estimate", str(path)], capture_output=True,
                         text=True, check=False)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank_order" in lines[0] and "tp-cp-ep-dp-pp" in lines[0], out.stderr
