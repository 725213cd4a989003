"""The canonical form of both languages.

`format_net` and `format_dai` print a tree from the parser; comments come back from the tree's comment list
(placed by line: before the item they precede, or after it on its line), and blank lines between items are
kept, at most one. Formatting is idempotent, and re-parsing the output gives an equal tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import ast as A
from .source import Span

INDENT = "    "
WIDTH = 100

# --- expressions --------------------------------------------------------------------------------------

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_ATOM = 4


def _precedence(expr: A.Expr) -> int:
    if isinstance(expr, A.BinOp):
        return _PRECEDENCE[expr.op]
    if isinstance(expr, A.Neg) or (isinstance(expr, A.Number) and _number_text(expr).startswith("-")):
        return 3
    return _ATOM


def _number_text(node: A.Number) -> str:
    if node.text:
        return node.text
    return repr(node.value)


def escaped(value: str) -> str:
    """A string's value as a literal writes it between its quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")


def _string_text(value: str) -> str:
    return f'"{escaped(value)}"'


def _wrap(expr: A.Expr, need: int) -> str:
    text = flat(expr)
    return f"({text})" if _precedence(expr) < need else text


def flat(expr: A.Expr) -> str:
    """An expression on one line."""
    if isinstance(expr, A.Number):
        return _number_text(expr)
    if isinstance(expr, A.String):
        return _string_text(expr.value)
    if isinstance(expr, A.Bool):
        return "True" if expr.value else "False"
    if isinstance(expr, A.Name):
        return expr.dotted
    if isinstance(expr, A.Invalid):
        return expr.text
    if isinstance(expr, A.Neg):
        return "-" + _wrap(expr.operand, 3)
    if isinstance(expr, A.BinOp):
        prec = _PRECEDENCE[expr.op]
        # Operators associate to the left, so an equal-precedence right operand keeps its parentheses.
        return f"{_wrap(expr.left, prec)} {expr.op} {_wrap(expr.right, prec + 1)}"
    if isinstance(expr, A.ListExpr):
        return "[" + ", ".join(flat(item) for item in expr.items) + "]"
    if isinstance(expr, A.Call):
        return expr.func.dotted + "(" + ", ".join(_arguments(expr, flat)) + ")"
    raise TypeError(f"not an expression: {expr!r}")


def _arguments(call: A.Call, render) -> list[str]:
    return [render(a) for a in call.args] + [f"{k.name}={render(k.value)}" for k in call.kwargs]


def broken(expr: A.Expr, column: int, depth: int) -> list[str]:
    """An expression starting at `column`, split over lines (one argument per line, recursively) when it
    does not fit in WIDTH. Continuation lines are indented one level deeper than `depth`."""
    text = flat(expr)
    if column + len(text) <= WIDTH or not isinstance(expr, A.Call | A.ListExpr):
        return [text]
    inner = INDENT * (depth + 1)
    items: list[tuple[str, A.Expr]]
    if isinstance(expr, A.Call):
        opener, closer = expr.func.dotted + "(", ")"
        items = [("", a) for a in expr.args] + [(k.name + "=", k.value) for k in expr.kwargs]
    else:
        opener, closer = "[", "]"
        items = [("", item) for item in expr.items]
    lines = [opener]
    for prefix, item in items:
        sub = broken(item, len(inner) + len(prefix), depth + 1)
        sub[0] = inner + prefix + sub[0]
        sub[-1] += ","
        lines.extend(sub)
    lines.append(INDENT * depth + closer)
    return lines


# --- comment-aware emission ---------------------------------------------------------------------------


@dataclass
class _Entry:
    """One item of output: its source lines, its rendered lines and where comments before it go."""

    first_line: int
    last_line: int
    end_offset: int
    lines: list[str]
    comment_indent: str
    blank_before: bool | None = None  # None: keep the source's choice; True/False: force it


