"""The keys, from the bindings: the help screen and the README's key table are generated here, so neither can
drift from what the keys do.

Every binding with a tooltip is a row of help (bindings that share a tooltip share a row); `SECTIONS` only
says which section an action belongs to. A few things are not bindings of ours (mouse gestures, Textual's own
tab and command palette): they are `EXTRA` rows. `python -m clustertop.tui.keys` prints the README table.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.binding import Binding

SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Transport", ("toggle_pause", "faster", "slower", "seek", "seek_start", "seek_end", "prev_event",
                   "next_event", "follow_live")),
    ("Heatmap", ("move", "zoom_in", "zoom_out", "cycle_metric", "metric", "search", "next_hit")),
    ("Panels", ("toggle_side", "panel", "view", "other_side", "toggle_worst", "sort_jobs", "reverse_jobs",
                "event_filter", "choose", "page",
                "first", "latest", "go")),
    ("App", ("inject_fault", "save_screenshot", "toggle_theme", "help", "quit")),
)

# (keys, what, the action whose row it follows): not bindings of ours
EXTRA: tuple[tuple[str, str, str], ...] = (
    ("click timeline", "seek there", "follow_live"),
    ("scroll", "zoom in (up, at the mouse) / out (down); double click zooms in", "zoom_out"),
    ("tab", "next panel", "metric"),
    ("ctrl+p", "command palette: every action by name", "toggle_theme"),
    ("escape", "close the help, the search bar or the palette; a point run from a sweep: back to the table",
     "toggle_theme"),
)

_NAMES = {"left": "←", "right": "→", "up": "↑", "down": "↓", "question_mark": "?", "left_square_bracket": "[",
          "right_square_bracket": "]", "plus": "+", "minus": "-", "space": "space",
          "slash": "/", "pageup": "pgup", "pagedown": "pgdn"}


def _display(binding: Binding) -> str:
    """A binding's keys for the help: its key_display when that names several keys (has spaces), else its keys
    (the first two: the others are aliases, such as = for +)."""
    if binding.key_display and " " in binding.key_display:
        return binding.key_display
    keys = [k.strip() for k in binding.key.split(",")]
    if keys[0] in ("plus", "minus"):
        keys = keys[:1]
    return "  ".join(_NAMES.get(k, k) for k in keys[:2])


def _covered(display: str, text: str) -> bool:
    """Keys already shown: each as itself, unshifted (shift is in the tooltip) or in lower case."""
    for key in display.split():
        base = key.removeprefix("shift+")
        base = _NAMES.get(base, base)
        if base not in text and base.lower() not in text.split():
            return False
    return True


def _action(binding: Binding) -> str:
    return binding.action.split("(")[0]


def rows(classes: Iterable[type]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(section, [(keys, what)]) for the bindings of `classes` and the extra rows, in SECTIONS order."""
    section_of = {action: name for name, actions in SECTIONS for action in actions}
    rank = {action: float(i) for i, action in enumerate(a for _, actions in SECTIONS for a in actions)}
    keys: dict[str, list[str]] = {}          # tooltip -> the keys shown for it
    first: dict[str, str] = {}               # tooltip -> the action of its first binding
    for cls in classes:
        for binding in getattr(cls, "BINDINGS", []):
            if not isinstance(binding, Binding) or not binding.tooltip:
                continue
            shown = keys.setdefault(binding.tooltip, [])
            first.setdefault(binding.tooltip, _action(binding))
            display = _display(binding)
            if not _covered(display, "  ".join(shown)):
                shown.append(display)
    entries = [(rank.get(action, len(rank)), section_of.get(action, "Other"), "  ".join(keys[tip]), tip)
               for tip, action in first.items()]
    entries += [(rank[after] + 0.5, section_of[after], k, what) for k, what, after in EXTRA]
    out: dict[str, list[tuple[str, str]]] = {}
    for _, section, k, what in sorted(entries, key=lambda e: e[0]):
        out.setdefault(section, []).append((k, what))
    return list(out.items())


def dashboard_classes() -> tuple[type, ...]:
    """Every class whose bindings are the dashboard's keys: the app, the screens and the focusable widgets."""
    from .app import ClusterTopApp
    from .screens.compare import CompareScreen
    from .screens.dashboard import DashboardScreen
    from .screens.main import MainScreen
    from .widgets.event_log import EventLog
    from .widgets.heatmap import Heatmap

    return (ClusterTopApp, DashboardScreen, MainScreen, CompareScreen, Heatmap, EventLog)


def dashboard_rows() -> list[tuple[str, list[tuple[str, str]]]]:
    """The dashboard's keys: the app's, the screens', the widgets'."""
    return rows(dashboard_classes())


def markdown() -> str:
    """The README's key table."""
    lines = ["| key | action |", "|---|---|"]
    for _, entries in dashboard_rows():
        for keys, what in entries:
            lines.append(f"| {' '.join(f'`{k}`' for k in keys.split('  '))} | {what} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
