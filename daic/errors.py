"""The one error class of daic: a failure the user can act on, from the library and the command line
alike. Each stage raises it (or a kind of it: `UsageError`, `ImportFailure`, `PropertyError`,
`DataError`) with the message the command line prints; the command line reports it in one place, and a
Python caller reads the same message in its own terms."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daic.dsl.diagnostics import Diagnostic

PYTHON_TERMS = {
    "--resume": "resume=True", "--force": "force=True", "--download": "download=True", "--epochs": "epochs",
    "--out": "out", "--dataset": "dataset", "--domain": "domains", "--data": "data", "--timeout": "timeout",
    "--weights": "weights", "--seed": "seed", "--device": "device", "--eps": "eps", "--limit": "limit",
    "--net": "net", "--scheme": "scheme", "--study": "study", "--storage": "storage", "--onnx": "onnx",
    "--vnnlib": "vnnlib", "--stdin-filename": "filename",
}  # fmt: skip
"""The command line's options as a Python caller passes them to `daic.api`: a message names the option it
means, and a Python caller reads the keyword instead (tests/test_layers.py ties each to an option of a
command and a keyword of the API)."""


class DaicError(Exception):
    """A failure the user can act on (bad sources, a missing file, options that do not fit): the message
    says where and what to do. `command_message` is it as the command line prints it (`pass --resume`);
    `str()` is it in Python's terms (`pass resume=True`). `diagnostics` are the sources' problems behind
    it, and `exit_code` the command line's status for it (1; 2 for a mistake of usage, 130 for an
    interrupt)."""

    def __init__(self, message: str, diagnostics: Sequence[Diagnostic] = (), exit_code: int = 1) -> None:
        super().__init__(message)
        self.command_message = message
        self.diagnostics = list(diagnostics)
        self.exit_code = exit_code

    def as_usage(self) -> DaicError:
        """The same failure, as a mistake of usage (exit code 2): an import or a property the user named."""
        return DaicError(self.command_message, self.diagnostics, exit_code=2)

    def __str__(self) -> str:
        return _OPTION.sub(_keyword, self.command_message)


# An option as a message writes it, with the placeholder of its value when one follows (`--data DIR`).
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)(?: ([A-Z][A-Z_]*)\b)?")


def _keyword(match: re.Match) -> str:
    """`--data DIR` as `data=DIR`, `--resume` as `resume=True`; an option with no keyword as it is."""
    term = PYTHON_TERMS.get(match.group(1))
    if term is None:
        return match.group(0)
    return f"{term}={match.group(2)}" if match.group(2) else term
