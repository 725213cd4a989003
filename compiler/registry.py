"""The one registry: every constructor of both languages, declared once.

A declaration holds a constructor's name, what it builds (its type), its parameters with types, defaults
and allowed ranges, its documentation (with the paper's section or formula), and the runtime object it lowers
to, named by import path and imported only by the lowering. The checker, the lowering, `daic show`, hover,
completion and signature help all read these declarations; no other table of names exists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from daic.compiler.types import Type

Shape = tuple[int, ...]
# A layer's output shape for an input shape and its arguments; raises ShapeError when the input does not fit.
ShapeRule = Callable[[Shape, Mapping[str, object]], Shape]


class Category(Enum):
    """What a constructor is, in the order and with the titles `daic doc` lists them."""

    LAYER = ("layer", "Layers (.net)")
    BLOCK = ("block", "Branch blocks (.net)")
    ABSTRACT_LAYER = ("abstract layer", "Abstract layers (.net, Section 3)")
    GOAL = ("goal", "Goals (Table 2)")
    SCHEDULE = ("schedule", "Schedules (Section 4.1)")
    DATASET = ("dataset", "Data sets")
    TRANSFORM = ("transform", "Augmentations")
    OPTIMIZER = ("optimizer", "Optimizers")
    LR = ("lr", "Learning-rate schedules")
    TEST = ("test", "Tests")
    DOMAIN = ("domain", "Verification domains")
    ACTIVATION = ("activation", "Activations")
    SCHEME = ("scheme", "Scheme fields")
    SPACE = ("search space", "Search spaces (daic tune)")
    SAMPLER = ("sampler", "Samplers (daic tune)")
    PRUNER = ("pruner", "Pruners (daic tune)")
    STUDY = ("study", "Study fields (daic tune)")

    def __init__(self, label: str, title: str) -> None:
        self.label, self.title = label, title

    def __str__(self) -> str:
        return self.label


LAYER_CATEGORIES = (Category.LAYER, Category.ABSTRACT_LAYER, Category.BLOCK)
# Declarations of a block's fields (`scheme Name { ... }`, `study Name tunes S { ... }`), named by the
# keyword that opens the block; they are not called in expressions.
BLOCK_CATEGORIES = (Category.SCHEME, Category.STUDY)


def _keeps(shape: Shape, args: Mapping[str, object]) -> Shape:
    return shape


@dataclass(frozen=True)
class LayerFacts:
    """What shape inference, `daic show`, the checker's warnings and the lowering know of a layer."""

    shape: ShapeRule = _keeps
    resizes: bool = False  # its output shape may differ from its input's (Conv2D, Linear, pooling, Flatten)
    count_params: Callable[[Shape, Mapping[str, object]], int] | None = None  # trainable parameters
    # What the lowering passes besides the written parameters: (input shape, whether no affine layer came
    # before) -> keyword arguments.
    inputs: Callable[[Shape, bool], dict[str, object]] | None = None
    neurons: bool = False  # its outputs count as the network's neurons (ReLU)
    affine: bool = False  # an affine map with trained weights (Conv2D, Linear, BatchNorm)
    correlates: str | None = None  # the parameter that counts the dimensions it correlates (CorrMaxK's)


@dataclass(frozen=True)
class DatasetFacts:
    """A data set's images and labels; the runtime's loaders are given these and check files against them.
    Most data sets have fixed facts; a generic one (ImageFolder) is described by its arguments, so its
    facts are known only for a written data set: `for_args` gives them."""

    shape: Shape  # (C, H, W); () where `from_args` gives it
    classes: int  # 0 where `from_args` gives it
    value_range: tuple[float, float] = (0.0, 1.0)
    # The (shape, classes) that checked arguments describe; None where one of them is unknown (an error
    # already reported). Absent for data sets whose facts are fixed.
    from_args: Callable[[Mapping[str, object]], tuple[Shape, int] | None] | None = None

    def for_args(self, args: Mapping[str, object]) -> DatasetFacts | None:
        """The facts of this data set as `args` build it; None where the arguments leave them unknown."""
        if self.from_args is None:
            return self
        found = self.from_args(args)
        if found is None:
            return None
        return replace(self, shape=found[0], classes=found[1], from_args=None)


@dataclass(frozen=True)
class SpaceFacts:
    """How a search space draws its value (Optuna's suggest_*): among listed options, or from a range,
    evenly or evenly in its logarithm. Whole numbers where the space's type is Int."""

    choice: bool = False
    log: bool = False


