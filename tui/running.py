"""The running dashboard app as the ClusterTopApp it is: Textual types a node's `app` as App[Any], and the
screens and widgets read the app's state (states, playback, sources) and call its methods (seek, redraw)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.message_pump import MessagePump

if TYPE_CHECKING:
    from .app import ClusterTopApp  # tui/app.py imports the screens and widgets that call this


def running_app(node: MessagePump) -> ClusterTopApp:
    """The ClusterTopApp running `node` (every screen and widget of the dashboard runs in one)."""
    return cast("ClusterTopApp", node.app)
