"""Stand-ins for the tests: a fast planner instead of the cost model (`plan`), estimators instead of the
performance model for sweeps (`estimate`), real telemetry and its servers made from a simulated run
(`telemetry`), and the command in a child process with those stand-ins set in (`cli`).

Tests reach them through the fixtures of tests/conftest.py, not by importing these modules."""
