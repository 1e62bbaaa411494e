"""Speed measurements: `python -m benchmarks --json` prints one flat JSON object of figures."""
