"""Documentation text generated from the registry: `daic doc`, and the language server's hover."""

from __future__ import annotations

from daic.compiler.registry import BLOCK_CATEGORIES, Category, Constructor, Param, Registry

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


# Where docs/reference.md finds the golden files that `daic explain` takes its examples from.
GOLDEN_LINK = "../tests/compiler/golden/"


def reference_markdown() -> str:
    """The language reference, docs/reference.md: every constructor by category (its signature, documentation
    and parameters, as `daic doc` prints them), the fields of a scheme and of a study, and every diagnostic
    code with its summary and why it is reported (as `daic explain` gives them). Markdown, in the registry's
    order and the codes' order, so that the same registry always gives the same text."""
    from daic.compiler.checking.codes import every_code
    from daic.compiler.constructors import REGISTRY

    categories = [c for c in Category if REGISTRY.of_category(c)]
    codes = every_code()
    lines = [
        "# Language reference",
        "",
        "Every constructor of the two languages, every field of a `scheme` and of a `study`, and every",
        "diagnostic code, as `daic doc NAME` and `daic explain CODE` print them. This page is generated from",
        "the registry (`compiler/constructors/`) and the diagnostic codes by `reference_markdown` in",
        "`compiler/docs.py`. Do not edit it; `tests/test_docs.py` fails while it is not current, and",
        "`DAIC_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_docs.py` writes it again.",
        "",
    ]
    for category in categories:
        count = len(REGISTRY.of_category(category))
        if category in BLOCK_CATEGORIES:
            count = sum(len(d.params) for d in REGISTRY.of_category(category))
        lines.append(f"- [{category.title}](#{_anchor(category.title)}): {count}")
    lines.append(f"- [Diagnostic codes](#diagnostic-codes): {len(codes)}")
    for category in categories:
        lines += ["", f"## {category.title}"]
        for decl in REGISTRY.of_category(category):
            lines += _block_fields(decl) if category in BLOCK_CATEGORIES else _constructor(decl)
    lines += _codes_section(codes)
    return "\n".join(lines) + "\n"


def _codes_section(codes: list) -> list[str]:
    """Every diagnostic code with its severity, summary and why each of its golden examples is reported."""
    from daic.compiler.explain import examples

    lines = [
        "",
        "## Diagnostic codes",
        "",
        "`daic check` reports each problem with one of these codes (E: an error, W: a warning). Each code's",
        "examples are golden files of `tests/compiler/golden/`; `daic explain CODE` prints them with what",
        "`daic check` says about them.",
    ]
    for code in codes:
        severity = "warning" if code.id.startswith("W") else "error"
        lines += ["", f"### {code.id}", "", f"{severity}: {_markdown(code.summary)}."]
        for example in examples(code):
            lines += [
                "",
                _markdown(example.why),
                "",
                f"Example: [`{example.name}`]({GOLDEN_LINK}{example.name}).",
            ]
    return lines


def _constructor(decl: Constructor) -> list[str]:
    lines = ["", f"### `{decl.name}`", "", "```", decl.signature(), "```", "", _markdown(decl.doc)]
    if decl.aliases:
        lines += ["", f"Also written: {', '.join(f'`{a}`' for a in decl.aliases)}."]
    if decl.params:
        lines.append("")
    lines += [f"- `{p.name}`: `{p.type}` ({_facts(p)}) {_markdown(p.doc)}".rstrip() for p in decl.params]
    return lines


def _block_fields(block: Constructor) -> list[str]:
    lines = ["", "```", BLOCK_HEADS[block.category] + " { field = ... }", "```", "", _markdown(block.doc)]
    for field in block.params:
        lines += [
            "",
            f"### `{field.name}`",
            "",
            f"`{field.type}` ({_facts(field)})",
            "",
            _markdown(field.doc),
        ]
        if field.fixed:
            lines += ["", f"A study may not search it: {field.fixed}."]
    return lines


def _markdown(text: str) -> str:
    """Documentation text as Markdown shows it: outside `code`, a backslash (`\\n`) and a `<` that would
    open an HTML tag (`train/<wnid>/`) are escaped."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("\\", "\\\\").replace("<", "\\<")
    return "`".join(parts)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than `-` and `_` dropped, spaces to `-`."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")
