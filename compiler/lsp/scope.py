"""The names a checked .dai module can see, read off the compiler's `Module` (its lets, symbols and imports).

Lookups follow the checker's rules: a plain name is a let of this file or of an import without `as`; a
dotted name `q.name` is a let of the import whose qualifier is `q` (its alias, or the last part of a
module's name, or a file's stem). The checker's own `qualifier` decides it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from daic.compiler.elaborate import Symbol
from daic.compiler.program import Module, SchemeInfo, _ModuleChecker
from daic.dsl import ast as A


@dataclass(frozen=True)
class Binding:
    """A let, where it is defined and what the checker made of it."""

    name: str
    let: A.Let
    symbol: Symbol | None
    module: Module  # the module that defines it (this one or an import)


def qualifier(node: A.Import) -> str:
    return _ModuleChecker.qualifier(node)


def imports(module: Module) -> list[tuple[A.Import, Module]]:
    return [(node, m) for node, m in module.imports if m is not None]


def visible(module: Module) -> dict[str, Binding]:
    """Plain names in scope: this file's lets first, then those of imports without `as`."""
    found: dict[str, Binding] = {}
    for node, imported in imports(module):
        if node.alias is None:
            for name, let in imported.lets.items():
                found.setdefault(name, Binding(name, let, imported.symbols.get(name), imported))
    for name, let in module.lets.items():
        found[name] = Binding(name, let, module.symbols.get(name), module)
    return found


def qualified(module: Module) -> dict[str, Module]:
    return {qualifier(node): imported for node, imported in imports(module)}


def resolve(module: Module, dotted: str) -> Binding | None:
    parts = dotted.split(".")
    if len(parts) == 1:
        return visible(module).get(dotted)
    if len(parts) == 2:
        imported = qualified(module).get(parts[0])
        if imported is not None and parts[1] in imported.lets:
            return Binding(parts[1], imported.lets[parts[1]], imported.symbols.get(parts[1]), imported)
    return None


def find_scheme(module: Module, dotted: str) -> tuple[SchemeInfo, Module] | None:
    """A scheme by the name an `extends` clause gives it, and the module that defines it."""
    parts = dotted.split(".")
    if len(parts) == 1 and dotted in module.schemes:
        return module.schemes[dotted], module
    for node, imported in imports(module):
        plain = len(parts) == 1 and node.alias is None
        named = len(parts) == 2 and parts[0] == qualifier(node)
        if (plain or named) and parts[-1] in imported.schemes:
            return imported.schemes[parts[-1]], imported
    return None


def scheme_names(module: Module) -> list[str]:
    names = list(module.schemes)
    for node, imported in imports(module):
        names.extend(
            imported.schemes if node.alias is None else (f"{qualifier(node)}.{n}" for n in imported.schemes)
        )
    return names


def module_file(module: Module) -> Path | None:
    return Path(module.path) if module.path else None
