"""The pipeline schedule: the bubble comes out of the SimPy schedule and matches the textbook formulas; the
wave-at-a-time evaluation used by searches gives the very same times."""

from __future__ import annotations

import numpy as np
import pytest
from clustertop.engine.config.errors import UserError
from clustertop.engine.model import pipeline
from clustertop.engine.model.pipeline import check, evaluate, order, peak_inflight, simulate, split_layers


def _uniform(p: int, v: int, f: float = 1.0, b: float = 2.0):  # type: ignore[no-untyped-def]
    fwd = [[[("compute", f / v)] for _ in range(v)] for _ in range(p)]
    bwd = [[[("compute", b / v)] for _ in range(v)] for _ in range(p)]
    return fwd, bwd


@pytest.mark.parametrize("schedule,p,m", [("1f1b", 4, 8), ("1f1b", 8, 32), ("1f1b", 16, 16), ("gpipe", 4, 8),
                                          ("gpipe", 8, 3)])
def test_bubble_is_p_minus_1_over_m(schedule: str, p: int, m: int) -> None:
    fwd, bwd = _uniform(p, 1)
    run = simulate(schedule, p, 1, m, fwd, bwd, [0.0] * p, [0.0] * p)
    ideal = 3.0 * m
    assert (run.end_s - ideal) / ideal == pytest.approx((p - 1) / m)


@pytest.mark.parametrize("p,v,m", [(4, 2, 8), (4, 4, 8), (8, 2, 16), (16, 4, 32)])
def test_interleaved_bubble_is_p_minus_1_over_v_m(p: int, v: int, m: int) -> None:
    fwd, bwd = _uniform(p, v)
    run = simulate("1f1b", p, v, m, fwd, bwd, [0.0] * p, [0.0] * p)
    ideal = 3.0 * m
    assert (run.end_s - ideal) / ideal == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("p,m", [(35, 8), (35, 70), (12, 64), (4, 4)])
def test_blocking_sends_pay_every_transfer_in_every_slot(p: int, m: int) -> None:
    """Non-interleaved 1F1B with blocking point-to-point (DeepSpeed's pipeline engine, Megatron without
    interleaving): each forward and each backward ends with its transfer, so each of the m + p - 1 slots of
    the textbook schedule costs F + B + 2 s: step = (m + p - 1) (F + B + 2 s), deep pipelines with few
    microbatches (PP 35, 8 microbatches: a bubble of 81%) included, less the transfers the first and last
    stages do not make."""
    from clustertop.engine.model.step import _blocking_sends

    f, b, s = 1.0, 2.0, 0.05
    fwd, bwd = _uniform(p, 1, f, b)
    frozen = tuple(tuple(tuple(c) for c in stage) for stage in fwd), \
        tuple(tuple(tuple(c) for c in stage) for stage in bwd)
    fwd2, bwd2, send, send_b = _blocking_sends(*frozen, (s,) * p, (s,) * p)
    run = simulate("1f1b", p, 1, m, fwd2, bwd2, send, send_b)
    formula = (m + p - 1) * (f + b + 2 * s)
    assert formula - s * 4 <= run.end_s <= formula + 1e-9
    # the same pipeline without the transfers: the bubble formula itself
    plain = simulate("1f1b", p, 1, m, *_uniform(p, 1, f, b), [0.0] * p, [0.0] * p)
    assert plain.end_s == pytest.approx((m + p - 1) * (f + b))


def test_intervals_are_contiguous_and_classify_waiting() -> None:
    p, m = 4, 6
    fwd, bwd = _uniform(p, 1)
    run = simulate("1f1b", p, 1, m, fwd, bwd, [0.1] * p, [0.1] * p)
    stages = [run.intervals.of_stage(r) for r in range(p)]
    for intervals in stages:
        t = 0.0
        for a, b, phase in intervals:
            assert a >= t - 1e-12 and b > a
            assert phase in ("compute", "bubble", "pp")
            t = b
        busy = sum(b - a for a, b, ph in intervals if ph == "compute")
        assert busy == pytest.approx(3.0 * m)
    phases = {ph for intervals in stages for _, _, ph in intervals}
    assert {"bubble", "pp"} <= phases
    # transfers lengthen the step by at least one forward and one backward hop per boundary
    assert run.end_s >= 3.0 * m + 3.0 * (p - 1) / 1 * 1.0 + 2 * (p - 1) * 0.1 - 1e-9


