"""Catalog data files (TOML): GPUs, fabrics, models."""
