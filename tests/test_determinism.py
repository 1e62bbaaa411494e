"""The same input draws the same screen on every machine: rankings break ties by a stable key (the GPU index),
never by what a partition or a SIMD sort happens to return on this CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from clustertop.tui.widgets.gpu_table import lowest


def _reference(score: np.ndarray, n: int) -> list[int]:
    return sorted(range(score.size), key=lambda i: (float(score[i]), i))[:n]


def _ties(size: int) -> np.ndarray:
    """Mostly one value, with runs of a few others: where argpartition's choice among ties varies by CPU."""
    score = np.zeros(size, dtype=np.float32)
    score[::7] = 0.5
    score[::13] = -1.0
    score[5::11] = 0.25
    return score


@pytest.mark.parametrize("size,n", [(5000, 40), (5000, 1), (5000, 5000), (16384, 50), (37, 36), (1, 5),
                                    (10, 0)])
def test_lowest_orders_ties_by_index(size: int, n: int) -> None:
    score = _ties(size)
    assert lowest(score, n).tolist() == _reference(score, n)


def test_lowest_takes_nan_last() -> None:
    score = np.array([0.5, np.nan, 0.1, np.nan, 0.1])
    assert lowest(score, 5).tolist() == [2, 4, 0, 1, 3]


SCRIPT = """
import numpy as np
from clustertop.tui.widgets.gpu_table import lowest
score = np.zeros(20000, dtype=np.float32); score[::7] = 0.5; score[::13] = -1.0; score[5::11] = 0.25
print(lowest(score, 60).tolist())
"""


def _dispatch_targets() -> list[str]:
    try:
        from numpy._core import _multiarray_umath as umath  # numpy 2
    except ImportError:  # pragma: no cover - numpy 1.26
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    return [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]


def test_the_worst_gpus_are_the_same_through_every_numpy_code_path() -> None:
    """numpy picks its sort and partition kernels by CPU (AVX-512, AVX2, baseline): each path, forced with
    NPY_DISABLE_CPU_FEATURES, must list the same GPUs in the same order."""
    targets = _dispatch_targets()
    outputs = set()
    for k in range(len(targets) + 1):
        env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(targets[k:])}
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                              check=True)
        outputs.add(done.stdout)
    assert len(outputs) == 1
    score = _ties(20000)
    assert outputs.pop().strip() == str(_reference(score, 60))
