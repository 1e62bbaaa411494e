"""The wheel installs one top-level package, `clustertop`, with every module and data file of the source tree,
as pyproject.toml maps the repository's folders; and each part imports only what it may
(engine/__init__.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIR: dict[str, str] = SETUPTOOLS["package-dir"]          # package -> folder of the repository
PACKAGES: list[str] = SETUPTOOLS["packages"]


def _folder_package(folder: Path) -> str | None:
    """The package a folder of the repository installs as (the longest mapped prefix), or None."""
    rel = folder.relative_to(ROOT).as_posix()
    best: tuple[str, str] | None = None
    for package, mapped in PACKAGE_DIR.items():
        if (rel == mapped or rel.startswith(mapped + "/")) and (best is None or len(mapped) > len(best[1])):
            best = (package, mapped)
    if best is None:
        return None
    package, mapped = best
    rest = rel[len(mapped):].strip("/")
    return ".".join([package, *rest.split("/")]) if rest else package


def _source_folders() -> dict[Path, str]:
    """Every folder under a mapped folder that holds modules or data, with the package it must install as."""
    found = {}
    for mapped in PACKAGE_DIR.values():
        for path in (ROOT / mapped).rglob("*"):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                package = _folder_package(path.parent)
                assert package is not None
                found[path.parent] = package
    return found


def _distribution() -> metadata.Distribution:
    """The clustertop distribution installed in site-packages (not the checkout's egg-info)."""
    site = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dists = list(metadata.distributions(name="clustertop", path=site))
    assert dists, "clustertop is not installed in this environment (pip install '.[test]')"
    return dists[0]


def _skip_if_editable() -> None:
    """These tests check a regular install, as CI makes one (`pip install '.[test]'`): an editable install
    (`pip install -e`) has no copies to check and imports the checkout's folders by design."""
    if '"editable":true' in (_distribution().read_text("direct_url.json") or "").replace(" ", ""):
        pytest.skip("an editable install: this checks a regular one (pip install '.[test]', as .ci/run does)")


def _installed() -> set[str]:
    """Files of the clustertop distribution installed in site-packages."""
    return {str(f).replace("\\", "/") for f in _distribution().files or []}


def test_every_folder_with_modules_is_a_listed_package() -> None:
    folders = _source_folders()
    unlisted = sorted({package for package in folders.values() if package not in PACKAGES})
    assert not unlisted, f"folders with modules that pyproject.toml does not package: {unlisted}"
    assert len(folders) == len(PACKAGES), "a package in pyproject.toml has no folder of modules"
    assert "clustertop" not in {p.name for p in ROOT.iterdir()}, \
        "a folder named clustertop shadows the package"


def test_the_wheel_has_one_top_level_package_with_every_source_file() -> None:
    _skip_if_editable()
    installed = _installed()
    tops = {name.split("/")[0] for name in installed if not name.startswith("../")}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"clustertop"}
    wanted = {"clustertop/py.typed"}
    for folder, package in _source_folders().items():
        for path in folder.iterdir():
            if path.suffix in (".py", ".toml"):
                wanted.add(f"{package.replace('.', '/')}/{path.name}")
    missing = wanted - installed
    assert not missing, \
        f"not in the installed package (reinstall, or fix pyproject.toml): {sorted(missing)[:5]}"


def test_the_checkout_never_shadows_the_installed_package(tmp_path: Path) -> None:
    """From the checkout (where pytest and `python -m clustertop` run) and from anywhere else, `clustertop` is
    the installed package, whole; outside the checkout none of its folders imports under its own name."""
    _skip_if_editable()
    code = ("import importlib.util as u, clustertop, clustertop.engine.stream, clustertop.tui.app;"
            "print(clustertop.__file__); print(clustertop.engine.__file__);"
            "print(all(u.find_spec(n) is None for n in ('engine', 'tui', 'cli')))")
    for cwd in (tmp_path, ROOT):
        out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                             check=True)
        package, engine, alone = out.stdout.split()
        source = tuple(str(ROOT / folder) for folder in PACKAGE_DIR.values())   # cli/, engine/, tui/, ...
        assert not package.startswith(source) and not engine.startswith(source), (cwd, out.stdout)
        assert Path(engine).parent.parent == Path(package).parent, \
            "clustertop.engine is not inside clustertop"
        if cwd == tmp_path:
            assert alone == "True"


