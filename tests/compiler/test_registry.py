"""The registry: every constructor declared once, documented, and reaching a runtime target."""

import dataclasses
import inspect

import pytest

from daic.compiler.constructors import REGISTRY
from daic.compiler.lower import load_target
from daic.compiler.registry import LAYER_CATEGORIES, Category
from daic.dsl.parser import parse_net
from tests.paths import LISTINGS


def test_every_listing_layer_kind_is_declared():
    kinds = set()
    for path in LISTINGS.glob("*.net"):
        stack = list(parse_net(path.read_text()).tree.layers)
        while stack:
            layer = stack.pop()
            kinds.add(layer.kind)
            stack.extend(layer.body)
    assert {k for k in kinds if REGISTRY.layer(k) is None} == set()


def test_declarations_are_documented_and_unique():
    seen = set()
    for decl in REGISTRY.declarations:
        assert decl.doc, decl.name
        assert all(p.doc for p in decl.params), decl.name
        key = (decl.name, decl.returns)
        assert key not in seen, key
        seen.add(key)
        if decl.category in (Category.SPACE, Category.STUDY):
            assert decl.target is None, decl.name  # values and fields the compiler's tuner reads itself
        elif decl.category in (Category.SAMPLER, Category.PRUNER):
            assert decl.target and decl.target.startswith("daic.compiler.jobs.tune.optuna_parts:"), decl.name
        elif decl.category is not Category.BLOCK:
            assert decl.target and ":" in decl.target and decl.target.startswith("daic.runtime."), decl.name


def test_table2_goals_and_test_time_constructors():
    goals = {d.name for d in REGISTRY.of_category(Category.GOAL)}
    table2 = {"Point", "Normal", "Uniform", "IFGSM", "Box", "Mix", "Sub", "Sample", "BiSample"}
    assert goals == table2 | {"CROWNIBP", "CCMix", "ExpMix", "PGD", "SmallBox"}
    assert [d.category for d in REGISTRY.lookup("Box")] == [Category.GOAL, Category.DOMAIN]
    assert {d.name for d in REGISTRY.of_category(Category.DOMAIN)} == {
        "Box",
        "HBox",
        "CROWN",
        "AlphaCROWN",
        "BranchAndBound",
        "InputSplit",
    }
    sample = REGISTRY.lookup("Sample")[0]
    assert sample.forms == (("delta", "g_s", "g_t"), ("delta", "r", "g_s", "g_t"))
    assert "reference implementation" in REGISTRY.lookup("Lin")[0].doc


def test_signature_text():
    assert REGISTRY.lookup("Mix")[0].signature() == "Mix(g1: Goal, g2: Goal, weight: Schedule) -> Goal"


def _runtime_default(target: type, key: str) -> object:
    """The runtime's default for keyword `key` of `target` (a dataclass field's factory called), or
    `inspect.Parameter.empty` where it has none; KeyError where it takes no such keyword."""
    if dataclasses.is_dataclass(target):
        field = {f.name: f for f in dataclasses.fields(target)}[key]
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        return inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
    return inspect.signature(target).parameters[key].default


def _same_default(declared: object, runtime: object) -> bool:
    """A declared default against the runtime's: equal values, or a constructor named in the language
    (`PGD`, `Adam`) against None (the runtime builds that default itself) or an instance of its class."""
    if isinstance(declared, tuple):
        return (
            isinstance(runtime, list | tuple)
            and len(declared) == len(runtime)
            and all(_same_default(d, r) for d, r in zip(declared, runtime, strict=True))
        )
    named = REGISTRY.lookup(declared) if isinstance(declared, str) else []
    if named and named[0].target:
        made = load_target(named[0].target)
        if not inspect.isclass(made):  # a function value (`relu`), which the runtime also takes by name
            return runtime in (declared, made)
        return runtime is None or isinstance(runtime, made)
    return declared == runtime


def _runtime_classes():
    """Each declaration that lowers to a runtime class, with the class (a function value such as `relu`
    has nothing to call with arguments)."""
    for decl in REGISTRY.declarations:
        if decl.target and decl.target.startswith("daic.runtime."):
            target = load_target(decl.target)
            if inspect.isclass(target):
                yield decl, target


def test_every_declaration_matches_its_runtime_signature():
    """A parameter's name and default are said once, in its declaration: the runtime object it lowers to
    takes the same keyword with the same default, so the language and the Python library agree."""
    problems = []
    for decl, target in _runtime_classes():
        for param in (p for p in decl.params if p.lowered):
            key = param.lower_as or param.name
            try:
                runtime = _runtime_default(target, key)
            except KeyError:
                problems.append(f"{decl.name}: the runtime takes no `{key}`")
                continue
            if param.required or (runtime is inspect.Parameter.empty and len(decl.forms) > 1):
                continue  # required; or filled in by the written form (Sample's r), so always passed
            if runtime is inspect.Parameter.empty or not _same_default(param.default, runtime):
                problems.append(f"{decl.name}.{param.name}: declared {param.default!r}, runtime {runtime!r}")
    assert problems == []


def test_every_declared_choice_is_what_the_runtime_accepts():
    """A parameter's choices are said in its declaration and checked again by the runtime class it lowers
    to (for Python callers): each declared choice constructs, and a word outside them is refused."""
    tied = 0
    for decl, target in _runtime_classes():
        needed = [p for p in inspect.signature(target).parameters.values() if p.default is p.empty]
        if needed:
            continue  # a scheme: built from what the lowering fills in, its choices checked there
        for param in (p for p in decl.params if p.lowered and p.choices):
            key = param.lower_as or param.name
            for choice in param.choices:
                assert getattr(target(**{key: choice}), key) == choice, (decl.name, choice)
            with pytest.raises(ValueError, match=key):
                target(**{key: "not-a-choice"})
            tied += 1
    assert tied >= 2  # CROWN's and BranchAndBound's `intermediate`


def test_every_layer_declares_its_rounding_and_splitting():
    """No layer inherits an arithmetic it may not have: each runtime layer says its own rounding, and
    only the activations whose split at zero tightens them (ReLU, LeakyReLU and Abs into affine pieces, the
    S-shaped ones into a convex and a concave side) are split by branch and bound."""
    from daic.runtime.layers import Concat, Residual, Sequential
    from daic.runtime.layers.base import AbstractMixin

    declared = {load_target(d.target) for d in REGISTRY.of_category(*LAYER_CATEGORIES) if d.target}
    layers = declared | {Sequential, Residual, Concat}  # what networks and their blocks lower to
    assert len(declared) == 22
    undeclared = sorted(c.__name__ for c in layers if c.rounding is AbstractMixin.rounding)
    assert undeclared == []
    assert sorted(c.__name__ for c in layers if c.splittable) == [
        "Abs",
        "LeakyReLU",
        "ReLU",
        "Sigmoid",
        "Tanh",
    ]
