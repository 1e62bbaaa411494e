"""The wheel installs one top-level package, `clustertop`, with every module and data file of the source tree;
and the engine's layers import only what they may (engine/__init__.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder of the source tree -> the package it installs as (setup.py's mapping)
MAPPED = {"clustertop": "clustertop", "engine": "clustertop/engine", "tui": "clustertop/tui",
          "scenarios": "clustertop/engine/config/scenarios"}


def _installed() -> set[str]:
    """Files of the clustertop distribution installed in site-packages (not the checkout's egg-info)."""
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dists = list(metadata.distributions(name="clustertop", path=site))
    assert dists, "clustertop is not installed in this environment (pip install '.[test]')"
    assert '"editable":true' not in (dists[0].read_text("direct_url.json") or "").replace(" ", ""), \
        "an editable install has no copies to check: the README's `pip install '.[test]'` makes a regular one"
    return {str(f).replace("\\", "/") for f in dists[0].files or []}


def test_the_wheel_has_one_top_level_package_with_every_source_file() -> None:
    installed = _installed()
    tops = {name.split("/")[0] for name in installed if not name.startswith("../")}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"clustertop"}
    wanted = set()
    for folder, package in MAPPED.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                wanted.add(f"{package}/{path.relative_to(ROOT / folder).as_posix()}")
    missing = wanted - installed
    assert not missing, f"not in the installed package (reinstall, or fix setup.py): {sorted(missing)[:5]}"


def test_outside_the_checkout_only_clustertop_imports(tmp_path: Path) -> None:
    code = ("import importlib.util as u, clustertop.engine.stream, clustertop.tui.app;"
            "print(u.find_spec('engine') is None, u.find_spec('tui') is None)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


# What each part may import (besides the standard library and third-party packages): engine/__init__.py.
ALLOWED = {
    "engine/config": {"config"},
    "engine/model": {"config", "model"},
    "engine/sim": {"config", "model", "sim", "stream"},
    "engine/stream": {"config", "stream"},
    "engine/telemetry": {"config", "stream", "telemetry"},
    "tui": {"config", "stream", "tui"},
}


def _engine_imports(path: Path, package: str) -> set[str]:
    """The engine layers (and "tui") a module imports, absolute or relative."""
    parts = package.split(".")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level + 1]
                names = [".".join(base + ([node.module] if node.module else [])) + "." + a.name
                         for a in node.names]
            else:
                names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            bits = name.split(".")
            if bits[:2] == ["clustertop", "engine"] and len(bits) > 2:
                found.add(bits[2])
            elif bits[:2] == ["clustertop", "tui"]:
                found.add("tui")
    return found


def test_each_layer_imports_only_the_layers_it_may() -> None:
    wrong = []
    for folder, allowed in ALLOWED.items():
        for path in (ROOT / folder).rglob("*.py"):
            package = ".".join(["clustertop", *path.relative_to(ROOT).parts[:-1]])
            layers = _engine_imports(path, package) & {"config", "model", "sim", "stream", "telemetry", "tui", "sweep"}
            if layers - allowed:
                wrong.append(f"{path.relative_to(ROOT)} imports {sorted(layers - allowed)}")
    assert not wrong, wrong


def test_the_dashboard_never_loads_the_model_or_simpy() -> None:
    code = ("import sys, clustertop.tui.app, clustertop.tui.sweep, clustertop.tui.sources.live, "
            "clustertop.tui.sources.recording, clustertop.tui.sources.stdin, clustertop.commands.run, "
            "clustertop.commands.replay, clustertop.commands.compare, clustertop.commands.watch, "
            "clustertop.commands.import_telemetry, clustertop.engine.telemetry.watch, clustertop.tui.sources.watch;"
            "print(sorted(m for m in sys.modules if m.startswith(('clustertop.engine.model', "
            "'clustertop.engine.sim', 'simpy'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