def test_slowest_stage_sets_the_pace() -> None:
    p, m = 4, 32
    fwd, bwd = _uniform(p, 1)
    fwd[2][0] = [("compute", 1.5)]
    bwd[2][0] = [("compute", 3.0)]
    run = simulate("1f1b", p, 1, m, fwd, bwd, [0.0] * p, [0.0] * p)
    assert run.end_s >= 4.5 * m


def test_first_stage_holds_p_microbatches_under_1f1b_and_m_under_gpipe() -> None:
    p, m = 8, 32
    assert peak_inflight("1f1b", p, 1, m, [[1.0]] * p) == [p - r for r in range(p)]
    assert peak_inflight("gpipe", p, 1, m, [[1.0]] * p) == [m] * p
    # interleaving keeps more chunks alive on the first stage, each 1/v of the stage
    v = 2
    held = peak_inflight("1f1b", p, v, m, [[1.0 / v] * v] * p)[0]
    assert p < held <= p + (p - 1) / v + 1


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 4, 1, 8), ("1f1b", 8, 1, 3), ("gpipe", 4, 1, 6),
                                            ("1f1b", 4, 2, 8), ("1f1b", 8, 3, 16)])
def test_peak_inflight_adds_up_each_stages_operations_in_order(schedule: str, p: int, v: int, m: int) -> None:
    """Bit for bit what going through each stage's operations one at a time gives (a forward adds its chunk's
    bytes, a backward takes them off)."""
    chunk_bytes = np.random.default_rng(p + v + m).uniform(1e8, 1e9, size=(p, v))
    walked = []
    for r, stage in enumerate(order(schedule, p, v, m, r) for r in range(p)):
        held, peak = 0.0, 0.0
        for kind, c, _ in stage:
            held = held + (float(chunk_bytes[r][c]) if kind == "F" else -float(chunk_bytes[r][c]))
            peak = max(peak, held)
        walked.append(peak)
    assert peak_inflight(schedule, p, v, m, chunk_bytes) == walked


def test_every_operation_runs_once() -> None:
    p, v, m = 4, 2, 8
    for r in range(p):
        ops = order("1f1b", p, v, m, r)
        assert sorted(ops) == sorted({(k, c, i) for k in "FB" for c in range(v) for i in range(m)})


def test_interleaving_needs_whole_rounds() -> None:
    assert check("1f1b", 4, 2, 6) is not None
    assert check("gpipe", 4, 2, 8) is not None
    assert check("1f1b", 4, 2, 8) is None
    fwd, bwd = _uniform(4, 2)
    with pytest.raises(UserError):
        simulate("1f1b", 4, 2, 6, fwd, bwd, [0.0] * 4, [0.0] * 4)


def test_llama3_layers_per_stage() -> None:
    assert split_layers(126, 16) == [7] + [8] * 14 + [7]
    assert sum(split_layers(126, 64)) == 126
    assert split_layers(32, 4) == [8, 8, 8, 8]
    with pytest.raises(UserError):
        split_layers(10, 16)


@pytest.mark.parametrize("schedule,p,v,m,seed", [("1f1b", 4, 1, 8, 0), ("1f1b", 8, 1, 3, 1),
                                                 ("1f1b", 1, 1, 5, 2), ("gpipe", 4, 1, 6, 3),
                                                 ("1f1b", 4, 2, 8, 4), ("1f1b", 8, 3, 16, 5),
                                                 ("1f1b", 16, 4, 32, 6)])
@pytest.mark.parametrize("per_wave_min", [0, 10**9])      # numpy over the waves; Python over the operations
def test_evaluate_gives_the_simulated_times_bit_for_bit(schedule: str, p: int, v: int, m: int, seed: int,
                                                        per_wave_min: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "PER_WAVE_MIN", per_wave_min)
    # uneven stages and chunks, several segments (some empty), uneven transfers, some of them zero
    rng = np.random.default_rng(seed)

    def segments():  # type: ignore[no-untyped-def]
        return [[[("compute", float(rng.uniform(0.5, 2.0))),
                  ("tp", float(rng.choice([0.0, rng.uniform(0, 0.3)]))),
                  ("compute", float(rng.uniform(0, 0.1)))] for _ in range(v)] for _ in range(p)]

    fwd, bwd = segments(), segments()
    send_f = [float(x) for x in rng.choice([0.0, 0.05, 0.4], size=p)]
    send_b = [float(x) for x in rng.choice([0.0, 0.05, 0.4], size=p)]
    simulated = simulate(schedule, p, v, m, fwd, bwd, send_f, send_b)
    evaluated = evaluate(schedule, p, v, m, fwd, bwd, send_f, send_b)
    for name in ("produced", "start", "end"):
        assert np.array_equal(getattr(simulated, name), getattr(evaluated, name), equal_nan=True), name
    for name in ("stage", "start", "end", "phase"):
        assert np.array_equal(getattr(simulated.intervals, name), getattr(evaluated.intervals, name)), name
    assert simulated.last_backward == evaluated.last_backward
    # the seconds per phase, summed without building the intervals, are what the intervals add up to
    assert np.allclose(evaluated.phase_seconds(), evaluated.intervals.phase_seconds(), rtol=1e-12, atol=0)
    assert simulated.end_s > m * 2 * 0.5     # it did run: at least every forward and backward of one stage