@dataclass(frozen=True)
class ScheduleFacts:
    """When a schedule stops changing: `settles(args, settles_of)` gives the epoch from its arguments
    (`settles_of` answers it for a nested schedule), so that a run's epochs can be held to it."""

    settles: Callable[[Mapping[str, object], Callable[[object], float]], float]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


@dataclass(frozen=True)
class Param:
    name: str
    type: Type
    default: object = REQUIRED
    doc: str = ""
    low: float | None = None  # allowed range for constant values
    high: float | None = None
    low_open: bool = False  # True: the value must be strictly greater than `low`
    high_open: bool = False  # True: the value must be strictly less than `high`
    choices: tuple[str, ...] | None = None
    subscript: bool = False  # the paper writes it as a subscript: `IFGSM_3` is `IFGSM(3)`
    lower_as: str | None = None  # the runtime's keyword for it, where that differs from `name`
    reached: bool = False  # a value its schedule takes: held to the range of the field given the schedule
    # Goals only: "one" where the runtime takes the goal's single abstraction (a Mix there has two),
    # "passed" where it hands the goal's parts on unchanged (a Mix there stays a Mix).
    abstractions: str | None = None
    # Why a study may not search this parameter (its value is the same in every trial), or None.
    fixed: str | None = None
    # Whether the lowering passes it to the runtime object (False: only the checker reads it, as a layer's
    # `input_shape` annotation).
    lowered: bool = True

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def range_text(self) -> str | None:
        if self.low is None and self.high is None:
            return None
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        opened, closed = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {opened}{_num(self.low)}, {_num(self.high)}{closed}"

    def signature_text(self) -> str:
        text = f"{self.name}: {self.type}"
        if not self.required:
            text += f" = {self.default_text()}"
        return text

    def default_text(self) -> str:
        """The default as the language writes it (`[Accuracy, Verify]`)."""
        return _default_text(self.default)


def _num(value: float | None) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _default_text(value: object) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return value
    if isinstance(value, tuple):
        return "[" + ", ".join(_default_text(v) for v in value) + "]"
    return repr(value) if not isinstance(value, int | float) else _num(value)


@dataclass(frozen=True)
class Constructor:
    name: str
    category: Category
    returns: Type
    params: tuple[Param, ...]
    doc: str
    target: str | None  # "module:attribute" of the runtime object; None for syntax-only declarations
    aliases: tuple[str, ...] = ()
    # Alternative positional forms, as lists of parameter names (Sample's 3- and 4-argument forms).
    forms: tuple[tuple[str, ...], ...] = ()
    layer: LayerFacts | None = None  # layers, abstract layers and blocks
    dataset: DatasetFacts | None = None  # data sets
    space: SpaceFacts | None = None  # search spaces
    schedule: ScheduleFacts | None = None  # schedules and learning-rate schedules
    # Goals only: whether the goal trains on several abstractions (Mix), so that it has no single one.
    several: bool = False

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def callable_bare(self) -> bool:
        """Usable as a plain name (`Box`, `HBox`, `relu`): no parameter is required."""
        return not any(p.required for p in self.params)

    def signature(self) -> str:
        return f"{self.name}({', '.join(p.signature_text() for p in self.params)}) -> {self.returns}"


class ShapeError(Exception):
    """A layer cannot take the shape it is given. `param` names the argument at fault, if one is."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class Registry:
    """All declarations, looked up by name (or alias). A name may have several declarations that build
    different types (`Box` is a goal and a verification domain); the checker picks by the expected type."""

    def __init__(self, declarations: Iterable[Constructor]) -> None:
        self.declarations: tuple[Constructor, ...] = tuple(declarations)
        self._by_name: dict[str, list[Constructor]] = {}
        for decl in self.declarations:
            for name in (decl.name, *decl.aliases):
                self._by_name.setdefault(name, []).append(decl)

    def lookup(self, name: str) -> list[Constructor]:
        return list(self._by_name.get(name, ()))

    def layer(self, name: str) -> Constructor | None:
        return next((d for d in self.lookup(name) if d.category in LAYER_CATEGORIES), None)

    def block(self, keyword: str) -> Constructor | None:
        """The fields of the block that `keyword` opens (`scheme`, `study`)."""
        return next((d for d in self.lookup(keyword) if d.category in BLOCK_CATEGORIES), None)

    def dataset(self, name: str) -> Constructor | None:
        return next((d for d in self.lookup(name) if d.category is Category.DATASET), None)

    def of_category(self, *categories: Category) -> list[Constructor]:
        return [d for d in self.declarations if d.category in categories]

    def names(self, *categories: Category) -> list[str]:
        decls = self.of_category(*categories) if categories else self.declarations
        return sorted({n for d in decls for n in (d.name, *d.aliases)})
