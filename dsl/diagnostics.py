"""Diagnostics are data: a code, a severity, a message, a span and an optional hint.

Every phase (parsing here, name resolution and checking in the compiler) reports into a list of these;
renderers for text, JSON and the language server live in the compiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from .source import Span


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Code:
    """A diagnostic kind: its stable identifier and a one-line summary (shown by `daic explain`)."""

    id: str
    summary: str


@dataclass(frozen=True)
class Fix:
    """A repair the checker is sure of: the text of `span` replaced by `text` (an editor's quick fix)."""

    title: str
    span: Span
    text: str


@dataclass(frozen=True)
class Diagnostic:
    code: Code
    severity: Severity
    message: str
    span: Span
    hint: str | None = None
    path: str | None = None
    fix: Fix | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR


def error(
    code: Code, message: str, span: Span, hint: str | None = None, fix: Fix | None = None
) -> Diagnostic:
    return Diagnostic(code, Severity.ERROR, message, span, hint, fix=fix)


def warning(
    code: Code, message: str, span: Span, hint: str | None = None, fix: Fix | None = None
) -> Diagnostic:
    return Diagnostic(code, Severity.WARNING, message, span, hint, fix=fix)


# Syntax: everything the parsers report. The compiler declares its own codes beside its phases.
ENCODING = Code("E001", "the file is not valid UTF-8 text")
UNEXPECTED_CHARACTER = Code("E002", "a character that starts no token of the language")
UNEXPECTED_TOKEN = Code("E003", "a token where the grammar expects something else")
UNEXPECTED_END = Code("E004", "the file ends inside a construct")
UNCLOSED_BRACKET = Code("E005", "an opening bracket without its closing partner")
INDENTATION = Code("E006", "indentation that does not match any enclosing block")
MIXED_INDENTATION = Code("E007", "tabs and spaces mixed in indentation")
NESTING_TOO_DEEP = Code("E008", "brackets, operator chains or blocks nested deeper than the checker accepts")
NOT_A_VALUE = Code("E009", "text printed in place of a value (a placeholder or a Python object's repr)")
NUMBER_OUT_OF_RANGE = Code("E010", "a number literal that is not a finite float")
POSITIONAL_AFTER_KEYWORD = Code("E011", "a positional argument after a keyword argument")
UNTERMINATED_STRING = Code("E012", "a string literal without its closing quote")
UNKNOWN_ESCAPE = Code("E013", 'a backslash in a string that starts no escape (\\n, \\t, \\\\, \\")')
UNREADABLE = Code("E014", "a file that cannot be read (permissions, or it went away)")
