"""Real clusters: DCGM telemetry from Prometheus dumps, a Prometheus server or exporters, turned into the
event stream (docs/telemetry.md). Imports `config` and `stream`, the model's site-power formula
(`model.power`, in frames.py) and nothing else of the model nor the simulation, plus the formats'
libraries."""
