"""The one exception type for errors a user can cause (bad scenario, bad recording, bad flag), and the one
escaping of user text that messages echo."""

from __future__ import annotations

import re

# What a terminal would act on rather than show: C0 and C1 controls (newline, escape), DEL, the line and
# paragraph separators and the invisible format characters (bidirectional overrides).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                     r"\ufff9-\ufffb]")


def escape(text: str) -> str:
    """`text` with every control or invisible format character written as its escape (``\\n``, ``\\x1b``,
    ``\\u202e``), as Python's repr writes it: echoed in a message, it stays one visible line."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def has_unsafe(text: str) -> bool:
    """Whether `text` holds a character `escape` would rewrite."""
    return _UNSAFE.search(text) is not None


def quote(value: object) -> str:
    """A value a user wrote, quoted for a message: strings as repr-like 'text' (escapes included), others as
    they print, escaped."""
    return escape(repr(value) if isinstance(value, str) else str(value))


class UserError(Exception):
    """An error the user can fix. Its message is one line: where, what is wrong, what is expected.

    Whatever user text the message or `where` echoes (a key, a value, a path) is escaped here, once, so no
    message can forge a second line or send a terminal an escape sequence."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = escape(where) if where is not None else None
        message = escape(message)
        super().__init__(f"{self.where}: {message}" if self.where else message)
