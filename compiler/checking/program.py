"""Checking `.dai` files: imports, name resolution, lets, schemes, and the networks schemes name.

Phases, all reporting into one list: imports are loaded (standard-library modules by dotted name, other
files by path, each checked once, cycles reported); every let is elaborated on demand, so lets may refer to
each other in any order and cycles are found; each scheme's fields (with those of its `extends` base) are
checked like a call's keyword arguments; a scheme's `net` file is parsed and its shapes inferred from the
scheme's data set.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from daic.compiler.checking import codes as C
from daic.compiler.checking.elaborate import (
    Elaborator,
    Symbol,
    as_written,
    describe,
    did_you_mean,
    renaming,
)
from daic.compiler.checking.network import Network, analyze_for_data
from daic.compiler.checking.schedules import described, unsettled
from daic.compiler.checking.sources import Probe, probe
from daic.compiler.checking.spaces import Space, spaces_in
from daic.compiler.checking.values import UNKNOWN, Built
from daic.compiler.checking.written import value_text
from daic.compiler.constructors import REGISTRY, SCHEME_DECL, STUDY_DECL
from daic.compiler.registry import Constructor, Param
from daic.compiler.types import ANY
from daic.dsl import ast as A
from daic.dsl.diagnostics import Diagnostic, Fix, error, warning
from daic.dsl.parser import ParseResult, parse_dai, parse_net
from daic.dsl.source import Span

STDLIB = "stdlib"


@dataclass
class SchemeInfo:
    node: A.Scheme
    built: Built | None = None  # all fields, the base's merged in, defaults filled
    explicit: set[str] = field(default_factory=set)  # fields set here or in a base (not defaults)
    net_dir: Path | None = None  # where the file that sets `net` lives: its path is relative to that
    network: Network | None = None
    net_path: str | None = None
    base: SchemeInfo | None = None  # the scheme it extends, once found
    # Each network file its own `net` field names (each option of a Choice): where it is written, and the
    # path it was found at (the language server's references to a network).
    nets: list[tuple[Span, str]] = field(default_factory=list)


@dataclass
class StudyInfo:
    node: A.Study
    built: Built | None = None  # all fields, defaults filled
    scheme: SchemeInfo | None = None  # the scheme it tunes, once found
    # Where each objective stands in the scheme's `test`: its results are that test's column.
    objectives: tuple[int, ...] = ()


@dataclass(frozen=True)
class Elaborated:
    """What checking a let gave, and every name it looked up with what each stood for: while the let is
    the same node (the parser reused its piece) and those names stand for the same symbols, the next
    check of the document takes `symbol` as it is. Only lets checked without a diagnostic are kept."""

    let: A.Let
    symbol: Symbol
    uses: tuple[tuple[A.Name, Symbol | None], ...]


@dataclass
class Module:
    path: str | None  # None for text that is not a file (an editor buffer without a path)
    tree: A.DaiFile
    diagnostics: list[Diagnostic] = field(default_factory=list)
    lets: dict[str, A.Let] = field(default_factory=dict)
    symbols: dict[str, Symbol] = field(default_factory=dict)
    schemes: dict[str, SchemeInfo] = field(default_factory=dict)
    studies: dict[str, StudyInfo] = field(default_factory=dict)
    imports: list[tuple[A.Import, Module | None]] = field(default_factory=list)
    parsed: ParseResult | None = None  # the parse: its line index, and its pieces for the next parse
    elaborated: dict[str, Elaborated] = field(default_factory=dict)
    references: list[Reference] = field(default_factory=list)  # every name the checker resolved

    def exported(self, name: str) -> Symbol | None:
        return self.symbols.get(name)

    def reference_at(self, offset: int) -> Reference | None:
        """What the name written at `offset` of this file stands for, as the checker resolved it."""
        return next((r for r in self.references if r.name.span.start <= offset <= r.name.span.end), None)


@dataclass(frozen=True)
class Reference:
    """A name of the source and what the checker resolved it to: a let (`let`, `symbol`) or a scheme
    (`scheme`), and the module that defines it (this one, or an import)."""

    name: A.Name
    module: Module
    let: A.Let | None = None
    symbol: Symbol | None = None
    scheme: SchemeInfo | None = None


def stdlib_file(dotted: str) -> Path | None:
    """`stdlib.goals` -> the packaged `goals.dai`."""
    parts = dotted.split(".")
    if parts[0] != STDLIB or len(parts) < 2:
        return None
    entry = Path(str(resources.files("daic.stdlib").joinpath(*parts[1:-1], parts[-1] + ".dai")))
    return entry if probe(entry).kind == "file" else None


def stdlib_net(net: str) -> Path | None:
    """`stdlib/nets/NAME.net` as a scheme writes it -> the packaged network (None: not such a name)."""
    parts = net.split("/")
    if parts[0] != STDLIB or len(parts) < 2:
        return None
    return Path(str(resources.files("daic.stdlib").joinpath(*parts[1:])))


def in_stdlib(path: str | None) -> bool:
    """Whether a module's path is a file of the packaged standard library."""
    if path is None:
        return False
    root = path_key(Path(str(resources.files("daic.stdlib"))))
    return path_key(Path(path)).startswith(root + os.sep)


