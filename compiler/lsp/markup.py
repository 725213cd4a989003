"""Documentation text for hovers and completion items, as markdown or plain text as the client prefers."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.docs import describe
from daic.compiler.registry import Constructor


def client_kind(formats: list[T.MarkupKind] | None) -> T.MarkupKind:
    """The first format the client lists that we write; markdown when it says nothing."""
    for kind in formats or [T.MarkupKind.Markdown]:
        if kind in (T.MarkupKind.Markdown, T.MarkupKind.PlainText):
            return T.MarkupKind(kind)
    return T.MarkupKind.PlainText


class Doc:
    """Markdown-or-plain text built from code blocks and paragraphs."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def code(self, text: str) -> Doc:
        self.parts.append(("code", text))
        return self

    def text(self, text: str) -> Doc:
        self.parts.append(("text", text))
        return self

    def items(self, lines: list[str]) -> Doc:
        if lines:
            self.parts.append(("items", "\n".join(lines)))
        return self

    def render(self, kind: T.MarkupKind) -> str:
        markdown = kind == T.MarkupKind.Markdown
        blocks = []
        for what, text in self.parts:
            if what == "code" and markdown:
                blocks.append(f"```daic\n{text}\n```")
            elif what == "items":
                blocks.append("\n".join(("- " if markdown else "  ") + line for line in text.split("\n")))
            else:
                blocks.append(text)
        return "\n\n".join(blocks)

    def content(self, kind: T.MarkupKind) -> T.MarkupContent:
        return T.MarkupContent(kind=kind, value=self.render(kind))


def constructor_doc(decl: Constructor) -> Doc:
    """`daic doc NAME`'s text: the signature as code, the rest as prose."""
    signature, _, rest = describe(decl).partition("\n")
    # describe() indents one line per parameter under the prose; they become a list.
    prose = [line for line in rest.strip("\n").split("\n") if line and not line.startswith("  ")]
    params = [line.strip() for line in rest.split("\n") if line.startswith("  ")]
    return Doc().code(signature).text("\n".join(prose)).items(params)
