"""Real clusters: DCGM telemetry from Prometheus dumps, a Prometheus server or exporters, turned into the
event stream (docs/telemetry.md). Imports `config` and `stream` only, like the dashboard, plus the formats'
libraries."""
