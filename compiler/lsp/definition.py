"""Go to definition: a let (here or in an imported file, the shipped stdlib included), an imported module,
a scheme's base, and the network file a scheme's `net` field names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types as T
from pygls.uris import from_fs_path

from daic.compiler.checking.program import path_key
from daic.compiler.lsp.cursor import previous_token, word_at
from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.positions import PositionMap
from daic.dsl import ast as A
from daic.dsl.source import Span


@dataclass(frozen=True)
class Target:
    path: str | None  # None: the analysed document itself
    span: Span | None  # None: the start of the file


# Reads another file's text (an open buffer's, else the file's) to place a span in it.
TextOf = Callable[[str], str | None]


def definition(analysis: Analysis, offset: int, text_of: TextOf) -> list[T.Location]:
    if analysis.document.language != "dai" or analysis.module is None:
        return []
    target = _target(analysis, offset)
    if target is None:
        return []
    return [_location(analysis, target, text_of)]


def _target(analysis: Analysis, offset: int) -> Target | None:
    module = analysis.module
    statement = next((s for s in module.tree.statements if s.span.start <= offset <= s.span.end), None)
    if isinstance(statement, A.Import) and statement.target.span.start <= offset <= statement.target.span.end:
        imported = next((m for node, m in module.imports if node is statement), None)
        return Target(imported.path, None) if imported is not None and imported.path else None
    if isinstance(statement, A.Scheme):
        net = statement.get_field("net")
        info = module.schemes.get(statement.name)
        if net is not None and net.value.span.start <= offset <= net.value.span.end:
            return Target(info.net_path, None) if info is not None and info.net_path else None
    start, end = word_at(analysis.text, offset)
    word = analysis.text[start:end]
    if not word:
        return None
    before = previous_token(analysis.text, start, "dai")
    if before is not None and before.text == "scheme" and word in module.schemes:
        return Target(None, module.schemes[word].node.name_span)
    if before is not None and before.text == "let" and word in module.lets:
        return Target(None, module.lets[word].name_span)
    reference = module.reference_at(start)
    if reference is None:
        return None
    if reference.scheme is not None:
        return Target(_path_of(reference.module, module), reference.scheme.node.name_span)
    return Target(_path_of(reference.module, module), reference.let.name_span)


def _path_of(owner, here) -> str | None:
    return None if owner is here else owner.path


def _location(analysis: Analysis, target: Target, text_of: TextOf) -> T.Location:
    if target.path is None:
        uri, positions = analysis.document.uri, analysis.positions
    else:
        uri = from_fs_path(path_key(Path(target.path))) or target.path
        text = text_of(target.path) if target.span is not None else None
        positions = PositionMap.of_text(text or "", analysis.positions.encoding)
    if target.span is None:
        zero = T.Position(0, 0)
        return T.Location(uri, T.Range(zero, zero))
    return T.Location(uri, positions.span_range(target.span))
