"""Documentation text generated from the registry: `daic doc`, and the language server's hover."""

from __future__ import annotations

from .registry import Constructor, Registry

CATEGORY_TITLES = {
    "layer": "Layers (.net)",
    "block": "Branch blocks (.net)",
    "abstract layer": "Abstract layers (.net, Section 3)",
    "goal": "Goals (Table 2)",
    "schedule": "Schedules (Section 4.1)",
    "dataset": "Data sets",
    "transform": "Augmentations",
    "optimizer": "Optimizers",
    "lr": "Learning-rate schedules",
    "test": "Tests",
    "domain": "Verification domains",
    "activation": "Activations",
    "scheme": "Scheme fields",
}


def describe(decl: Constructor) -> str:
    """A signature line, the documentation, and one line per parameter."""
    lines = [
        decl.signature() if decl.category != "scheme" else "scheme Name [extends Base] { field = ... }",
        "",
        decl.doc,
    ]
    if decl.aliases:
        lines.append(f"Also written: {', '.join(decl.aliases)}.")
    if decl.params:
        lines.append("")
    for p in decl.params:
        extra = [f"default {p.signature_text().split(' = ', 1)[1]}"] if not p.required else ["required"]
        if p.range_text():
            extra.append(p.range_text())
        if p.choices:
            extra.append("one of " + ", ".join(f'"{c}"' for c in p.choices))
        lines.append(f"  {p.name}: {p.type} ({'; '.join(extra)}) {p.doc}")
    return "\n".join(lines)


def overview(registry: Registry) -> str:
    sections = []
    for category, title in CATEGORY_TITLES.items():
        decls = registry.of_category(category)
        if decls:
            names = (
                ", ".join(d.name for d in decls)
                if category != "scheme"
                else ", ".join(p.name for p in decls[0].params)
            )
            sections.append(f"{title}:\n  {names}")
    return "\n".join(sections) + "\n\n`daic doc NAME` describes one."
