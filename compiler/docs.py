"""Documentation text generated from the registry: `daic doc`, and the language server's hover."""

from __future__ import annotations

from .registry import BLOCK_CATEGORIES, Category, Constructor, Param, Registry

# How each kind of block is opened, for the first line of its documentation.
BLOCK_HEADS = {Category.SCHEME: "scheme Name [extends Base]", Category.STUDY: "study Name tunes Scheme"}


def describe(decl: Constructor) -> str:
    """A signature line, the documentation, and one line per parameter."""
    lines = [
        decl.signature()
        if decl.category not in BLOCK_CATEGORIES
        else BLOCK_HEADS[decl.category] + " { field = ... }",
        "",
        decl.doc,
    ]
    if decl.aliases:
        lines.append(f"Also written: {', '.join(decl.aliases)}.")
    if decl.params:
        lines.append("")
    for p in decl.params:
        lines.append(f"  {p.name}: {p.type} ({_facts(p)}) {p.doc}")
    return "\n".join(lines)


def _facts(p: Param) -> str:
    """`default 0; >= 0`: whether a parameter is required or its default, its range, its choices."""
    extra = [f"default {p.signature_text().split(' = ', 1)[1]}"] if not p.required else ["required"]
    if p.range_text():
        extra.append(p.range_text())
    if p.choices:
        extra.append("one of " + ", ".join(f'"{c}"' for c in p.choices))
    return "; ".join(extra)


def describe_field(block: Constructor, field: Param) -> str:
    """A block's field, as `daic doc` lists it under "Scheme fields" or "Study fields": its type, default
    and documentation."""
    return f"{block.name} field {field.name}: {field.type} ({_facts(field)})\n\n{field.doc}"


def overview(registry: Registry) -> str:
    sections = []
    for category in Category:
        decls = registry.of_category(category)
        if decls:
            names = (
                ", ".join(d.name for d in decls)
                if category not in BLOCK_CATEGORIES
                else ", ".join(p.name for p in decls[0].params)
            )
            sections.append(f"{category.title}:\n  {names}")
    return "\n".join(sections) + "\n\n`daic doc NAME` describes one."


def _fields(registry: Registry) -> list[tuple[Constructor, Param]]:
    return [(decl, p) for decl in registry.of_category(*BLOCK_CATEGORIES) for p in decl.params]


def document(registry: Registry, name: str) -> str | None:
    """`daic doc NAME`: each constructor of that name, and the scheme field of that name (the overview
    lists both); None when there is neither."""
    texts = [describe(d) for d in registry.lookup(name)]
    texts += [describe_field(block, p) for block, p in _fields(registry) if p.name == name]
    return "\n\n".join(texts) if texts else None


def documented_names(registry: Registry) -> list[str]:
    """Every name `document` knows."""
    return registry.names() + [p.name for _, p in _fields(registry)]
