"""`pip install .` ships every package of the source tree (a missed subpackage breaks only installed copies)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / path for name, path in config.get("package-dir", {}).items()}
    found = set(mapped)
    for top in ("clustertop", "engine", "tui"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    assert found == listed


def test_package_data_globs_cover_the_data_files() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "*.toml" in data["engine.catalogs"] and "*.toml" in data["engine.scenarios"]
    assert list((ROOT / "engine" / "catalogs").glob("*.toml"))
    assert len(list((ROOT / "scenarios").glob("*.toml"))) >= 10
