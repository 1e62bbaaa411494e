"""Packaging: one top-level package, `clustertop`, with the repository's engine/ and tui/ folders mapped into it.

The package list is found, not kept by hand: every package under clustertop/, engine/ and tui/ (each folder with
an __init__.py), renamed by the mapping. The metadata is in pyproject.toml.
"""

from setuptools import find_packages, setup

MAPPED = {
    "clustertop.engine": "engine",
    "clustertop.tui": "tui",
    "clustertop.engine.config.scenarios": "scenarios",      # the built-in scenario files
}


def packages() -> list[str]:
    names = find_packages(include=["clustertop", "clustertop.*"])
    for package, folder in MAPPED.items():
        names += [package + name[len(folder):] for name in find_packages(include=[folder, f"{folder}.*"])]
    return sorted(names)


setup(
    packages=packages(),
    package_dir=MAPPED,
    package_data={"clustertop.engine.config.catalogs": ["*.toml"], "clustertop.engine.config.scenarios": ["*.toml"]},
)
