"""The clustertop engine, in four layers; a layer imports only those before it in this list:

- `config`: scenario files, their checks and error messages, the catalogs (data files with sources), the
  vocabulary everything shares (phases, units, errors).
- `model`: what a step costs: topology, layout, compute, memory, collectives, pipeline, the step plan,
  estimate.
- `sim`: the SimPy run over time: jobs' lifecycle, faults, checkpoints, variability, site power, sampling.
- `stream`: the event schema, recorder, reader and seek index, state reducer, export: the one contract between
  the engine and the dashboard. It imports `config` only, so the dashboard (which reads `stream` and `config`)
  never loads the model or the simulation; `sim` writes through it.

`telemetry` (real clusters: DCGM metrics from Prometheus or the exporters, written as the stream) reads
`config` and writes through `stream`; like the dashboard, it never loads the model or the simulation.
`sweep` (design-space sweeps over the model) sits beside them. Importing this package imports neither SimPy
nor Textual.
"""
