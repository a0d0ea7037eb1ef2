"""Exceptions with messages that name the problem (file, row, column, setting)."""

from __future__ import annotations


class DiscernError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(DiscernError, ValueError):
    """Bad user input: a file, a column, a row or a value that cannot be used (also a ValueError,
    so callers that caught ValueError keep working).

    The message always names the file (where there is one), the row (1-based, as a
    spreadsheet shows it, counting the header as row 1) and the column.
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None):
        where = []
        if file is not None:
            where.append(f"file {file}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.file, self.row, self.column = file, row, column


class DatabaseURLError(DiscernError):
    """The database URL cannot be parsed or the database cannot be reached."""


class SpecError(DiscernError):
    """A collection spec (YAML) is invalid."""


class StaleFitError(DiscernError):
    """A saved fit does not match the data it is asked to describe."""


class CollectorError(DiscernError):
    """A collector worker process failed; its claims return to the plan when their lease ends."""
