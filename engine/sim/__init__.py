"""The simulation over time (SimPy): jobs run their step plans, fail, checkpoint and restart;
samples are taken."""
