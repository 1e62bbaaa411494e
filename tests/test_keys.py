"""The key help comes from the bindings: the help screen and the README's table cannot drift from them."""

from __future__ import annotations

from pathlib import Path

from clustertop.tui import keys
from textual.binding import Binding

ROOT = Path(__file__).resolve().parent.parent
CLASSES = keys.dashboard_classes()


def test_every_binding_has_help_and_a_section() -> None:
    sections = {a for _, actions in keys.SECTIONS for a in actions}
    for cls in CLASSES:
        for binding in cls.BINDINGS:
            assert isinstance(binding, Binding) and binding.tooltip, \
                f"{cls.__name__} {binding.key}: no tooltip"
            assert binding.action.split("(")[0] in sections, binding.action


def test_every_section_entry_is_a_binding() -> None:
    actions = {b.action.split("(")[0] for cls in CLASSES for b in cls.BINDINGS}
    assert {a for _, names in keys.SECTIONS for a in names} == actions


def test_shared_tooltips_share_a_row_and_keys_are_not_repeated() -> None:
    rows = dict(keys.dashboard_rows())
    transport = {what: k for k, what in rows["Transport"]}
    assert transport["seek back / forward (a hundredth of the run; shift: a tenth)"] == "←  →"
    assert transport["faster / slower: 0.1x to 1,000,000x simulated seconds per second"] == "+  -"
    heatmap = {what: k for k, what in rows["Heatmap"]}
    assert heatmap["move the cursor (shift: 8 at a time); click selects"] == "h j k l  ↑ ↓"
    assert [k for k, _ in rows["App"]][-2:] == ["?", "q"]


def test_the_readme_table_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert keys.markdown() in readme, "README's key table is stale: python -m clustertop.tui.keys"


def test_escape_is_in_the_help() -> None:
    """Defect: escape closes the help, the search bar and the palette, and takes a point run from a sweep's
    table back to the table, but the help did not list it."""
    import io

    from clustertop.tui.screens.help import help_text
    from rich.console import Console

    app = dict(keys.dashboard_rows())["App"]
    what = {k: w for k, w in app}
    assert "escape" in what and "back to the table" in what["escape"]
    assert "search" in what["escape"] and "help" in what["escape"]
    assert [k for k, _ in app][-2:] == ["?", "q"]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(help_text())
    assert any(line.strip().startswith("escape ") for line in console.export_text().splitlines())
