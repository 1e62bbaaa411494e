"""The one exception type for errors a user can cause (bad scenario, bad recording, bad flag)."""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix. Its message is one line: where, what is wrong, what is expected."""

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
