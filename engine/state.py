"""ClusterState and the one reducer that folds events into it.

There is exactly one way from events to pixels: every event source (live engine, file, pipe) feeds
`ClusterState.apply`, and the dashboard's widgets only read the state. Per-GPU state is numpy arrays.
This module imports neither SimPy nor Textual.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import schema
from .phases import CODE

HISTORY = 240        # samples kept for sparklines
EVENT_LOG = 500      # discrete events kept for the log


@dataclass
class JobStatus:
    name: str
    first_gpu: int
    gpus: int
    running: bool = False
    step: int = 0
    step_time_s: float = 0.0
    tokens_per_s: float = 0.0
    tflops_per_gpu: float = 0.0
    mfu: float = 0.0
    tokens: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)   # the header's job entry (layout, model, kind)


class ClusterState:
    """Everything the dashboard shows at simulated time `t`."""

    def __init__(self, header: dict[str, Any]) -> None:
        self.header = header
        self.topology: dict[str, int] = header["topology"]
        self.gpus = int(self.topology["gpus"])
        self.t = 0.0
        self.samples = 0
        self.util = np.zeros(self.gpus, dtype=np.float32)       # 0..1
        self.power_w = np.zeros(self.gpus, dtype=np.float32)
        self.phase = np.full(self.gpus, CODE["idle"], dtype=np.uint8)
        self.links: dict[str, np.ndarray] = {}                   # tier -> load 0..1 (one value, or one per pod)
        self.site_mw = 0.0
        self.jobs: dict[str, JobStatus] = {}
        for info in header.get("jobs", []):
            self.jobs[info["name"]] = JobStatus(info["name"], int(info["first_gpu"]), int(info["gpus"]), info=info)
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENT_LOG)
        self.site_mw_history: deque[float] = deque(maxlen=HISTORY)
        self.link_history: dict[str, deque[float]] = {}
        self.version = 0   # bumped on every change; widgets redraw when it moves

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one event into the state."""
        kind = event["type"]
        self.t = float(event.get("t", self.t))
        self.version += 1
        if kind == schema.SAMPLE:
            self._sample(event)
            return
        if kind == schema.STEP:
            job = self.jobs.get(event.get("job", ""))
            if job is not None:
                job.step = int(event.get("step", job.step))
                job.step_time_s = float(event.get("step_time_s", job.step_time_s))
                job.tokens_per_s = float(event.get("tokens_per_s", job.tokens_per_s))
                job.tflops_per_gpu = float(event.get("tflops_per_gpu", job.tflops_per_gpu))
                job.mfu = float(event.get("mfu", job.mfu))
                job.tokens = float(event.get("tokens_total", job.tokens))
            return
        if kind in (schema.JOB_START, schema.JOB_STOP):
            job = self.jobs.get(event.get("job", ""))
            if job is not None:
                job.running = kind == schema.JOB_START
        self.events.append(event)

    def _sample(self, event: dict[str, Any]) -> None:
        self.samples += 1
        if "util" in event:
            schema.rle_decode(event["util"], out=self.util)
            self.util *= np.float32(0.01)          # percent on the wire
        if "power_w" in event:
            schema.rle_decode(event["power_w"], out=self.power_w)
        if "phase" in event:
            schema.rle_decode(event["phase"], out=self.phase)
        for tier, load in event.get("links", {}).items():
            self.links[tier] = np.atleast_1d(np.asarray(load, dtype=np.float32))
            hist = self.link_history.setdefault(tier, deque(maxlen=HISTORY))
            hist.append(float(self.links[tier].max()))
        if "site_mw" in event:
            self.site_mw = float(event["site_mw"])
            self.site_mw_history.append(self.site_mw)