def path_key(path: Path) -> str:
    """The path a module is known by (symbolic links resolved, so that one file is one module)."""
    try:
        return str(path.resolve())
    except (OSError, ValueError):  # a name the system will not look up: nothing to resolve
        return str(path.absolute())


def _escape_hint(path: str) -> str | None:
    """For a path that holds a tab or a line break: the escape that put it there (`C:\\nets`)."""
    for char, escape, meaning in (("\n", "\\n", "a line break"), ("\t", "\\t", "a tab")):
        if char in path:
            return f"`{escape}` in a string is {meaning}: write paths with `/`"
    return None


class Program:
    """Loads and checks modules, caching each by path so an import graph is checked once."""

    def __init__(self, check_nets: bool = True, overlay: Mapping[str, str] | None = None) -> None:
        # False when a run replaces every scheme's network (`daic run --net`): the named ones don't matter.
        self.check_nets = check_nets
        # Texts that stand in for files, by resolved path: an editor's unsaved buffers.
        self.overlay = overlay or {}
        self.modules: dict[str, Module] = {}
        self.loading: list[str] = []
        self.cycles: list[list[str]] = []  # import cycles found, each as the chain of paths
        # Every file the checks read or looked for (modules and networks, through `load` and `exists`), so
        # that a cache of the modules knows which changes make it stale.
        self.consulted: set[str] = set()

    def check_text(self, text: str, path: str | None, previous: Module | None = None) -> Module:
        """Check a module's text. `previous`, the module the last check of the same document made (the
        language server's, before an edit), lends its unchanged pieces and lets."""
        parsed = parse_dai(text, previous.parsed.pieces if previous and previous.parsed else None)
        module = Module(path, parsed.tree, list(parsed.diagnostics), parsed=parsed)
        if path is not None:
            self.modules[path_key(Path(path))] = module
            self.loading.append(path_key(Path(path)))
        checker = _ModuleChecker(self, module, previous)
        try:
            checker.run()
        finally:
            checker.release()
            if path is not None:
                self.loading.pop()
        return module

    def load(self, path: Path) -> Module | str:
        """The checked module at `path`, or a reason it cannot be had."""
        key = path_key(path)
        self.consulted.add(key)
        if key in self.loading:
            self.cycles.append([*self.loading[self.loading.index(key) :], key])
            return "cycle"
        if key in self.modules:
            return self.modules[key]
        try:
            text = self.read(path)
        except (OSError, UnicodeDecodeError) as exc:
            return f"cannot be read ({exc.__class__.__name__})"
        return self.check_text(text, str(path))

    def probe(self, path: Path) -> Probe:
        """What `path` names; an open buffer is a file. Either way, a file the check depends on now."""
        key = path_key(path)
        self.consulted.add(key)
        return Probe("file") if key in self.overlay else probe(path)

    def read(self, path: Path) -> str:
        """The file's text, or the buffer that stands in for it."""
        buffer = self.overlay.get(path_key(path))
        return buffer if buffer is not None else path.read_text(encoding="utf-8")