@pytest.mark.parametrize("schedule,p,v,m", [("gpipe", 1, 1, 4), ("1f1b", 1, 1, 3), ("1f1b", 4, 2, 8)])
@pytest.mark.parametrize("per_wave_min", [0, 10**9])
def test_evaluate_matches_with_operations_that_take_no_time(schedule: str, p: int, v: int, m: int,
                                                            per_wave_min: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "PER_WAVE_MIN", per_wave_min)
    fwd = [[[("compute", 0.0)] for _ in range(v)] for _ in range(p)]           # forwards take no time
    bwd = [[[("compute", 1.0), ("tp", 0.0)] for _ in range(v)] for _ in range(p)]
    sends = [0.0] * p
    simulated = simulate(schedule, p, v, m, fwd, bwd, sends, sends)
    evaluated = evaluate(schedule, p, v, m, fwd, bwd, sends, sends)
    for name in ("produced", "start", "end"):
        assert np.array_equal(getattr(simulated, name), getattr(evaluated, name), equal_nan=True), name
    assert evaluated.end_s >= m * 1.0                                          # every backward of a stage


def _cases(schedule: str, v: int):  # type: ignore[no-untyped-def]
    for p in (1, 2, 3, 4, 7, 16):
        for m in (1, 2, 3, 5, 8, 16, 33, 64):
            if check(schedule, p, v, m) is None:
                yield p, m


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("1f1b", 2), ("1f1b", 5), ("gpipe", 1)])
def test_program_runs_each_stages_operations_in_order(schedule: str, v: int) -> None:
    """The program's closed forms (where each stage runs its i-th forward and backward, what it waits for)
    are the schedule's order, and each operation waits for the one the schedule says."""
    for p, m in _cases(schedule, v):
        program = pipeline._program(schedule, p, v, m)
        kind, chunk, micro = pipeline._operations(schedule, p, v, m, np.arange(p)[:, None])
        assert np.array_equal(program.kind, kind) and np.array_equal(program.chunk, chunk), (p, m)
        ids = program.ids
        assert np.array_equal(np.sort(ids.ravel()), np.arange(ids.size))
        assert np.array_equal(ids, ((kind * p + np.arange(p)[:, None]) * v + chunk) * m + micro)
        waits = {(r, k): (int(program.source[r, k]) // (2 * m * v), int(program.source[r, k]) % (2 * m * v))
                 for r in range(p) for k in range(2 * m * v) if program.source[r, k] >= 0}
        for (r, k), (r2, k2) in waits.items():
            c = chunk[r, k]
            assert (kind[r, k], micro[r, k]) == (kind[r2, k2], micro[r2, k2])      # the same microbatch's
            if kind[r, k] == 0:       # the previous virtual stage's forward
                assert (r2, chunk[r2, k2]) == ((r - 1, c) if r else (p - 1, c - 1))
            else:                     # the next virtual stage's backward
                assert (r2, chunk[r2, k2]) == ((r + 1, c) if r < p - 1 else (0, c + 1))
        firsts = (kind == 0) & (chunk == 0) & (np.arange(p)[:, None] == 0)
        lasts = (kind == 1) & (chunk == v - 1) & (np.arange(p)[:, None] == p - 1)
        assert len(waits) == kind.size - firsts.sum() - lasts.sum()
        last = [[max(k for k in range(2 * m * v) if kind[r, k] == 1 and chunk[r, k] == c) for c in range(v)]
                for r in range(p)]
        assert program.last_backward.tolist() == last


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("1f1b", 2), ("1f1b", 5), ("gpipe", 1)])
def test_waves_from_the_closed_form_are_the_walked_ones(schedule: str, v: int) -> None:
    """The closed form of the schedule's waves (raised where it is short) is the one-operation-at-a-time walk:
    exact for 1F1B and GPipe, a round or two for interleaving, and never the fallback."""
    for p, m in _cases(schedule, v):
        program = pipeline._program(schedule, p, v, m)
        walked = pipeline._walked_waves(schedule, p, v, m, program).reshape(p, -1)
        guess = pipeline._wave_guess(schedule, p, v, m)
        if v == 1:
            assert np.array_equal(program.per_operation(*guess), walked), (schedule, p, v, m)
        layered = pipeline._longest_chains(program, *guess, 3)
        assert layered is not None and np.array_equal(layered[2], walked), (p, v, m)
        assert np.array_equal(program.per_operation(*layered[:2]), walked)


