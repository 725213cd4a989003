"""The names a checked .dai module can see, for completion: read off the compiler's `Module` (its lets,
symbols and imports). What a name written in the file stands for is the checker's to say
(`Module.reference_at`); this only lists the candidates: a plain name is a let of this file or of an import
without `as`; a dotted name `q.name` a let of the import whose qualifier is `q` (the checker's own
`qualifier` decides it)."""

from __future__ import annotations

from dataclasses import dataclass

from daic.compiler.checking.elaborate import Symbol
from daic.compiler.checking.program import Module, _ModuleChecker
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


def scheme_names(module: Module) -> list[str]:
    names = list(module.schemes)
    for node, imported in imports(module):
        names.extend(
            imported.schemes if node.alias is None else (f"{qualifier(node)}.{n}" for n in imported.schemes)
        )
    return names
