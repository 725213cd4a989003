"""Document symbols: a .dai file's imports, lets and schemes (with their fields); a .net file's layers,
with the lines of each block's branches under their head and each layer's output shape as its detail.
Workspace symbols: the lets, schemes and studies of a folder's .dai files, and its .net files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from lsprotocol import types as T
from pygls.uris import from_fs_path

from daic.compiler.checking.network import LayerNode, hwc, walk
from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.positions import PositionMap
from daic.dsl import ast as A
from daic.dsl.format import flat
from daic.dsl.parser import parse_dai

S = T.SymbolKind
MOST_SYMBOLS = 500  # a query of one letter in a large workspace: the editor shows the first ones


def document_symbols(analysis: Analysis) -> list[T.DocumentSymbol]:
    tree = analysis.tree
    if isinstance(tree, A.NetFile):
        return _net_symbols(analysis, tree)
    if isinstance(tree, A.DaiFile):
        return _dai_symbols(analysis, tree)
    return []


def _symbol(
    positions: PositionMap, name: str, kind: T.SymbolKind, span, selection, detail=None, children=None
):
    full = positions.span_range(span)
    chosen = positions.span_range(selection)
    # The protocol requires the selection inside the range.
    if (chosen.start.line, chosen.start.character) < (full.start.line, full.start.character) or (
        chosen.end.line,
        chosen.end.character,
    ) > (full.end.line, full.end.character):
        chosen = full
    return T.DocumentSymbol(
        name=name or "?", kind=kind, range=full, selection_range=chosen, detail=detail, children=children
    )


def _dai_symbols(analysis: Analysis, tree: A.DaiFile) -> list[T.DocumentSymbol]:
    positions = analysis.positions
    module = analysis.module
    found = []
    for statement in tree.statements:
        if isinstance(statement, A.Import):
            name = flat(statement.target) + (f" as {statement.alias}" if statement.alias else "")
            found.append(_symbol(positions, name, S.Module, statement.span, statement.target.span))
        elif isinstance(statement, A.Let):
            symbol = module.symbols.get(statement.name) if module else None
            detail = str(symbol.type) if symbol else None
            found.append(
                _symbol(positions, statement.name, S.Constant, statement.span, statement.name_span, detail)
            )
        else:
            fields = [
                _symbol(positions, f.name, S.Field, f.span, f.name_span, flat(f.value)[:80])
                for f in statement.fields
            ]
            if isinstance(statement, A.Study):
                detail = f"tunes {statement.scheme.dotted}"
            else:
                detail = f"extends {statement.base.dotted}" if statement.base else None
            found.append(
                _symbol(
                    positions, statement.name, S.Class, statement.span, statement.name_span, detail, fields
                )
            )
    return found


def _net_symbols(analysis: Analysis, tree: A.NetFile) -> list[T.DocumentSymbol]:
    positions = analysis.positions
    shapes = {}
    for node, _depth in walk(analysis.network.nodes if analysis.network else []):
        if isinstance(node, LayerNode) and node.out_shape is not None:
            shapes[id(node.layer)] = hwc(node.out_shape)
        elif not isinstance(node, LayerNode):
            if node.out_shape is not None:
                shapes[id(node.heads[2])] = hwc(node.out_shape)
            for head, out in zip(node.heads[:2], node.branch_shapes, strict=True):
                if out is not None:
                    shapes[id(head)] = hwc(out)

    def symbol(layer: A.Layer) -> T.DocumentSymbol:
        children = [symbol(child) for child in layer.body]
        span = _extent(layer)
        kind = S.Namespace if layer.kind in ("ParNet1", "ParNet2", "SkipNet1", "SkipNet2") else S.Function
        return _symbol(
            positions, layer.kind, kind, span, layer.kind_span, shapes.get(id(layer)), children or None
        )

    return [symbol(layer) for layer in tree.layers]


def _extent(layer: A.Layer):
    """A block head's span with its indented lines (nested ones too)."""
    return layer.span.cover(_extent(layer.body[-1])) if layer.body else layer.span


def flat_symbols(
    symbols: list[T.DocumentSymbol], uri: str, container: str | None = None
) -> list[T.SymbolInformation]:
    """The same symbols as a flat list, for clients without hierarchical document symbols."""
    found = []
    for s in symbols:
        location = T.Location(uri=uri, range=s.range)
        found.append(
            T.SymbolInformation(name=s.name, kind=s.kind, location=location, container_name=container)
        )
        found.extend(flat_symbols(s.children or [], uri, s.name))
    return found


def workspace_symbols(query: str, files: Iterable[tuple[str, str]], encoding: str) -> list[T.WorkspaceSymbol]:
    """The lets, schemes and studies of the `.dai` files and the `.net` files themselves (`files`: each
    resolved path with its text) whose names hold `query`'s letters in order, case aside (as editors
    filter), the first `MOST_SYMBOLS` of them."""
    found: list[T.WorkspaceSymbol] = []
    for path, text in files:
        uri = from_fs_path(path) or path
        container = Path(path).name
        if path.endswith(".net"):
            if _matches(query, container):
                zero = T.Range(T.Position(0, 0), T.Position(0, 0))
                found.append(T.WorkspaceSymbol(location=T.Location(uri, zero), name=container, kind=S.File))
            continue
        positions = PositionMap.of_text(text, encoding)
        for statement in parse_dai(text).tree.statements:
            if isinstance(statement, A.Import) or not _matches(query, statement.name):
                continue
            kind = S.Constant if isinstance(statement, A.Let) else S.Class
            location = T.Location(uri, positions.span_range(statement.name_span))
            found.append(
                T.WorkspaceSymbol(location=location, name=statement.name, kind=kind, container_name=container)
            )
        if len(found) >= MOST_SYMBOLS:
            return found[:MOST_SYMBOLS]
    return found


def _matches(query: str, name: str) -> bool:
    letters = iter(name.lower())
    return all(c in letters for c in query.lower())
