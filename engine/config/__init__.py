"""Scenario files and catalogs: loading, checks with one-line errors,
and the typed objects downstream uses."""
