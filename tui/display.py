"""The dashboard's view-model at a time: the cluster's state (engine/stream/state.py's reducer) and what only
the display keeps of the stream's past: the event log, the sparkline history of site power and link loads, and
the site's energy so far (with what it cost). The seek index (tui/index.py) builds one for any time it seeks
to.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from clustertop.engine.config.scenario import Economics
from clustertop.engine.stream import schema
from clustertop.engine.stream.state import ClusterState

HISTORY = 240        # samples kept for sparklines
EVENT_LOG = 500      # discrete events kept for the log
_UNLOGGED = frozenset({schema.SAMPLE, schema.HEADER, schema.STEP})


def energy_mwh(site_mw: Any, seconds: float) -> float:
    """MWh of a sample: its mean site MW over the time since the previous sample."""
    return float(site_mw) * seconds / 3600.0 if site_mw is not None and seconds > 0 else 0.0


def link_peaks(links: Mapping[str, Any]) -> dict[str, float]:
    """Each tier's highest load in a sample's "links" (a value, or a list per pod or building), as the
    sparklines plot it."""
    peaks: dict[str, float] = {}
    for tier, load in links.items():
        if isinstance(load, (list, tuple, np.ndarray)):      # lists as parsed, float32 arrays as kept
            peaks[tier] = float(max(load)) if len(load) else 0.0
        else:
            peaks[tier] = float(load)
    return peaks


class DisplayState(ClusterState):
    """A ClusterState that also keeps what the dashboard shows of the past: every discrete event it folds goes
    to the log (`events`), every sample's site MW and link peaks to the sparklines, and its energy to
    `energy_mwh` (up to `energy_t`)."""

    def __init__(self, header: dict[str, Any]) -> None:
        super().__init__(header)
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENT_LOG)
        self.site_mw_history: deque[float] = deque(maxlen=HISTORY)
        self.link_history: dict[str, deque[float]] = {}
        self.energy_mwh = 0.0                # the site's energy over the samples so far
        self.energy_t = 0.0                  # ... up to this sample's time
        scenario = header.get("scenario")
        self.economics = Economics.of(scenario.get("economics") if isinstance(scenario, dict) else None)

    def fold(self, events: Iterable[dict[str, Any]]) -> None:
        """Fold events as the state does, keeping the log and the sparkline history of what they say."""
        for event in events:
            super().fold((event,))
            kind = event["type"]
            if kind == schema.SAMPLE:
                self.remember(float(event["t"]), event.get("site_mw"), link_peaks(event.get("links", {})))
            elif kind not in _UNLOGGED:
                self.events.append(event)

    def uses(self, kind: str) -> bool:
        """Whether folding an event of type `kind` changes more than the time: the log keeps it, or the state
        folds it."""
        return kind not in _UNLOGGED or super().uses(kind)

    def remember(self, t: float, site_mw: float | None, peaks: Mapping[str, float]) -> None:
        """One sample's point on the sparklines (its site MW, each tier's peak load) and its energy."""
        for tier, peak in peaks.items():
            history = self.link_history.get(tier)
            if history is None:
                history = self.link_history[tier] = deque(maxlen=HISTORY)
            history.append(float(np.float32(peak)))       # as the state holds loads: float32
        if site_mw is not None:
            mw = float(site_mw)
            self.site_mw_history.append(mw)
            self.energy_mwh += energy_mwh(mw, t - self.energy_t)
            self.energy_t = max(self.energy_t, t)


def tokens_kept(state: ClusterState) -> float:
    """Tokens the jobs have trained and kept (restarts roll back to their checkpoint)."""
    return float(sum(job.tokens for job in state.jobs.values()))


def spent(state: DisplayState) -> tuple[float, float | None]:
    """The site's energy (MWh) and cost (USD, None without [economics]) from the start to the latest
    sample."""
    cost = state.economics.run_cost(state.gpus, state.energy_mwh, state.energy_t / 3600.0) \
        if state.economics is not None else None
    return state.energy_mwh, cost