class _ModuleChecker:
    def __init__(self, program: Program, module: Module, previous: Module | None = None) -> None:
        self.program = program
        self.module = module
        self.previous = previous
        self.sink = module.diagnostics
        self.elaborator = Elaborator(REGISTRY, self.sink, self.resolve, self.visible_names, spaces=None)
        self.in_progress: list[str] = []
        self.uses: list[list[tuple[A.Name, Symbol | None]]] = []  # per let in progress: its look-ups
        self.base_dir = Path(module.path).parent if module.path else Path.cwd()

    def report(self, code, message: str, span: Span, hint: str | None = None, fix: Fix | None = None) -> None:
        self.sink.append(error(code, message, span, hint, fix))

    def release(self) -> None:
        """Let go of the elaborator, whose callbacks refer back to this checker: without that cycle the
        checker, and the previous module it holds, are freed when the check ends, by reference counting
        rather than by the cycle collector (which is paused during checks, and slow after large ones)."""
        del self.elaborator

    # --- declarations ---------------------------------------------------------------------------------

    def run(self) -> None:
        for statement in self.module.tree.statements:
            if isinstance(statement, A.Import):
                self.module.imports.append((statement, self.import_module(statement)))
            elif isinstance(statement, A.Let):
                self.declare(statement.name, statement.name_span, self.module.lets, statement)
            elif isinstance(statement, A.Study):
                self.declare(statement.name, statement.name_span, self.module.studies, StudyInfo(statement))
            else:
                self.declare(statement.name, statement.name_span, self.module.schemes, SchemeInfo(statement))
        for name in list(self.module.lets):
            self.let_symbol(name)
        for name in list(self.module.schemes):
            self.check_scheme(name, [])
        for info in self.module.studies.values():
            self.check_study(info)

    def declare(self, name: str, span: Span, table: dict, value) -> None:
        module = self.module
        if name in module.lets or name in module.schemes or name in module.studies:
            self.report(C.REPEATED, f"`{name}` is defined twice in this file", span)
            return
        table[name] = value

    def import_module(self, node: A.Import) -> Module | None:
        found = self._stdlib_module(node) if isinstance(node.target, A.Name) else self._file_module(node)
        if found is None:
            return None
        path, shown = found
        loaded = self.program.load(path)
        cycle = self._cycle_through(path)
        if cycle is not None:
            self.report(C.CYCLE, f"importing `{shown}` leads back to this file ({cycle})", node.target.span)
            return None
        if isinstance(loaded, str):
            self.report(C.IMPORT_NOT_FOUND, f"`{shown}` {loaded}", node.target.span)
            return None
        if any(d.is_error for d in loaded.diagnostics):
            self.report(C.IMPORT_NOT_FOUND, f"`{shown}` has errors; check it on its own", node.target.span)
        return loaded

    def _stdlib_module(self, node: A.Import) -> tuple[Path, str] | None:
        """`import stdlib.NAME`: the module's file and its name as written; None (reported) if none."""
        path = stdlib_file(node.target.dotted)
        shown = as_written(node.target.dotted)
        if path is not None:
            return path, shown
        if node.target.parts[0] == STDLIB:
            available = [p.name[:-4] for p in Path(str(resources.files("daic.stdlib"))).glob("*.dai")]
            hint = did_you_mean(node.target.parts[-1], available)
        else:
            hint = 'standard-library modules are `stdlib.NAME`; import a file with `import "path.dai"`'
        self.report(C.IMPORT_NOT_FOUND, f"no module `{shown}`", node.target.span, hint)
        return None

    def _file_module(self, node: A.Import) -> tuple[Path, str] | None:
        """`import "path.dai"`: the file, relative to this one, and its path as written; None (reported)
        where it cannot be looked up, is no .dai file, or does not exist."""
        path = self.base_dir / node.target.value
        shown = as_written(node.target.value, node.target)
        found = self.program.probe(path)
        if found.kind == "unusable":
            self.report(C.IMPORT_NOT_FOUND, f"cannot look up `{shown}`: {found.reason}", node.target.span)
            return None
        if path.suffix == ".net" or found.kind == "folder":
            what, hint = (
                ("a network", 'a scheme names its network with `net = "file.net"`')
                if path.suffix == ".net"
                else ("a folder", None)
            )
            self.report(
                C.IMPORT_NOT_FOUND, f"`{shown}` is {what}; import takes .dai files", node.target.span, hint
            )
            return None
        if found.kind != "file":
            where = as_written(str(self.base_dir))
            hint = _escape_hint(node.target.value)
            self.report(C.IMPORT_NOT_FOUND, f"no file `{shown}` (looked in {where})", node.target.span, hint)
            return None
        return path, shown

    def _cycle_through(self, imported: Path) -> str | None:
        """The import cycle through this module and `imported`, if one was found, as `a -> b -> a`."""
        if self.module.path is None:
            return None
        here, there = path_key(Path(self.module.path)), path_key(imported)
        for chain in self.program.cycles:
            if here in chain and there in chain:
                start = chain.index(here)
                ordered = chain[start:-1] + chain[:start] + [here]
                return " -> ".join(Path(p).name for p in ordered)
        return None

    # --- names ----------------------------------------------------------------------------------------

    def visible_names(self) -> list[str]:
        """The names of lets this module can write (for suggestions)."""
        return list(self.module.lets) + self.imported_names(lambda m: m.symbols)

    def imported_names(self, table: Callable[[Module], Iterable[str]]) -> list[str]:
        """The names an import brings, as this module writes them: plain from an import without `as`,
        qualified (`s.Baseline`) from one with it."""
        names = []
        for node, module in self.module.imports:
            if module is not None:
                prefix = "" if node.alias is None else node.alias + "."
                names.extend(prefix + name for name in table(module))
        return names

    def resolve(self, name: A.Name) -> Symbol | None:
        """What a name stands for (None: no let; a constructor, perhaps), noted as a use of the let being
        checked, and as a reference of the module."""
        symbol, owner = self._lookup(name)
        if self.uses:
            self.uses[-1].append((name, symbol))
        self._note(name, symbol, owner)
        return symbol

    def _note(self, name: A.Name, symbol: Symbol | None, owner: Module | None) -> None:
        if symbol is not None and owner is not None and name.parts[-1] in owner.lets:
            let = owner.lets[name.parts[-1]]
            self.module.references.append(Reference(name, owner, let, symbol))

    def _lookup(self, name: A.Name) -> tuple[Symbol | None, Module | None]:
        """The symbol a name stands for and the module that defines it."""
        if len(name.parts) == 1:
            if name.parts[0] in self.module.lets:
                return self.let_symbol(name.parts[0]), self.module
            found = [
                (node, m.exported(name.parts[0]))
                for node, m in self.module.imports
                if m is not None and node.alias is None and m.exported(name.parts[0])
            ]
            if len(found) > 1:
                where = ", ".join(self._module_name(node) for node, _ in found)
                self.report(
                    C.AMBIGUOUS,
                    f"`{name.dotted}` is defined by more than one import ({where})",
                    name.span,
                    hint="import one of them with `as` and write its qualified name",
                )
                return Symbol(name.dotted, ANY, UNKNOWN, name.span), None
            if not found:
                return None, None
            node = found[0][0]
            return found[0][1], next(m for n, m in self.module.imports if n is node)
        if len(name.parts) == 2:
            for node, module in self.module.imports:
                if module is not None and name.parts[0] == self.qualifier(node):
                    symbol = module.exported(name.parts[1])
                    if symbol is None:
                        hint, fix = renaming(name.dotted, name.span, list(module.symbols), name.parts[1])
                        message = f"`{self._module_name(node)}` defines no `{name.parts[1]}`"
                        self.report(C.UNKNOWN_NAME, message, name.span, hint, fix)
                        return Symbol(name.dotted, ANY, UNKNOWN, name.span), None
                    return symbol, module
        return None, None

    @staticmethod
    def _module_name(node: A.Import) -> str:
        return node.target.dotted if isinstance(node.target, A.Name) else node.target.value

    @staticmethod
    def qualifier(node: A.Import) -> str:
        """The name an import's definitions are qualified with: its alias, or the module's last part."""
        if node.alias:
            return node.alias
        if isinstance(node.target, A.Name):
            return node.target.parts[-1]
        return Path(node.target.value).stem

    def let_symbol(self, name: str) -> Symbol:
        if name in self.module.symbols:
            return self.module.symbols[name]
        let = self.module.lets[name]
        if name in self.in_progress:
            chain = " -> ".join([*self.in_progress[self.in_progress.index(name) :], name])
            self.report(C.CYCLE, f"`{name}` is defined in terms of itself ({chain})", let.name_span)
            return Symbol(name, ANY, UNKNOWN, let.name_span, self.module.path)
        reused = self._reused(name, let)
        if reused is not None:
            self.module.symbols[name] = reused.symbol
            self.module.elaborated[name] = reused
            return reused.symbol
        self.in_progress.append(name)
        self.uses.append([])
        reported = len(self.sink)
        kind, value = self.elaborator.check(let.value)
        if isinstance(value, Space):  # a study names the parameter after the let
            value = replace(value, label=name)
        uses = self.uses.pop()
        self.in_progress.pop()
        symbol = Symbol(name, kind, value, let.name_span, self.module.path)
        self.module.symbols[name] = symbol
        if len(self.sink) == reported:
            self.module.elaborated[name] = Elaborated(let, symbol, tuple(uses))
        return symbol

    def _reused(self, name: str, let: A.Let) -> Elaborated | None:
        """The last check's record of this let, if it still holds: the let is the same node and every
        name it looked up stands for the same symbol now (looking them up checks those lets first)."""
        record = self.previous.elaborated.get(name) if self.previous else None
        if record is None or record.let is not let:
            return None
        self.in_progress.append(name)  # a let that now leads back here is a cycle, reported as such
        self.uses.append([])  # these look-ups are no uses of the let being checked around this one
        found = []
        try:
            for used, symbol in record.uses:  # in order, stopping at the first that changed
                now, owner = self._lookup(used)
                if now is not symbol:
                    return None
                found.append((used, now, owner))
        finally:
            self.uses.pop()
            self.in_progress.pop()
        for used, symbol, owner in found:
            self._note(used, symbol, owner)
        return record

    # --- schemes --------------------------------------------------------------------------------------

    def base_scheme(self, name: A.Name) -> tuple[SchemeInfo, Module] | None:
        """The scheme a name stands for and the module that defines it."""
        if len(name.parts) == 1 and name.parts[0] in self.module.schemes:
            return self.module.schemes[name.parts[0]], self.module
        for node, module in self.module.imports:
            if module is None:
                continue
            qualified = len(name.parts) == 2 and name.parts[0] == self.qualifier(node)
            unqualified = len(name.parts) == 1 and node.alias is None
            if (qualified or unqualified) and name.parts[-1] in module.schemes:
                return module.schemes[name.parts[-1]], module
        return None

    def scheme_named(self, name: A.Name) -> SchemeInfo | None:
        """The scheme a block names (after `extends` or `tunes`); an unknown name is reported."""
        resolved = self.base_scheme(name)
        if resolved is not None:
            self.module.references.append(Reference(name, resolved[1], scheme=resolved[0]))
            return resolved[0]
        candidates = list(self.module.schemes) + self.imported_names(lambda m: m.schemes)
        hint, fix = renaming(name.dotted, name.span, candidates)
        self.report(C.UNKNOWN_NAME, f"unknown scheme `{name.dotted}`", name.span, hint, fix)
        return None

    def check_scheme(self, name: str, chain: list[str]) -> SchemeInfo:
        """Check a scheme once: its own fields here, the fields it inherits as its base already built them."""
        info = self.module.schemes[name]
        if info.built is not None:
            return info
        node = info.node
        base_values: dict[str, object] = {}
        base = info.base = self._base(info, chain)
        if base is not None and base.built is not None:
            base_values = {k: base.built.args[k] for k in base.explicit}
            info.net_dir = base.net_dir
        bound = self.bind_fields(SCHEME_DECL, node)
        values: dict[str, object] = {}
        for param in SCHEME_DECL.params:
            if param.name in bound:
                values[param.name] = self.field_value(param, bound[param.name])
            elif param.name in base_values:
                values[param.name] = base_values[param.name]
            elif param.required:
                # Behind a base that could not be found, missing fields would only repeat that error.
                if node.base is None or base is not None:
                    hint = f"it is not set here nor in `{node.base.dotted}`" if node.base else None
                    label = f"scheme `{node.name}`"
                    self.elaborator.missing(SCHEME_DECL, param, node.name_span, "field", hint, label)
                values[param.name] = UNKNOWN
            else:
                values[param.name] = self.elaborator.default(param)
        info.explicit = set(bound) | set(base_values)
        self._hold_epochs(node, bound, values)
        if "net" in bound:
            info.net_dir = self.base_dir
        info.built = Built(SCHEME_DECL, MappingProxyType(values), node.name_span)
        if base is not None and "net" not in bound and "data" not in bound:
            info.network, info.net_path = base.network, base.net_path
        elif info.net_dir is not None:
            self._check_nets(info, values.get("net"), bound.get("net"))
        return info

    def _hold_epochs(self, node: A.Scheme, bound: dict[str, A.Expr], values: dict[str, object]) -> None:
        """A warning where a scheme's epochs end before one of its schedules settles (reported where the
        epochs or the late field are written, not again on each scheme that extends it)."""
        late = unsettled(values, values.get("epochs"))
        if not late or not ({"epochs", *(name for name, _ in late)} & set(bound)):
            return
        at = bound["epochs"].span if "epochs" in bound else node.name_span
        end = max(e for _, e in late)
        self.sink.append(
            warning(
                C.SHORT_EPOCHS,
                f"training ends after {values['epochs']} epochs, before the scheme's schedules settle "
                f"({described(late)}): the run never trains on their final values",
                at,
                hint=f"set epochs = {math.ceil(end)}, or end the schedules sooner",
            )
        )

    def _check_nets(self, info: SchemeInfo, net: object, written: A.Expr | None) -> None:
        """The network a scheme names, or each one a Choice of them may choose."""
        if isinstance(net, Space) and written is not None:
            for option, place in zip(net.options, net.places(written), strict=True):
                self.check_net(info, option, place, info.node.name_span)
        elif isinstance(net, str):
            self.check_net(info, net, written, info.node.name_span)

    def bind_fields(self, decl: Constructor, node: A.Scheme | A.Study) -> dict[str, A.Expr]:
        """A block's fields bound to its declaration's parameters; a field given twice is reported."""
        own: dict[str, A.Field] = {}
        for f in node.fields:
            if f.name in own:
                self.report(C.REPEATED, f"field `{f.name}` is given twice", f.name_span)
            own[f.name] = f
        label = f"{decl.name} `{node.name}`"
        return self.elaborator.bind(decl, node, (), tuple(own.values()), what="field", label=label)

    def field_value(self, param: Param, expr: A.Expr, fixed: str | None = None) -> object:
        """A field's checked value. A search space in a field whose value every trial of a study shares
        (`fixed`: why; the parameter's own reason by default) is reported."""
        value = self.elaborator.argument(param, expr)
        reason = fixed or param.fixed
        space = spaces_in(value)[:1] if reason else []
        if space:
            self.report(
                C.SPACE_NOT_ALLOWED,
                f"`{param.name}` takes a single value, not a search space (`{describe(space[0])}`): {reason}",
                expr.span,
            )
            return UNKNOWN
        return value

    def _base(self, info: SchemeInfo, chain: list[str]) -> SchemeInfo | None:
        node = info.node
        if node.base is None:
            return None
        base = self.scheme_named(node.base)
        if base is None:
            return None
        local = any(base is s for s in self.module.schemes.values())
        if local and base.node.name in (*chain, node.name):
            cycle = " -> ".join([*chain, node.name, base.node.name])
            self.report(C.CYCLE, f"scheme `{node.name}` extends itself ({cycle})", node.base.span)
            return None
        if base.built is None and base.node.name in self.module.schemes:
            return self.check_scheme(base.node.name, [*chain, node.name])
        return base

    def check_net(self, info: SchemeInfo, net: str, written: A.Expr | None, name_span: Span) -> None:
        """Check the network a scheme names: `written` is its own `net` field's value (None when the field
        comes from a base), where problems with the file are reported (else at the scheme's name)."""
        if not self.program.check_nets:
            return
        span = written.span if written is not None else name_span
        path = (info.net_dir or self.base_dir) / net
        found = self.program.probe(path)
        if found.kind != "file" and (shipped := stdlib_net(net)) is not None:
            path, found = shipped, self.program.probe(shipped)
        shown = as_written(net, written)
        if found.kind != "file":
            # A `net` that comes from a base was reported where the base sets it.
            if written is not None:
                self._missing_net(net, shown, path, found, span)
            return
        try:
            text = self.program.read(path)
        except (OSError, UnicodeDecodeError):
            self.report(C.IMPORT_NOT_FOUND, f"network file `{shown}` cannot be read as text", span)
            return
        if written is not None:
            info.nets.append((written.span, str(path)))
        data = info.built.args.get("data") if info.built else None
        facts = data.decl.dataset.for_args(data.args) if isinstance(data, Built) else None
        parsed = parse_net(text)
        network = analyze_for_data(parsed.tree, facts)
        info.network, info.net_path = network, str(path)
        problems = [d for d in (*parsed.diagnostics, *network.diagnostics) if d.is_error]
        if problems:
            first = problems[0]
            self.report(
                first.code,
                f"network `{shown}` has {len(problems)} error{'s' if len(problems) > 1 else ''}"
                f"{' with this data set' if facts else ''}; the first, at line {first.span.line}: "
                f"{first.message}",
                span,
                first.hint,
            )

    def _missing_net(self, net: str, shown: str, path: Path, found, span: Span) -> None:
        """A scheme's network file that cannot be looked up, or is not there."""
        if found.kind == "unusable":
            self.report(C.IMPORT_NOT_FOUND, f"cannot look up network file `{shown}`: {found.reason}", span)
            return
        hint = (
            _escape_hint(net)
            or "paths are relative to this .dai file; `stdlib/nets/NAME.net` names a shipped one"
        )
        where = as_written(str(path.parent))
        self.report(C.IMPORT_NOT_FOUND, f"no network file `{shown}` (looked in {where})", span, hint)

    # --- studies --------------------------------------------------------------------------------------

    def check_study(self, info: StudyInfo) -> None:
        """A study's fields, and that it can run: its scheme has spaces to choose, its objectives are the
        scheme's tests, and its pruner has one objective and evaluations to read."""
        node = info.node
        bound = self.bind_fields(STUDY_DECL, node)
        info.built = self._study_fields(node, bound)
        info.scheme = self.scheme_named(node.scheme)
        if info.scheme is None:
            return
        scheme = info.scheme.built
        if scheme is None or any(v is UNKNOWN for v in scheme.args.values()):
            return  # the scheme's own errors were reported where it is written
        if not spaces_in(scheme):
            self.report(
                C.STUDY,
                f"scheme `{node.scheme.dotted}` holds no search space: a study of it has nothing to choose",
                node.scheme.span,
                hint="write `Range(low, high)` or `Choice([a, b])` where the study should choose a value",
            )
        info.objectives = self._objectives(info, bound.get("objectives"))
        self._check_pruner(info, bound.get("pruner"))

    def _study_fields(self, node: A.Study, bound: dict[str, A.Expr]) -> Built:
        values: dict[str, object] = {}
        for param in STUDY_DECL.params:
            if param.name in bound:
                values[param.name] = self.field_value(param, bound[param.name], STUDY_FIXED)
            elif param.required:
                label = f"study `{node.name}`"
                self.elaborator.missing(STUDY_DECL, param, node.name_span, "field", label=label)
                values[param.name] = UNKNOWN
            else:
                values[param.name] = self.elaborator.default(param)
        return Built(STUDY_DECL, MappingProxyType(values), node.name_span)

    def _objectives(self, info: StudyInfo, written: A.Expr | None) -> tuple[int, ...]:
        """Where each objective stands in the scheme's tests (reported when it is none of them)."""
        objectives = info.built.args["objectives"]
        if not isinstance(objectives, tuple) or written is None:
            return ()
        tests = info.scheme.built.args["test"]
        items = written.items if isinstance(written, A.ListExpr) else (written,) * len(objectives)
        found: list[int] = []
        if not objectives:
            self.report(C.STUDY, "a study needs at least one objective", written.span)
        for objective, item in zip(objectives, items, strict=True):
            index = next((i for i, test in enumerate(tests) if test == objective), None)
            if index is None:
                listed = ", ".join(value_text(t) for t in tests)
                self.report(
                    C.STUDY,
                    f"`{value_text(objective)}` is not one of scheme `{info.node.scheme.dotted}`'s tests "
                    f"({listed})",
                    item.span,
                    hint="an objective is one of the scheme's tests, written as the scheme writes it",
                )
            elif index in found:
                self.report(C.REPEATED, f"objective `{value_text(objective)}` is given twice", item.span)
            else:
                found.append(index)
        return tuple(found)

    def _check_pruner(self, info: StudyInfo, written: A.Expr | None) -> None:
        if written is None or info.built.args["pruner"] is None:
            return
        count = len(info.objectives)
        if count > 1:
            self.report(
                C.STUDY,
                f"Optuna prunes only studies of one objective; this study has {count}",
                written.span,
                hint="remove the pruner, or keep one objective",
            )
        elif info.scheme.built.args["test_every"] is None:
            self.report(
                C.STUDY,
                f"pruning reads evaluations made during training, and scheme `{info.node.scheme.dotted}` "
                "sets no `test_every`",
                written.span,
                hint="set `test_every` in the scheme (an evaluation every few epochs)",
            )


STUDY_FIXED = "a study's own fields take single values"
