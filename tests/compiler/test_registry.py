"""The registry: every constructor declared once, documented, and reaching a runtime target."""

from pathlib import Path

from daic.compiler.constructors import REGISTRY
from daic.compiler.registry import Category
from daic.dsl.parser import parse_net

LISTINGS = Path(__file__).parents[1] / "data" / "listings"


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
            assert decl.target and decl.target.startswith("daic.compiler.tune.optuna_parts:"), decl.name
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
