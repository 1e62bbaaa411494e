"""Design-space sweeps: the cross product of scenario values, each point validated, estimated and ranked.

One concept a module:
- `space`: the design space: a base scenario, its axes, the dp derivation rule, a point's table and scenario.
- `evaluate`: points validated and estimated into their records, a chunk of them per task.
- `results`: the results format (records, their checks, reading a file) and the one ranking of points.
- `run`: a sweep run in point order, written to a sink and ranked as it goes (`sweep_to`).
- `pool`: the local process pool; `dask_cluster`: a Dask cluster, through the public `distributed.Client`.
- `signals`: how the pool and its workers meet SIGINT and SIGTERM.

Importing the package imports none of them: the dashboard reads results files through `results`, which never
loads the model.
"""
