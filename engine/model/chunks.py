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
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

import numpy as np

from ..config.catalog import Model
from . import compute as cm
from .pipeline import split_layers

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Chunk:
    """One virtual stage (chunk): its layers and blocks. Chunks of the same blocks are equal wherever they sit
    (a deep pipeline's middle chunks are one Chunk)."""

    layers: int
    embedding: bool
    output: bool
    moe: int = 0              # how many of its layers are MoE layers
    mtp: int = 0              # multi-token prediction modules (the last chunk's, after its layers)
    moe_first: bool = False   # its first layer is an MoE layer (its largest one, embedding and output aside)

    @property
    def dense(self) -> int:
        return self.layers - self.moe


@dataclass(frozen=True, eq=False)
class Grid:
    """A job's chunks, each distinct one once: stage r's chunk c (virtual stage c * p + r) is
    chunks[at[r, c]]; the distinct stages (their chunks' indices, in order) are `stages`, stage r is
    stages[stage_at[r]]. What depends on a chunk's or a stage's blocks is computed once per distinct one and
    spread over the pipeline (`spread`)."""

    chunks: tuple[Chunk, ...]
    at: np.ndarray                           # [stage, chunk]: index into chunks
    layers: np.ndarray                       # [stage, chunk]: its layers
    stages: tuple[tuple[int, ...], ...]
    stage_at: tuple[int, ...]                # [stage]: index into stages

    def spread(self, per_chunk: Sequence[T]) -> tuple[tuple[T, ...], ...]:
        """[stage][chunk]: the value of each stage's chunks, from one value per distinct chunk (stages alike
        share one tuple)."""
        rows = [tuple(per_chunk[i] for i in row) for row in self.stages]
        return tuple(map(rows.__getitem__, self.stage_at))


def _counts(model: Model, n: int) -> list[int]:
    """Layers of each of the n virtual stages, the MTP modules (after the last layer) counted in the split."""
    if not model.mtp_layers:
        return split_layers(model.layers, n)
    counts = split_layers(model.layers + model.mtp_layers, n)
    counts[-1] -= model.mtp_layers      # the MTP modules take the last chunk's places, or earlier ones'
    for i in range(len(counts) - 1, 0, -1):
        if counts[i] < 0:
            counts[i - 1] += counts[i]
            counts[i] = 0
    return counts


@lru_cache(maxsize=256)
def grid(model: Model, p: int, v: int) -> Grid:
    """The chunks of p stages of v chunks each (virtual stage c * p + r on stage r), each distinct one
    once."""
    counts = _counts(model, p * v)
    if model.is_moe:           # layers from dense_layers on are MoE (compute.is_moe_layer)
        firsts = list(itertools.accumulate(counts[:-1], initial=0))
        d = model.dense_layers
        moe = [max(0, f + n - max(f, d)) for f, n in zip(firsts, counts)]
        moe_first = [f >= d for f in firsts]
    else:
        moe, moe_first = [0] * len(counts), [False] * len(counts)
    ends = [0] * len(counts)       # 2: the embedding's chunk, 1: the output's
    ends[0] += 2
    ends[-1] += 1
    keys = list(zip(counts, moe, moe_first, ends))
    index, distinct = _first_seen(keys)
    chunks = tuple(Chunk(n, bool(e & 2), bool(e & 1), k, model.mtp_layers if e & 1 else 0, first)
                   for n, k, first, e in distinct)
    at, layers = (np.ascontiguousarray(np.reshape(x, (v, p)).T) for x in (index, counts))
    for x in (at, layers):
        x.flags.writeable = False                   # shared by every evaluation with this layout
    stage_at, stages = _first_seen(list(zip(*(index[c * p:(c + 1) * p] for c in range(v)))))
    return Grid(chunks, at, layers, tuple(stages), tuple(stage_at))


def _first_seen(keys: list[K]) -> tuple[list[int], list[K]]:
    """Each key's place among the distinct keys, and the distinct keys in the order they first come."""
    distinct = list(dict.fromkeys(keys))
    place = {key: i for i, key in enumerate(distinct)}
    return list(map(place.__getitem__, keys)), distinct


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


def _facts(model: Model, tp: int, ep: int, pp: int, g: Grid) -> tuple[StageFacts, ...]:
    """What each distinct stage of the grid holds on one GPU (g.stages' order)."""
    params = [chunk_params(model, tp, ep, pp, st) for st in g.chunks]
    experts = [expert_params(model, tp, ep, st) for st in g.chunks]
    # a chunk's largest layer is its first (embedding and output aside): a one-layer chunk of its kind
    one_layer = {moe: chunk_params(model, tp, ep, pp, Chunk(1, False, False, int(moe)))
                 for moe in (False, True)}
    mtp_moe = cm.mtp_is_moe(model)
    out = []
    for row in g.stages:
        held = [g.chunks[i] for i in row]
        out.append(StageFacts(
            params=sum(map(params.__getitem__, row)),
            expert_params=sum(map(experts.__getitem__, row)),
            largest_layer_params=max((one_layer[st.moe_first] for st in held if st.layers), default=0.0),
            layers=sum(st.layers for st in held),
            moe=any(st.moe or st.mtp and mtp_moe for st in held),
            output=any(st.output for st in held)))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class StageColumns:
    """What each pipeline stage holds, as arrays over the stages (JobModel.memory computes every stage at
    once), and each distinct stage's facts (`kinds`, stage r's kinds[at[r]])."""

    params: np.ndarray
    expert_params: np.ndarray
    largest_layer_params: np.ndarray
    layers: np.ndarray
    moe: np.ndarray
    output: np.ndarray
    kinds: tuple[StageFacts, ...]
    at: np.ndarray


@lru_cache(maxsize=256)
def stage_columns(model: Model, tp: int, ep: int, pp: int, v: int) -> StageColumns:
    """What each pipeline stage holds on one GPU, all its chunks together, as read-only arrays over the
    stages (each distinct stage's facts made once)."""
    g = grid(model, pp, v)
    kinds = _facts(model, tp, ep, pp, g)
    at = np.array(g.stage_at)
    figures = np.array([(f.params, f.expert_params, f.largest_layer_params) for f in kinds])[at]
    flags = np.array([(f.moe, f.output) for f in kinds])[at]
    layers = np.array([f.layers for f in kinds])[at]
    for c in (figures, flags, layers, at):
        c.flags.writeable = False                   # shared by every evaluation with this layout
    return StageColumns(figures[:, 0], figures[:, 1], figures[:, 2], layers, flags[:, 0], flags[:, 1], kinds,
                        at)