def test_longest_chains_gives_up_when_the_rounds_run_out() -> None:
    program = pipeline._program("1f1b", 8, 1, 8)
    zeros = np.zeros((8, 8), dtype=np.intp)
    assert pipeline._longest_chains(program, zeros, zeros, 2) is None
    layered = pipeline._longest_chains(program, zeros, zeros, 100)
    assert layered is not None
    assert np.array_equal(layered[2].ravel(), pipeline._walked_waves("1f1b", 8, 1, 8, program))


@pytest.mark.parametrize("per_wave_min", [0, 10**9])
def test_walked_waves_stand_in_when_the_rounds_run_out(per_wave_min: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """If raising the guess gave up, the walked waves give the same times."""
    monkeypatch.setattr(pipeline, "PER_WAVE_MIN", per_wave_min)
    p, v, m = 4, 2, 8
    fwd, bwd = _uniform(p, v)
    sends = [0.1] * p
    expected = evaluate("1f1b", p, v, m, fwd, bwd, sends, sends)
    monkeypatch.setattr(pipeline, "_longest_chains", lambda *args: None)
    pipeline._waves.cache_clear()
    try:
        walked = evaluate("1f1b", p, v, m, fwd, bwd, sends, sends)
    finally:
        pipeline._waves.cache_clear()
    for name in ("produced", "start", "end"):
        assert np.array_equal(getattr(expected, name), getattr(walked, name), equal_nan=True), name


@pytest.mark.parametrize("schedule,p,v,m", [("1f1b", 64, 1, 64), ("1f1b", 64, 1, 4), ("1f1b", 16, 2, 16),
                                            ("1f1b", 8, 3, 24), ("gpipe", 16, 1, 64), ("1f1b", 1, 1, 5)])
def test_wave_slots_hold_every_operation_once_in_wave_order(schedule: str, p: int, v: int, m: int) -> None:
    """The waves as rows of every stage's clock: each operation in its own slot, in its stage's column, its
    stage's operations in later and later waves, its input's producer in an earlier wave; what the loop
    reads per wave is the operation's (or, where the stage has none, NaN for the input and a zero duration);
    the walk goes through the operations in wave order."""
    waves = pipeline._waves(schedule, p, v, m)
    program = pipeline._program(schedule, p, v, m)
    n, size = 2 * p * v * m, waves.size
    slot = waves.slot
    assert len(set(slot.ravel().tolist())) == n and slot.max() < waves.count * p
    assert np.array_equal(slot % p, np.broadcast_to(np.arange(p)[:, None], slot.shape))
    assert np.all(np.diff(slot // p, axis=1) > 0)
    has_input = program.source >= 0
    assert np.array_equal(waves.input_of < size, has_input)
    assert np.all(waves.input_of[has_input] // p < (slot // p)[has_input])
    empty = np.ones(waves.count * p, dtype=bool)
    empty[slot.ravel()] = False
    assert np.array_equal(waves.dep.ravel()[slot.ravel()], waves.input_of.ravel())
    assert np.all(waves.dep.ravel()[empty] == size)
    assert np.array_equal(waves.segment.ravel()[slot.ravel()], program.segment.ravel())
    assert np.all(waves.segment.ravel()[empty] == 2 * p * v)        # the zero past the durations
    assert np.array_equal(waves.delay.ravel()[slot.ravel()], program.stage_kind.ravel())
    assert np.all(waves.delay.ravel()[empty] == 2 * p)              # the zero past the transfers
    assert np.all(np.diff(slot.ravel()[waves.walk_order]) > 0)
