"""The clustertop engine, in layers; a layer imports only those before it in this list
(tests/test_packaging.py checks every import):

- `config`: scenario files, their checks and error messages, the catalogs (data files with sources), cluster
  geometry (where a GPU sits, a job's ranks and stages, the link tiers), and the vocabulary everything shares
  (phases and their labels, units and their formatting, errors).
- `model`: what a step or a serving iteration costs: layout, compute, memory, collectives, pipeline, the step
  plan, estimate; power (the one site-power formula), economics.
- `stream`: the event contract between the engine and its readers: schema, the header and sample writers,
  recorder, reader and checks, the reducer of a cluster's state, Perfetto export. It imports `config` only, so
  the dashboard (which reads `stream` and `config`) never loads the model or the simulation.
- `sim`: the SimPy run over time: jobs' lifecycle, faults, checkpoints, variability, site power, sampling; it
  writes through `stream`.

`telemetry` (real clusters: DCGM metrics from Prometheus or the exporters) writes through `stream` too, with
the model's site-power formula; it loads nothing else of the model, nor the simulation. `sweep` (design-space
sweeps over the model) sits beside them; its results format (`sweep.results`) is all the dashboard reads of
it. Importing this package imports neither SimPy nor Textual.
"""
