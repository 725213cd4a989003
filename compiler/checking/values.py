"""The values elaboration makes of expressions: a constructor applied to its arguments (`Built`), and the
value of an expression whose error was already reported (`UNKNOWN`). Numbers, strings, tuples and search
spaces (`spaces.Space`) are values too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from daic.compiler.registry import Constructor
from daic.dsl.source import Span


@dataclass(frozen=True)
class Built:
    """A constructor applied to all its arguments (defaults included)."""

    decl: Constructor
    args: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    span: Span | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        return f"{self.decl.name}({shown})"


class _Unknown:
    """The value of an expression whose error was already reported."""

    def __repr__(self) -> str:
        return "<unknown>"


UNKNOWN = _Unknown()
