"""Completion: what may be written at the cursor, by the registry's declarations and the module's names.

Where a value goes, constructors are offered whose type fits the parameter there (goals for a goal,
schedules for a number: `Int <: Float <: Schedule`), with the lets of fitting type and the keywords the
enclosing call has not been given yet. Scheme bodies offer field names; .net lines offer layer kinds and
then their parameter keys. Everything is read from the text by `cursor.context`, so it works while the
line is half typed.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from lsprotocol import types as T

from daic.compiler.checking.program import Module
from daic.compiler.constructors import REGISTRY
from daic.compiler.lsp import scope
from daic.compiler.lsp.cursor import Context, context
from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.expected import block_decl, call_slots, expected_types, layer_decl, positional_form
from daic.compiler.lsp.markup import Doc, constructor_doc
from daic.compiler.registry import BLOCK_CATEGORIES, LAYER_CATEGORIES, Constructor
from daic.compiler.types import ANY, BOOL, Type, is_subtype

K = T.CompletionItemKind
STATEMENT_KEYWORDS = ("import", "let", "scheme", "study")


def complete(analysis: Analysis, offset: int, markup: T.MarkupKind) -> list[T.CompletionItem]:
    ctx = context(analysis.text, offset, analysis.document.language)
    # A dotted item (`stdlib.goals`, `s.Baseline`) replaces all that is typed; a plain one (a let of a
    # module, after `goals.`) only what follows the last dot.
    whole = analysis.positions.range(ctx.prefix_start, offset)
    last_part = analysis.positions.range(ctx.prefix_start + ctx.prefix.rfind(".") + 1, offset)
    items = _items(ctx, analysis, markup)
    for item in items:
        text = item.insert_text or item.label
        item.text_edit = T.TextEdit(whole if "." in text else last_part, text)
        item.insert_text = None
    return items


def _items(ctx: Context, analysis: Analysis, markup: T.MarkupKind) -> list[T.CompletionItem]:
    module = analysis.module
    where = ctx.where
    if where == "statement":
        return [T.CompletionItem(k, kind=K.Keyword, insert_text=k + " ") for k in STATEMENT_KEYWORDS]
    if where == "import":
        return [T.CompletionItem(m, kind=K.Module) for m in stdlib_modules()]
    if where == "extends":
        return [T.CompletionItem(n, kind=K.Class) for n in (scope.scheme_names(module) if module else [])]
    if where == "field":
        return _field_items(ctx, markup)
    if where == "layer":
        return [
            item
            for d in REGISTRY.of_category(*LAYER_CATEGORIES)
            for item in _constructor_items(d, markup, K.Class)
        ]
    if where == "param":
        return _param_items(ctx, markup)
    if where == "argument":
        return _keyword_items(ctx, markup) + _value_items(ctx, module, markup)
    if where == "value":
        return _value_items(ctx, module, markup)
    return []


def _field_items(ctx: Context, markup: T.MarkupKind) -> list[T.CompletionItem]:
    """The fields of the block the cursor is in that it does not set yet."""
    used = set(ctx.innermost.used) if ctx.innermost else set()
    return [
        T.CompletionItem(p.name, kind=K.Field, detail=str(p.type),
                         documentation=Doc().text(p.doc).content(markup), insert_text=f"{p.name} = ")
        for p in block_decl(ctx).params
        if p.name not in used
    ]  # fmt: skip


def _param_items(ctx: Context, markup: T.MarkupKind) -> list[T.CompletionItem]:
    """The parameters of the layer the cursor is in that its line does not give yet."""
    decl = layer_decl(ctx.layer)
    if decl is None:
        return []
    return [
        T.CompletionItem(p.name, kind=K.Property, detail=p.signature_text(),
                         documentation=Doc().text(p.doc).content(markup), insert_text=p.name + "=")
        for p in decl.params
        if p.name not in ctx.used
    ]  # fmt: skip


def stdlib_modules() -> list[str]:
    folder = Path(str(resources.files("daic.stdlib")))
    return sorted("stdlib." + p.stem for p in folder.glob("*.dai"))


def _keyword_items(ctx: Context, markup: T.MarkupKind) -> list[T.CompletionItem]:
    frame = ctx.call()
    if frame is None or frame is not ctx.innermost or "." in ctx.prefix:  # `goals.Ba` names a value
        return []
    items: dict[str, T.CompletionItem] = {}
    for slot in call_slots(frame):
        given = set(frame.used) | set(positional_form(slot.decl, frame.positional)[: frame.positional])
        for p in slot.decl.params:
            if p.name not in given and p.name not in items:
                items[p.name] = T.CompletionItem(
                    p.name + "=",
                    kind=K.Property,
                    detail=p.signature_text(),
                    documentation=Doc().text(p.doc).content(markup),
                    insert_text=p.name + "=",
                    # Keywords after the values: positional arguments are the common case.
                    sort_text="1" + p.name,
                )
    return list(items.values())


def _fits(kind: Type, expected: list[Type] | None) -> bool:
    return expected is None or kind == ANY or any(is_subtype(kind, e) for e in expected)


def _value_items(ctx: Context, module: Module | None, markup: T.MarkupKind) -> list[T.CompletionItem]:
    expected = expected_types(ctx)
    if expected is not None and ANY in expected:
        expected = None
    qualifier = ctx.prefix.rpartition(".")[0] if "." in ctx.prefix else None
    if qualifier is not None:
        return _qualified_items(module, qualifier, expected, markup)
    items = [
        item
        for d in REGISTRY.declarations
        if d.category not in (*LAYER_CATEGORIES, *BLOCK_CATEGORIES) and _fits(d.returns, expected)
        for item in _constructor_items(d, markup)
    ]
    if expected is None or any(is_subtype(BOOL, e) for e in expected):
        items += [T.CompletionItem(v, kind=K.Constant, detail="Bool") for v in ("True", "False")]
    if module is not None:
        for name, binding in scope.visible(module).items():
            kind = binding.symbol.type if binding.symbol else ANY
            if _fits(kind, expected):
                items.append(_let_item(name, kind, binding.module, module, markup))
        items += [
            T.CompletionItem(q, kind=K.Module, detail=m.path or "")
            for q, m in scope.qualified(module).items()
        ]
    return _unique(items)


def _qualified_items(
    module: Module | None, qualifier: str, expected: list[Type] | None, markup: T.MarkupKind
) -> list[T.CompletionItem]:
    imported = scope.qualified(module).get(qualifier) if module else None
    if imported is None:
        return []
    items = []
    for name in imported.lets:
        symbol = imported.symbols.get(name)
        kind = symbol.type if symbol else ANY
        if _fits(kind, expected):
            items.append(_let_item(name, kind, imported, module, markup))
    return items


def _let_item(name: str, kind: Type, where: Module, here: Module, markup: T.MarkupKind) -> T.CompletionItem:
    origin = "" if where is here else f" (from {Path(where.path).name if where.path else 'an import'})"
    return T.CompletionItem(name, kind=K.Variable, detail=f"let {name}: {kind}{origin}", sort_text="0" + name)


def _constructor_items(
    decl: Constructor, markup: T.MarkupKind, kind: T.CompletionItemKind | None = None
) -> list[T.CompletionItem]:
    """The declaration under its name and under each alias (the paper's listings use both)."""
    documentation = constructor_doc(decl).content(markup)
    return [
        T.CompletionItem(
            name,
            kind=kind or (K.Function if decl.params else K.Constant),
            detail=decl.signature() if name == decl.name else f"alias of {decl.name}",
            documentation=documentation,
        )
        for name in (decl.name, *decl.aliases)
    ]


def _unique(items: list[T.CompletionItem]) -> list[T.CompletionItem]:
    """One item per label (`Box` is a goal and a domain; the first fitting declaration describes it)."""
    seen: dict[str, T.CompletionItem] = {}
    for item in items:
        seen.setdefault(item.label, item)
    return list(seen.values())
