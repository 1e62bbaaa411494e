"""Samples: exact means of every per-GPU quantity over each sample interval, computed per stage and broadcast.

The sample at time t carries the exact mean over the sample interval (t - interval, t] of every per-GPU
quantity: utilization and power are time averages, and the phase is the one the GPU spent most of the interval
in. Means are integrals of piecewise-constant functions, computed in closed form (whole steps times the
per-step integral, plus prefix integrals looked up in a cumulative table: engine/sim/activity.py): no rounding
to a time grid and no re-simulation of steps. The sample at t = 0 is the instantaneous state at the start.

Symmetry: all DP replicas of a stage follow the same timeline, so a sample is computed per stage (a (pp,
phases) matrix of durations per job) and broadcast over "unit runs" (one per stage per replica, tp * cp GPUs);
only GPUs that break the symmetry are computed apart and spliced into the runs: stragglers
(engine/sim/variability.py) and GPUs under an override (a failed node). Encoded arrays that did not change
since an earlier sample are reused. The phase shares (`phase_mix`) keep the symmetry on the wire: a row per
stage of each job, the GPUs that differ apart, so they cost a few dozen numbers at any size (docs/events.md).
The line is the stream's sample line (engine/stream/lines.py), with these parts already serialized.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import orjson

from ..config.cluster import DegradedLinks
from ..config.geometry import TIERS, Geometry, JobGeometry
from ..config.phases import CODE, PHASES
from ..model.power import PowerModel
from ..stream.lines import OPT_PART, rle_json, sample_line
from ..stream.schema import LINK_SCOPE, run_lengths
from .activity import NPH, WAIT
from .overrides import Override
from .track import JobTrack, idle_gpus

# Utilization (0..1) of a GPU in each phase: the share of its time it does useful work. Memory-bound phases
# keep the GPU busy at a low arithmetic rate.
PHASE_UTIL = np.zeros(NPH, dtype=np.float64)
PHASE_UTIL[CODE["compute"]] = 1.0
PHASE_UTIL[CODE["optimizer"]] = 0.5
PHASE_UTIL[CODE["memory"]] = 0.5

TARGET_SAMPLES = 5000
TARGET_GPU_SAMPLES = 1e9
NICE_INTERVALS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
                  3600.0, 7200.0, 21600.0, 86400.0)
MAX_SAMPLES = 10_000_000
INSTANT = 1e-9            # the window of the t = 0 sample (its instantaneous state)
COMPUTE = CODE["compute"]
CACHE_BYTES = 16 << 20    # encoded samples kept for reuse (Recent)
V = TypeVar("V")


def default_sample_interval(duration_s: float, gpus: int = 0) -> float:
    """A round interval giving at most about 5,000 samples (0.2 s for 10 min, 5 s for 6 h, 20 min for 54 d)
    and at most about TARGET_GPU_SAMPLES per-GPU values in all, so a site of 500K GPUs stays quick to record
    and replay (2 s for an hour of 433K GPUs)."""
    want = max(duration_s / TARGET_SAMPLES, duration_s * gpus / TARGET_GPU_SAMPLES)
    for nice in NICE_INTERVALS:
        if nice >= want:
            return nice
    return NICE_INTERVALS[-1]


class Sampler:
    """The samples of one run: its GPU blocks and unit runs, precomputed once; `line(a, b, t)` per sample. It
    reads the run's jobs and the overrides in force (a list the run keeps current)."""

    def __init__(self, tracks: list[JobTrack], topology: Geometry, power: PowerModel,
                 overrides: list[Override], degraded: Sequence[DegradedLinks] = ()) -> None:
        """Precompute the GPU blocks, the unit runs (a stage of a replica, or an idle gap) and pod weights."""
        self.tracks = tracks
        self.topology = topo = topology
        self.power = power
        self.overrides = overrides
        self.idle_gpus = idle_gpus(tracks, topo.gpus)
        self._cache: Recent[tuple[bytes, bytes, bytes]] = Recent()
        self.energy_mwh = 0.0  # the site's energy over the samples so far (exact means x their windows)
        self._mix_cache: Recent[bytes] = Recent()
        self.blocks: list[tuple[int, int, JobTrack | None]] = []
        pos = 0
        for track in sorted(self.tracks, key=lambda t: t.job.first_gpu):
            j = track.job
            if j.first_gpu > pos:
                self.blocks.append((pos, j.first_gpu - pos, None))
            self.blocks.append((j.first_gpu, j.gpus, track))
            pos = j.first_gpu + j.gpus
        if pos < topo.gpus:
            self.blocks.append((pos, topo.gpus - pos, None))
        # Rows: one per (job, stage), in track order, then the idle row. A unit run is tp*cp GPUs of one stage
        # of one replica (or an idle gap): GPUs that share every value unless something breaks the symmetry.
        self.row_offset = np.cumsum([0] + [t.job.pp for t in self.tracks])
        self.idle_row = int(self.row_offset[-1])
        starts: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for first, count, owner in self.blocks:
            if owner is None:
                starts.append(np.array([first]))
                rows.append(np.array([self.idle_row]))
                continue
            unit_first, unit_stage = JobGeometry.of(owner.job).units()
            starts.append(unit_first)
            rows.append(self.row_offset[owner.index] + unit_stage)
        self.unit_starts = np.concatenate(starts).astype(np.int64)
        self.unit_rows = np.concatenate(rows).astype(np.int64)
        self._units_unique = bool(np.all(np.diff(self.unit_starts) > 0))
        self._split: tuple[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None   # split's last
        slow = [t.stragglers.gpus for t in self.tracks if t.stragglers is not None]
        self.slow_gpus = np.concatenate(slow) if slow else np.zeros(0, np.int64)
        self.slow_order = np.argsort(self.slow_gpus, kind="stable")
        self._slow_sorted = bool(np.all(self.slow_order == np.arange(self.slow_order.size)))
        static_gpus = self.slow_gpus[self.slow_order]
        self.static_split = self.split(static_gpus)
        self._static_rows = self._rows_of(static_gpus)
        # each scope's tiers (links: in TIERS order)
        self._scope_tiers = [(scope, [(i, tier) for i, tier in enumerate(TIERS) if LINK_SCOPE[tier] == scope])
                             for scope in dict.fromkeys(LINK_SCOPE[tier] for tier in TIERS)]
        self.scopes = {"pod": _Blocks(self.tracks, topo.gpus, topo.gpus_per_pod),
                       "building": _Blocks(self.tracks, topo.gpus, topo.gpus_per_building)}
        # Capacity left of each tier's blocks (cluster.degraded):
        # the same traffic is a larger share of fewer links.
        for d in degraded:
            if d.tier not in LINK_SCOPE:
                continue
            blocks = self.scopes[LINK_SCOPE[d.tier]]
            row = blocks.capacity.setdefault(d.tier, np.ones(blocks.count))
            if d.pod is None:
                row *= d.capacity
            elif 0 <= d.pod * topo.gpus_per_pod < topo.gpus:
                row[d.pod * topo.gpus_per_pod // blocks.size] *= d.capacity

    def split(self, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit runs with each of `gpus` (sorted, unique) a run of its own:
        (starts, rows, index of each GPU)."""
        if gpus.size == 0:
            return self.unit_starts, self.unit_rows, np.zeros(0, np.int64)
        key = gpus.dtype.str.encode() + gpus.tobytes()
        if self._split is not None and self._split[0] == key:        # the same GPUs as the last time
            return self._split[1]
        cuts = np.concatenate([gpus, gpus + 1])
        cuts = np.unique(cuts[cuts < self.topology.gpus])       # few: the GPUs that break the symmetry
        units = self.unit_starts                                  # many, sorted: merge, do not re-sort
        at = np.searchsorted(units, cuts)
        new = cuts[(at >= units.size) | (units[np.minimum(at, units.size - 1)] != cuts)]
        where = np.searchsorted(units, new)
        starts = np.insert(units, where, new)
        new_rows = self.unit_rows[np.searchsorted(units, new, side="right") - 1]
        if self._units_unique:             # each unit keeps its row: only the new runs' rows are looked up
            rows = np.insert(self.unit_rows, where, new_rows)
        else:
            rows = self.unit_rows[np.searchsorted(units, starts, side="right") - 1]
        out = (starts, rows, np.searchsorted(starts, gpus))
        self._split = (key, out)
        return out

    def measure(self, a: float, b: float) -> Measurement:
        """Exact means over [a, b] (b > a) of what every stage of every job does;
        `b - a` tiny: the instant a."""
        span = b - a
        watts = self.power.phase_w
        gpu_watts = self.idle_gpus * self.power.idle_w
        stages: dict[int, StageMeans] = {}
        extras: dict[int, float] = {}
        loads = np.zeros((len(self.tracks), len(TIERS)))
        for track in self.tracks:
            d, load, extras[track.index] = track.integrals(a, b)
            means = StageMeans(d, np.rint(d @ PHASE_UTIL * (100.0 / span)).astype(np.int64), d @ watts / span,
                               d.argmax(axis=1))
            stages[track.index] = means
            j = track.job
            gpu_watts += float(means.power.sum()) * (j.tp * j.cp * j.dp)
            loads[track.index] = load / span
        overrides = [o for o in self.overrides if o.start < b and o.end > a]
        patch = self._patch(stages, extras, overrides, a, b)
        rows = None
        if patch is not None:
            rows = self.row_values(stages)
            gpu_watts += float(patch.power.sum() - rows[1][patch.rows].sum())
        return Measurement(a, b, stages, loads, gpu_watts, overrides, patch, rows)

    def _patch(self, stages: dict[int, StageMeans], extras: dict[int, float], overrides: list[Override],
               a: float, b: float) -> Patch | None:
        """Per-GPU means of the GPUs that break the symmetry: stragglers (`extras`: each job's seconds waiting
        for its slowest GPU), then overrides (later ones win)."""
        pos: list[np.ndarray] = []
        rows: list[np.ndarray] = []
        for track in self.tracks:
            st = track.stragglers
            if st is None:
                continue
            r = stages[track.index].durations[st.stage]
            extra = extras[track.index]
            if extra > 0:
                shift = st.phi * extra
                r[:, COMPUTE] += shift
                r[:, WAIT] = np.maximum(r[:, WAIT] - shift, 0.0)
            pos.append(st.gpus)
            rows.append(r)
        static = True
        for o in overrides:
            got = self._override_rows(stages, o, a, b)
            if got is not None:
                first, r = got
                pos.append(np.arange(first, first + r.shape[0]))
                rows.append(r)
                static = False
        if not pos:
            return None
        p, r = (pos[0], rows[0]) if len(pos) == 1 else (np.concatenate(pos), np.concatenate(rows))
        if static:
            if not self._slow_sorted:
                p, r = p[self.slow_order], r[self.slow_order]
        else:
            last = p.size - 1 - np.unique(p[::-1], return_index=True)[1]      # the last row of each GPU wins
            p, r = p[last], r[last]
        span = b - a
        return Patch(p, np.rint(r @ PHASE_UTIL * (100.0 / span)).astype(np.int64),
                     r @ self.power.phase_w / span, r.argmax(axis=1), r, static,
                     self._static_rows if static else self._rows_of(p))

    def _rows_of(self, gpus: np.ndarray) -> np.ndarray:
        """The row each of `gpus` follows without a patch."""
        rows: np.ndarray = self.unit_rows[np.searchsorted(self.unit_starts, gpus, side="right") - 1]
        return rows

    def row_values(self, stages: dict[int, StageMeans]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(util %, power W, phase) per row: the stages of every job in track order, then the idle row."""
        util = np.concatenate([stages[t.index].util for t in self.tracks] + [np.zeros(1, np.int64)])
        power = np.concatenate([stages[t.index].power for t in self.tracks] + [np.array([self.power.idle_w])])
        phase = np.concatenate([stages[t.index].phase for t in self.tracks] + [np.array([CODE["idle"]])])
        return util, power, phase

    def line(self, a: float, b: float, t: float) -> bytes:
        """The sample line at time t: exact means over [a, b]."""
        m = self.measure(a, b)
        util_b, power_b, phase_b, mix_b = self.arrays(m)
        by_tier: dict[str, list[float]] = {}
        for scope, tiers in self._scope_tiers:
            by_tier.update(self.scopes[scope].loads(tiers, m.loads))
        links: dict[str, Any] = {tier: by_tier[tier] for tier in TIERS}
        jobs = {}
        for track in self.tracks:
            status: dict[str, Any] = {"running": track.activity.running, "step": track.step,
                                      "tokens_total": track.tokens_total}
            status.update(track.last_kpi)
            d = track.driver
            if d is not None:
                elapsed = t - d.started
                status["effective_training_time"] = round(min(1.0, d.kept_productive_s() / elapsed), 4) \
                    if elapsed > 0 else 0.0
                status["interruptions"] = d.interruptions + d.planned
                status["tokens_lost"] = d.tokens_lost
            jobs[track.job.name] = status
        exact_mw = self.power.site_mw(m.gpu_watts, self.topology.gpus)
        if t > a:
            self.energy_mwh += exact_mw * (b - a) / 3600.0
        site_mw = round(exact_mw, 4)
        return sample_line(t, util=util_b, power_w=power_b, phase=phase_b, phase_mix=mix_b, links=links,
                           site_mw=site_mw, over_budget=self.power.over_budget(site_mw), jobs=jobs)

    def mix(self, stage_pct: list[np.ndarray], patch: Patch | None, patch_pct: np.ndarray | None) -> bytes:
        """`phase_mix`: each GPU's phase shares over the interval (integer percent of the phases that occur),
        by symmetry: a table of distinct shares, the row of each stage of each job (the reader broadcasts it
        over the job's layout, as the stage of a GPU follows from it), the row of GPUs without a job, and runs
        of GPUs that differ (stragglers, failed nodes). A cluster of any size costs a few dozen numbers."""
        idle = np.zeros((1, NPH), np.int64)
        idle[0, CODE["idle"]] = 100
        table = np.concatenate([*stage_pct, idle] + ([patch_pct] if patch_pct is not None else []))
        uniq, inverse = distinct_rows(table)
        cols = np.flatnonzero(uniq.any(axis=0))
        jobs = {t.job.name: inverse[self.row_offset[i]:self.row_offset[i + 1]]
                for i, t in enumerate(self.tracks)}
        out: dict[str, Any] = {"phases": [PHASES[c] for c in cols],
                               "shares": np.ascontiguousarray(uniq[:, cols]),
                               "jobs": jobs, "other": int(inverse[self.idle_row])}
        if patch is not None and patch_pct is not None:
            gpus, rows = patch.gpus, inverse[self.idle_row + 1:]
            new = np.ones(gpus.size, dtype=bool)
            new[1:] = (gpus[1:] != gpus[:-1] + 1) | (rows[1:] != rows[:-1])
            first = np.flatnonzero(new)
            out["gpus"] = {"at": gpus[first], "n": run_lengths(first, gpus.size), "v": rows[first]}
        return orjson.dumps(out, option=OPT_PART)

    def arrays(self, m: Measurement) -> tuple[bytes, bytes, bytes, bytes]:
        """The per-GPU arrays, run-length encoded: stage values broadcast over the unit runs, the patch
        spliced in, equal neighbours merged (schema.rle_arrays). Cached as serialized bytes for samples that
        come out the same."""
        span = m.b - m.a
        key: list[bytes] = []
        mix_key: list[bytes] = []
        stage_pct = []
        for track in self.tracks:
            s = m.stages[track.index]
            pct = percent(s.durations, span)
            stage_pct.append(pct)
            key += (s.util.tobytes(), s.watts.tobytes(), s.phase.tobytes())
            mix_key.append(pct.tobytes())
        p = m.patch
        patch_pct = percent(p.durations, span) if p is not None else None
        if p is not None and patch_pct is not None:
            key += (p.gpus.tobytes(), p.util.tobytes(), p.watts.tobytes(), p.phase.tobytes())
            mix_key += (p.gpus.tobytes(), patch_pct.tobytes())
        mix_bytes = self._mix_cache.get(tuple(mix_key))
        if mix_bytes is None:
            mix_bytes = self.mix(stage_pct, p, patch_pct)
            self._mix_cache.put(tuple(mix_key), mix_bytes, len(mix_bytes))
        cache_key = tuple(key)
        cached = self._cache.get(cache_key)
        if cached is not None:
            return (*cached, mix_bytes)
        util, power, phase = m.rows if m.rows is not None else self.row_values(m.stages)
        row_values = (util, np.rint(power).astype(np.int64), phase)
        if p is None:
            starts, rows, at = self.unit_starts, self.unit_rows, None
        elif p.static:
            starts, rows, at = self.static_split
        else:
            starts, rows, at = self.split(p.gpus)
        patched = (p.util, p.watts, p.phase) if p is not None else (None, None, None)
        n = self.topology.gpus
        out = []
        for values, extra in zip(row_values, patched):
            v = values[rows]
            if at is not None and extra is not None:
                v[at] = extra
            out.append(rle_json(v, starts, n))
        result = (out[0], out[1], out[2])
        self._cache.put(cache_key, result, sum(map(len, result)))
        return (*result, mix_bytes)

    def _override_rows(self, m_stages: dict[int, StageMeans], o: Override, a: float,
                       b: float) -> tuple[int, np.ndarray] | None:
        """Seconds in each phase over [a, b] of the GPUs of one override: (first GPU, rows (gpus, phases))."""
        lo, hi = max(a, o.start), min(b, o.end)
        first, last = max(o.first, 0), min(o.first + o.count, self.topology.gpus)
        if hi <= lo or last <= first:
            return None
        w = hi - lo
        rows = np.zeros((last - first, NPH))
        rows[:, CODE["idle"]] = (b - a) - w           # GPUs without a job: idle outside the override
        for track in self.tracks:
            j = track.job
            s, e = max(first, j.first_gpu), min(last, j.first_gpu + j.gpus)
            if e > s:
                stage = track.stage_index()[s - j.first_gpu:e - j.first_gpu]
                rows[s - first:e - first] = (m_stages[track.index].durations - track.durations(lo, hi))[stage]
        rows[:, CODE[o.phase]] += w
        np.maximum(rows, 0.0, out=rows)
        return first, rows


class Recent(Generic[V]):
    """Encoded parts of recent samples by key, for samples that come out the same: at most `entries`, and
    about `budget` bytes (a site's per-GPU arrays take megabytes each; the oldest go first)."""

    def __init__(self, entries: int = 256, budget: int = CACHE_BYTES) -> None:
        self.entries, self.budget = entries, budget
        self.items: dict[Any, tuple[V, int]] = {}
        self.size = 0

    def get(self, key: Any) -> V | None:
        got = self.items.get(key)
        return got[0] if got is not None else None

    def put(self, key: Any, value: V, size: int) -> None:
        items = self.items
        while items and (len(items) >= self.entries or self.size + size > self.budget):
            self.size -= items.pop(next(iter(items)))[1]
        items[key] = (value, size)
        self.size += size


def distinct_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an integer table in order of first appearance, and the index of each row's. A few
    dozen rows (the usual case): a dict of their bytes; more (a large override): numpy on a void view."""
    if table.shape[0] <= 256 and table.shape[1] > 0:
        seen: dict[bytes, int] = {}
        data, width = np.ascontiguousarray(table).tobytes(), table.itemsize * table.shape[1]   # row by row
        inverse = np.fromiter((seen.setdefault(data[at:at + width], len(seen))
                               for at in range(0, len(data), width)), np.int64, count=table.shape[0])
        first = np.zeros(len(seen), np.int64)
        first[inverse[::-1]] = np.arange(table.shape[0] - 1, -1, -1)
        return table[first], inverse
    rows = np.ascontiguousarray(table)
    void = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(void, return_index=True, return_inverse=True)
    return rows[first], inverse.reshape(-1)


def percent(durations: np.ndarray, span: float) -> np.ndarray:
    """Seconds per phase over a window as integer percent of it (rows: stages or GPUs)."""
    return np.rint(durations * (100.0 / span)).astype(np.int64)


@dataclass
class StageMeans:
    """One job over one window: per stage, seconds per phase and the means derived from them."""

    durations: np.ndarray     # (pp, phases) seconds
    util: np.ndarray          # (pp,) integer percent
    power: np.ndarray         # (pp,) W (float)
    phase: np.ndarray         # (pp,) dominant phase code

    @property
    def watts(self) -> np.ndarray:
        watts: np.ndarray = np.rint(self.power).astype(np.int64)
        return watts


@dataclass
class Patch:
    """Per-GPU means of the GPUs computed apart (stragglers, overrides), sorted by GPU."""

    gpus: np.ndarray          # GPU indices, sorted, unique
    util: np.ndarray          # integer percent
    power: np.ndarray         # W (float)
    phase: np.ndarray         # dominant phase code
    durations: np.ndarray     # (gpus, phases) seconds
    static: bool              # stragglers only (their GPUs are the precomputed ones)
    rows: np.ndarray          # the row each GPU would follow without the patch

    @property
    def watts(self) -> np.ndarray:
        watts: np.ndarray = np.rint(self.power).astype(np.int64)
        return watts


class _Blocks:
    """Pods or buildings: each job's share of each block's GPUs, and the capacity left of degraded tiers."""

    def __init__(self, tracks: list[JobTrack], gpus: int, size: int) -> None:
        self.size = size
        self.count = -(-gpus // size)
        present = np.minimum(size, gpus - np.arange(self.count) * size).astype(np.float64)
        self.weights = np.zeros((len(tracks), self.count))
        for track in tracks:
            j = track.job
            for b in range(j.first_gpu // size, (j.first_gpu + j.gpus - 1) // size + 1):
                lo, hi = max(j.first_gpu, b * size), min(j.first_gpu + j.gpus, (b + 1) * size)
                self.weights[track.index, b] = (hi - lo) / present[b]
        self.capacity: dict[str, np.ndarray] = {}

    def loads(self, tiers: list[tuple[int, str]], per_job: np.ndarray) -> dict[str, list[float]]:
        """Tiers' loads in each block, by tier (each of `tiers`: its column of `per_job`, (jobs, tiers), and
        its name): each job's load on it weighted by its share of the block's GPUs."""
        load = np.empty((len(tiers), self.count))
        for row, (i, tier) in enumerate(tiers):
            load[row] = per_job[:, i] @ self.weights
            if tier in self.capacity:
                load[row] /= self.capacity[tier]
        rounded: list[list[float]] = np.minimum(load, 1.0).round(4).tolist()
        return {tier: values for (_, tier), values in zip(tiers, rounded)}


@dataclass
class Measurement:
    """Everything a sample needs over [a, b]: per-job stage means, tier loads, GPU power, active overrides."""

    a: float
    b: float
    stages: dict[int, StageMeans]
    loads: np.ndarray          # (jobs, tiers) mean load 0..1
    gpu_watts: float
    overrides: list[Override]
    patch: Patch | None = None
    rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None     # row_values, when the patch needed them
