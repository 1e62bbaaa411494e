"""A job's layers in pipeline chunks: which layers each virtual stage (chunk) holds, and what a pipeline
stage holds on one GPU (parameters, expert parameters, its largest layer, MoE and output layers).

Layers split as engine/model/pipeline.py's split_layers says (the first and last stages get fewer: they also
hold the embedding and the output layer); a model's multi-token prediction modules (DeepSeek-V3's MTP) sit
after the last layer, on the last virtual stage, and count as layers there in the split (Megatron-Core puts
them on the last pipeline stage); with v interleaved chunks per stage, stage r holds virtual stages
r, p + r, 2p + r, ... Cached per model and layout: a sweep evaluates thousands of configurations of a few
layouts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..config.catalog import Model
from . import compute as cm
from .pipeline import split_layers


@dataclass(frozen=True)
class Chunk:
    """One virtual stage (chunk): its layers and blocks."""

    first_layer: int
    layers: int
    embedding: bool
    output: bool
    moe: int = 0          # how many of its layers are MoE layers
    mtp: int = 0          # multi-token prediction modules (the last chunk's, after its layers)

    @property
    def dense(self) -> int:
        return self.layers - self.moe


@lru_cache(maxsize=256)
def chunks(model: Model, p: int, v: int) -> tuple[tuple[Chunk, ...], ...]:
    """chunks[r][c]: the virtual stage c * p + r of stage r."""
    counts = split_layers(model.layers, p * v)
    if model.mtp_layers:
        counts = split_layers(model.layers + model.mtp_layers, p * v)
        counts[-1] -= model.mtp_layers      # the MTP modules take the last chunk's places, or earlier ones'
        for i in range(len(counts) - 1, 0, -1):
            if counts[i] < 0:
                counts[i - 1] += counts[i]
                counts[i] = 0
    starts = list(itertools.accumulate([0] + counts))
    out = [[Chunk(0, 0, False, False)] * v for _ in range(p)]
    for vs, n in enumerate(counts):
        c, r = divmod(vs, p)
        moe = sum(cm.is_moe_layer(model, i) for i in range(starts[vs], starts[vs] + n)) if model.is_moe else 0
        last = vs == p * v - 1
        out[r][c] = Chunk(starts[vs], n, vs == 0, last, moe, model.mtp_layers if last else 0)
    return tuple(map(tuple, out))


@dataclass(frozen=True)
class StageFacts:
    """What one pipeline stage holds (all its chunks), on one GPU."""

    params: float
    expert_params: float
    largest_layer_params: float
    layers: int
    moe: bool                 # holds a MoE layer
    output: bool              # holds the output layer


def chunk_params(model: Model, tp: int, ep: int, pp: int, st: Chunk) -> float:
    """Parameters of one chunk on one GPU (TP- and EP-sharded)."""
    p = st.dense * cm.layer_params_per_gpu(model, False, tp, ep)
    if st.moe:
        p += st.moe * cm.layer_params_per_gpu(model, True, tp, ep)
    emb = model.vocab * model.hidden / tp
    if st.embedding:
        p += emb
    if st.output and not (model.tied_embeddings and pp == 1):
        p += emb
    if st.mtp:
        # each module: its layer, the projection of [embedding; hidden] (2h -> h) and two norms; the modules
        # look up the next tokens' embeddings, so the last stage holds the embedding table too
        p += st.mtp * (cm.layer_params_per_gpu(model, cm.mtp_is_moe(model), tp, ep)
                       + 2 * model.hidden * model.hidden / tp + 2 * model.hidden)
        if not st.embedding:
            p += emb
    return p


def expert_params(model: Model, tp: int, ep: int, st: Chunk) -> float:
    """Expert parameters of one chunk on one GPU (its MoE layers' experts, TP- and EP-sharded)."""
    layers = st.moe + (st.mtp if cm.mtp_is_moe(model) else 0)
    if not layers:
        return 0.0
    experts = model.experts * cm._mlp_params(model.hidden, model.moe_ffn, model.ffn_activation)
    return layers * experts / tp / ep


@lru_cache(maxsize=256)
def stage_facts(model: Model, tp: int, ep: int, pp: int, v: int) -> tuple[StageFacts, ...]:
    """What each pipeline stage holds on one GPU, all its chunks together (stages mostly hold chunks of the
    same blocks: each distinct one's parameters are counted once)."""
    params: dict[tuple[int, int, bool, bool, int], float] = {}

    def held(st: Chunk) -> float:
        key = (st.layers, st.moe, st.embedding, st.output, st.mtp)
        if key not in params:
            params[key] = chunk_params(model, tp, ep, pp, st)
        return params[key]

    # a chunk's largest layer is its first (embedding and output aside): a one-layer chunk of its kind
    one_layer = {moe: chunk_params(model, tp, ep, pp, Chunk(0, 1, False, False, int(moe)))
                 for moe in (False, True)}

    def facts(stage: tuple[Chunk, ...]) -> StageFacts:
        return StageFacts(
            params=sum(held(st) for st in stage),
            expert_params=sum(expert_params(model, tp, ep, st) for st in stage),
            largest_layer_params=max((one_layer[cm.is_moe_layer(model, st.first_layer)] for st in stage
                                      if st.layers), default=0.0),
            layers=sum(st.layers for st in stage),
            moe=any(st.moe or st.mtp and cm.mtp_is_moe(model) for st in stage),
            output=any(st.output for st in stage))

    # stages mostly hold chunks of the same blocks (a deep pipeline's middle stages all alike): each distinct
    # one's facts made once (by what they depend on: each chunk's blocks and whether its first layer is MoE)
    made: dict[tuple[tuple[int, int, bool, bool, int, bool], ...], StageFacts] = {}
    out = []
    for stage in chunks(model, pp, v):
        key = tuple((st.layers, st.moe, st.embedding, st.output, st.mtp,
                     cm.is_moe_layer(model, st.first_layer)) for st in stage)
        found = made.get(key)
        if found is None:
            found = made[key] = facts(stage)
        out.append(found)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class StageColumns:
    """stage_facts as arrays over the stages (JobModel.memory computes every stage at once)."""

    params: np.ndarray
    expert_params: np.ndarray
    largest_layer_params: np.ndarray
    moe: np.ndarray
    output: np.ndarray


@lru_cache(maxsize=256)
def stage_columns(model: Model, tp: int, ep: int, pp: int, v: int) -> StageColumns:
    """stage_facts as read-only arrays over the stages."""
    facts = stage_facts(model, tp, ep, pp, v)
    columns = [np.array([getattr(f, name) for f in facts], dtype=dtype) for name, dtype in
               (("params", float), ("expert_params", float), ("largest_layer_params", float), ("moe", bool),
                ("output", bool))]
    for c in columns:
        c.flags.writeable = False                   # shared by every evaluation with this layout
    return StageColumns(*columns)
