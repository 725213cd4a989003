"""References and rename: every place the sources name a let, a scheme or a network file.

What a name stands for is the checker's answer (`Module.references`: each name it resolved, and to what);
this module only gathers those answers over the workspace's modules (`workspace.WorkspaceModules`). A
definition is known by its kind, the resolved path of the file that holds it and its name, so that the
modules of separate checks agree on it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from daic.compiler.checking.program import Module, Reference, in_stdlib, path_key
from daic.compiler.constructors import REGISTRY
from daic.compiler.lsp.cursor import word_at
from daic.compiler.lsp.documents import Analysis
from daic.dsl import ast as A
from daic.dsl.parser import KEYWORDS
from daic.dsl.source import Span

NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")


@dataclass(frozen=True)
class Named:
    """What a name of the sources stands for: a let or a scheme (`name`) of the module at `path`, or the
    network file at `path` (`kind` "net", `name` its file name)."""

    kind: str  # "let", "scheme" or "net"
    path: str  # resolved, as `path_key` gives it
    name: str


@dataclass(frozen=True)
class Place:
    """Where a name is written: a file (resolved path) and the code-point offsets of the name in it."""

    path: str
    start: int
    end: int
    declaration: bool = False


class Refused(Exception):
    """A rename that cannot be made, with the reason the editor shows."""


def named_at(analysis: Analysis, offset: int) -> tuple[Named, tuple[int, int]] | None:
    """What the name at `offset` stands for, and the offsets of the name (its last part, for `q.name`)."""
    own = path_key(Path(analysis.document.path))
    if analysis.document.language == "net":
        return Named("net", own, Path(own).name), (0, 0)
    module = analysis.module
    if module is None:
        return None
    for path, span in _net_places(module):
        if span.start <= offset <= span.end:
            return Named("net", path, Path(path).name), (span.start, span.end)
    start, end = word_at(analysis.text, offset)
    for place, named in _declarations(module, own):
        if place.start <= offset <= place.end:
            return named, (place.start, place.end)
    reference = module.reference_at(start) if start < end else None
    if reference is None:
        return None
    named = _named(reference)
    last = _last_part(reference.name)
    return (named, last) if named is not None else None


def places(named: Named, modules: list[Module], declaration: bool = True) -> list[Place]:
    """Every place the modules write `named` (its declaration too when `declaration`), in file order."""
    found: set[Place] = set()
    for module in modules:
        if module.path is None:
            continue
        own = path_key(Path(module.path))
        if named.kind == "net":
            found.update(
                Place(own, span.start, span.end) for net, span in _net_places(module) if net == named.path
            )
            continue
        if declaration:
            found.update(place for place, n in _declarations(module, own) if n == named)
        for reference in module.references:
            if _named(reference) == named:
                start, end = _last_part(reference.name)
                found.add(Place(own, start, end))
    return sorted(found, key=lambda p: (p.path, p.start))


def rename(named: Named, new_name: str, modules: list[Module]) -> list[Place]:
    """The places to rewrite as `new_name`; Refused when the new name cannot stand there."""
    check_renamable(named)
    if not NAME.match(new_name) or new_name in KEYWORDS:
        raise Refused(f"`{new_name}` is not a name: a letter or `_`, then letters, digits or `_`")
    if named.kind == "let" and REGISTRY.lookup(new_name):
        raise Refused(f"`{new_name}` is a constructor: a let of that name would hide it")
    owner = next((m for m in modules if m.path and path_key(Path(m.path)) == named.path), None)
    taken = owner is not None and new_name in (owner.lets if named.kind == "let" else owner.schemes)
    if taken:
        raise Refused(f"`{Path(named.path).name}` already defines a {named.kind} `{new_name}`")
    return places(named, modules)


def check_renamable(named: Named) -> None:
    """Refused, with the reason, when `named` is not the user's to rename."""
    if named.kind == "net":
        raise Refused("a network is named by its file: rename the file, then the `net` fields that name it")
    if in_stdlib(named.path):
        raise Refused(f"`{named.name}` is defined in daic's standard library, which is not yours to rename")


def _declarations(module: Module, own: str) -> list[tuple[Place, Named]]:
    found = []
    for statement in module.tree.statements:
        if isinstance(statement, A.Let):
            kind = "let"
        elif isinstance(statement, A.Scheme):
            kind = "scheme"
        else:
            continue
        span = statement.name_span
        found.append((Place(own, span.start, span.end, True), Named(kind, own, statement.name)))
    return found


def _named(reference: Reference) -> Named | None:
    owner = reference.module.path
    if owner is None:
        return None
    if reference.let is not None:
        return Named("let", path_key(Path(owner)), reference.let.name)
    if reference.scheme is not None:
        return Named("scheme", path_key(Path(owner)), reference.scheme.node.name)
    return None


def _last_part(name: A.Name) -> tuple[int, int]:
    return name.span.end - len(name.parts[-1]), name.span.end


def _net_places(module: Module) -> Iterator[tuple[str, Span]]:
    """The network files the module's schemes name, each with where its name is written."""
    for info in module.schemes.values():
        for span, path in info.nets:
            yield path_key(Path(path)), span
