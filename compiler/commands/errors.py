"""What a command's user can fix: an error of `daic run`, `verify`, `export`, `import` or `tune`, with its
message and exit code."""

from __future__ import annotations

from daic.dsl.diagnostics import Diagnostic


class CommandError(Exception):
    """A problem the user can fix (bad sources, missing data, a run folder in the way); exit code 1 unless
    `exit_code` says otherwise (2 for usage errors, 130 for an interrupt)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None, exit_code: int = 1):
        super().__init__(message)
        self.diagnostics = diagnostics or []
        self.exit_code = exit_code
