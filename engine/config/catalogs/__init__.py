"""Catalog data files (TOML): GPUs, fabrics, models, fault causes, reference runs."""
