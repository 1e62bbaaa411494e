"""A job's chunks as a grid of distinct ones: the same layers, MoE layers and blocks per virtual stage as the
split layer by layer gives, each distinct chunk and stage once, and the step model's arrays over the stages
agreeing with the pipeline run they come from."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from clustertop.engine.config import scenario
from clustertop.engine.model import chunks, step
from clustertop.engine.model import compute as cm
from clustertop.engine.model.estimate import estimate
from clustertop.engine.model.pipeline import split_layers

DSV3 = scenario.load("deepseek-v3-2048").jobs[0].model
LLAMA = scenario.load("llama3-405b-16k").jobs[0].model
MOE_NO_MTP = dataclasses.replace(DSV3, mtp_layers=0)


@pytest.mark.parametrize("model,p,v", [(LLAMA, 16, 4), (LLAMA, 64, 1), (LLAMA, 9, 2), (DSV3, 16, 1),
                                       (DSV3, 8, 3), (MOE_NO_MTP, 12, 2), (LLAMA, 1, 1)])
def test_the_grid_holds_each_virtual_stage_as_the_layer_by_layer_split(model, p, v) -> None:  # type: ignore[no-untyped-def]
    g = chunks.grid(model, p, v)
    counts = split_layers(model.layers + model.mtp_layers, p * v)
    if model.mtp_layers:                    # the modules take the last chunk's places (chunks.py)
        counts[-1] -= model.mtp_layers
        for i in range(len(counts) - 1, 0, -1):
            if counts[i] < 0:
                counts[i - 1], counts[i] = counts[i - 1] + counts[i], 0
    first = 0
    for vs, n in enumerate(counts):
        c, r = divmod(vs, p)
        st = g.chunks[g.at[r, c]]
        moe = sum(cm.is_moe_layer(model, i) for i in range(first, first + n))
        assert (st.layers, st.moe, st.embedding, st.output) == (n, moe, vs == 0, vs == p * v - 1)
        assert st.mtp == (model.mtp_layers if vs == p * v - 1 else 0)
        assert st.moe_first == cm.is_moe_layer(model, first)
        assert g.layers[r, c] == n
        first += n
    # each distinct chunk once, each distinct stage once, in the order they first come
    assert len(set(g.chunks)) == len(g.chunks)
    assert len(set(g.stages)) == len(g.stages)
    assert [tuple(row) for row in g.at.tolist()] == [g.stages[k] for k in g.stage_at]
    assert sorted(set(g.stage_at), key=g.stage_at.index) == list(range(len(g.stages)))


def test_stages_alike_share_one_tuple() -> None:
    g = chunks.grid(LLAMA, 16, 4)
    rows = g.spread(g.chunks)
    assert len(g.stages) == 3 and rows[1] is rows[14]           # the middle stages: one tuple
    columns = chunks.stage_columns(LLAMA, 8, 1, 16, 4)
    facts = [columns.kinds[k] for k in columns.at.tolist()]
    assert facts[1] is facts[14] and facts[0] != facts[1]
    assert columns.params.tolist() == [f.params for f in facts]
    assert columns.layers.tolist() == [f.layers for f in facts] == [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                                                                   8, 7]


def test_blocking_sends_build_each_distinct_stage_once() -> None:
    """Stages with the same chunks sending alike get one tuple (a 64-stage pipeline builds three)."""
    a, b = (("compute", 1.0),), (("compute", 2.0),)
    p = 64
    fwd = ((a,),) * p
    bwd = ((b,),) * p
    fwd2, bwd2, send, send_b = step._blocking_sends(fwd, bwd, (0.5,) * p, (0.25,) * p)
    assert fwd2[0] == ((("compute", 1.0), ("pp", 0.5)),) and fwd2[-1] == (a,)    # the last sends no output
    assert bwd2[0] == (b,) and bwd2[1] == ((("compute", 2.0), ("pp", 0.25)),)   # the first no gradient
    assert len({id(s) for s in fwd2}) == 2 and len({id(s) for s in bwd2}) == 2
    assert send == send_b == (0.0,) * p


def test_last_backward_arrays_are_the_runs() -> None:
    s = scenario.load("llama3-405b-16k")
    job = s.jobs[0]
    model = step.JobModel(s.cluster, job)
    cfg = step.Config(int(job.micro_batch), int(job.virtual_stages), str(job.recompute))
    g = model.grid(cfg.virtual_stages)
    passes = [model._chunk_passes(st, cfg.micro_batch, cfg.recompute) for st in g.chunks]
    fwd, bwd = g.spread([f for f, _ in passes]), g.spread([b for _, b in passes])
    p, v, m = job.pp, cfg.virtual_stages, model.per_replica // cfg.micro_batch
    run = step._pipeline(False, "1f1b", p, v, m, fwd, bwd, (1e-4,) * p, (1e-4,) * p)
    b0, b1 = step._last_backward(run)
    assert np.array(run.last_backward).tolist() == np.stack([b0, b1], axis=2).tolist()
    assert run.ends == run.end[:, -1].tolist()


def test_the_fast_estimate_of_a_deep_pipeline_costs_each_distinct_chunk_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Megatron's 1T run: 64 stages of three distinct chunks (the embedding's, the middle, the output's), each
    chunk's passes computed once and each layer cost looked up once per estimate."""
    from benchmarks.bench_estimate import megatron_1t

    seen: list[object] = []
    real = cm.layer_cost

    def counted(*args):  # type: ignore[no-untyped-def]
        seen.append(args)
        return real(*args)

    monkeypatch.setattr(cm, "layer_cost", counted)
    job = estimate(megatron_1t(), plan=False, hints=False).jobs[0]
    assert job.fits and job.step_time_s
    assert len(seen) == 1