def _emit(entries: list[_Entry], comments: tuple[A.Comment, ...]) -> str:
    out: list[str] = []
    pending = sorted(comments, key=lambda c: c.span.start)
    position = 0
    previous_line = 0  # the last source line already accounted for

    def gap(line: int, forced: bool | None = None) -> None:
        if not out:
            return
        if (forced if forced is not None else line > previous_line + 1) and out[-1] != "":
            out.append("")

    for entry in entries:
        trailing: A.Comment | None = None
        # A forced choice of blank line applies before whatever comes first: a leading comment or the entry.
        first_gap = entry.blank_before
        while position < len(pending) and pending[position].span.line <= entry.last_line:
            comment = pending[position]
            position += 1
            if comment.span.line == entry.last_line and comment.span.start >= entry.end_offset:
                trailing = comment
                continue
            gap(comment.span.line, first_gap)
            first_gap = None
            out.append(entry.comment_indent + comment.text)
            previous_line = comment.span.line
        gap(entry.first_line, first_gap)
        lines = list(entry.lines)
        if trailing is not None:
            lines[-1] += "  " + trailing.text
        out.extend(lines)
        previous_line = entry.last_line
    for comment in pending[position:]:
        gap(comment.span.line)
        out.append(comment.text)
        previous_line = comment.span.line
    return "\n".join(out) + "\n" if out else ""


# --- .net ---------------------------------------------------------------------------------------------


def layer_text(layer: A.Layer) -> str:
    """A layer's line without indentation: `Conv2D filters=16 kernel_size=[3, 3] padding=1`."""
    return " ".join([layer.kind] + [f"{p.name}={flat(p.value)}" for p in layer.params])


def _net_entries(layers: tuple[A.Layer, ...], depth: int) -> Iterator[_Entry]:
    for i, layer in enumerate(layers):
        line = layer.span.line
        yield _Entry(
            line,
            layer.span.end_line,
            layer.span.end,
            [INDENT * depth + layer_text(layer)],
            INDENT * depth,
            blank_before=False if i == 0 and depth > 0 else None,
        )
        yield from _net_entries(layer.body, depth + 1)


def format_net(tree: A.NetFile) -> str:
    return _emit(list(_net_entries(tree.layers, 0)), tree.comments)


# --- .dai ---------------------------------------------------------------------------------------------


def _import_text(node: A.Import) -> str:
    target = flat(node.target)
    return f"import {target}" + (f" as {node.alias}" if node.alias else "")


def _binding(keyword: str, name: str, value: A.Expr, depth: int) -> list[str]:
    head = INDENT * depth + keyword + name + " = "
    lines = broken(value, len(head), depth)
    lines[0] = head + lines[0]
    return lines


def _dai_entries(tree: A.DaiFile) -> Iterator[_Entry]:
    previous: A.Statement | None = None
    for statement in tree.statements:
        span = statement.span
        # Blocks stand apart from what surrounds them; other statements keep the source's spacing.
        blocks = A.Scheme | A.Study
        apart = True if isinstance(statement, blocks) or isinstance(previous, blocks) else None
        if isinstance(statement, A.Import):
            yield _Entry(span.line, span.end_line, span.end, [_import_text(statement)], "", apart)
        elif isinstance(statement, A.Let):
            yield _Entry(
                span.line,
                span.end_line,
                span.end,
                _binding("let ", statement.name, statement.value, 0),
                "",
                apart,
            )
        else:
            yield from _block_entries(statement, apart)
        previous = statement


def _block_head(block: A.Scheme | A.Study) -> tuple[str, Span]:
    """A block's first line up to its `{`, and the span of its last part."""
    if isinstance(block, A.Study):
        return f"study {block.name} tunes {block.scheme.dotted}", block.scheme.span
    if block.base is not None:
        return f"scheme {block.name} extends {block.base.dotted}", block.base.span
    return f"scheme {block.name}", block.name_span


def _block_entries(block: A.Scheme | A.Study, apart: bool | None) -> Iterator[_Entry]:
    span = block.span
    head, named = _block_head(block)
    if not block.fields:
        yield _Entry(span.line, span.end_line, span.end, [head + " {}"], "", apart)
        return
    yield _Entry(span.line, named.end_line, named.end, [head + " {"], "", apart)
    for i, f in enumerate(block.fields):
        yield _Entry(
            f.span.line,
            f.span.end_line,
            f.span.end,
            _binding("", f.name, f.value, 1),
            INDENT,
            False if i == 0 else None,
        )
    yield _Entry(span.end_line, span.end_line, span.end, ["}"], INDENT, False)


def format_dai(tree: A.DaiFile) -> str:
    return _emit(list(_dai_entries(tree)), tree.comments)


def format_tree(tree: A.NetFile | A.DaiFile) -> str:
    return format_net(tree) if isinstance(tree, A.NetFile) else format_dai(tree)