# Every part of the tree and what it may import (besides the standard library and third-party packages):
# engine/__init__.py says why. "cli" is the top-level package (the command line): nothing below imports it.
PARTS = {
    "cli": "cli",
    "engine/config": "config",
    "engine/model": "model",
    "engine/sim": "sim",
    "engine/stream": "stream",
    "engine/telemetry": "telemetry",
    "engine/sweep": "sweep",
    "tui": "tui",
    "scenarios": "config",            # data of engine.config: its __init__ imports nothing
}
ALLOWED = {
    "cli": {"cli", "config", "model", "sim", "stream", "telemetry", "sweep", "tui"},
    "config": {"config"},
    "model": {"config", "model"},
    "sim": {"config", "model", "sim", "stream"},
    "stream": {"config", "stream"},
    "telemetry": {"config", "stream", "telemetry", "model.power"},     # the model's site-power formula only
    "sweep": {"config", "model", "stream", "sweep"},
    "tui": {"config", "stream", "tui", "sweep.results"},               # a sweep's results file and its
                                                                       # ranking
}


def _imports(path: Path, package: str) -> set[str]:
    """What a module imports of the tree, as dotted names under their part ("config.scenario.Job",
    "model.power.PowerModel", "tui.charts", "cli.signals"), absolute or relative."""
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
            if bits[0] != "clustertop":
                continue
            if bits[1:2] == ["engine"]:
                found.add(".".join(bits[2:]))
            elif bits[1:2] == ["tui"]:
                found.add(".".join(bits[1:]))
            else:
                found.add(".".join(["cli", *bits[1:]]))  # `import clustertop`,
                                                         # `from clustertop import signals`
    return found


def _allowed(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def _part_files() -> list[tuple[Path, str]]:
    files = []
    for folder, part in PARTS.items():
        base = ROOT / folder
        paths = list(base.rglob("*.py")) if base.is_dir() else []
        files += [(path, part) for path in paths if "__pycache__" not in path.parts]
    files += [(ROOT / "engine" / "__init__.py", "config")]
    return files


def test_every_module_belongs_to_a_part() -> None:
    covered = {path for path, _ in _part_files()}
    everything = {p for d in PACKAGE_DIR.values() for p in (ROOT / d).rglob("*.py")
                  if "__pycache__" not in p.parts}
    assert everything - covered == set(), sorted(str(p.relative_to(ROOT)) for p in everything - covered)


def test_each_part_imports_only_the_parts_it_may() -> None:
    wrong = []
    for path, part in _part_files():
        package = _folder_package(path.parent)
        assert package is not None
        if path.name == "__init__.py":
            package += "._"               # a package's relative imports start from the package itself
        bad = {name for name in _imports(path, package) if not _allowed(name, ALLOWED[part])}
        if bad:
            wrong.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not wrong, wrong


def test_the_dashboard_never_loads_the_model_or_simpy() -> None:
    code = ("import sys, clustertop.tui.app, clustertop.tui.sweep, clustertop.tui.sources.live, "
            "clustertop.tui.sources.recording, clustertop.tui.sources.stdin, clustertop.commands.run, "
            "clustertop.commands.replay, clustertop.commands.compare, clustertop.commands.watch, "
            "clustertop.commands.import_telemetry, clustertop.engine.telemetry.watch, "
            "clustertop.tui.sources.watch;"
            "print(sorted(m for m in sys.modules if m.startswith(('clustertop.engine.model', "
            "'clustertop.engine.sim', 'simpy'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout))
    # telemetry's formula
    assert loaded <= {"clustertop.engine.model", "clustertop.engine.model.power"}, loaded
