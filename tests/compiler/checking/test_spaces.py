"""Search spaces as values of the language: their types, the parameters a study makes of them (one per
written space, shared through a let), and the scheme with chosen values in their place."""

from __future__ import annotations

from daic.compiler.checking.program import Program
from daic.compiler.checking.spaces import Space, named_spaces, resolve, spaces_in
from daic.compiler.checking.values import Built
from daic.compiler.types import FLOAT, GOAL, INT

SOURCE = """let lr = LogRange(1e-4, 1e-2)
let attack = Choice([PGD(8, 0.5), PGD(IntRange(2, 6), 0.5)])

scheme S {
    data = Digits
    epsilon = Range(0.05, 0.2)
    goal = Mix(Point, SmallBox(Range(0.1, 0.8), attack), 0.7)
    epochs = IntRange(10, 40, 10)
    optimizer = Adam(lr=lr, weight_decay=lr)
}

study T tunes S {
    objectives = [Accuracy]
}
"""


def checked(text: str = SOURCE):
    module = Program(check_nets=False).check_text(text, None)
    assert [d.message for d in module.diagnostics if d.is_error] == []
    return module


def test_spaces_are_typed_by_what_they_range_over():
    module = checked()
    assert module.symbols["lr"].type == FLOAT
    assert module.symbols["attack"].type == GOAL
    args = module.schemes["S"].built.args
    assert isinstance(args["epochs"], Space) and args["epochs"].type == INT
    assert args["epochs"].options == (10, 40) and args["epochs"].step == 10
    assert args["optimizer"].args["lr"].decl.space.log


def test_each_written_space_is_one_parameter_and_a_let_shares_its_own():
    module = checked()
    names = [name for name, _ in named_spaces(module.schemes["S"].built.args)]
    # `lr` is used twice but written once; the Range inside the second attack is drawn only with it.
    assert names == ["epsilon", "goal.SmallBox.size", "attack", "goal.PGD.k", "epochs", "lr"]
    assert len(spaces_in(module.schemes["S"].built)) == 6


def test_resolving_puts_the_chosen_value_in_every_place_of_a_shared_space():
    module = checked()
    built = module.schemes["S"].built
    chosen = {}

    def choose(space: Space) -> object:
        value = space.options[-1] if space.is_choice else space.options[0]
        chosen[id(space)] = value
        return value

    resolved = resolve(built, choose)
    assert spaces_in(resolved) == []
    adam = resolved.args["optimizer"]
    assert adam.args["lr"] == adam.args["weight_decay"] == 1e-4
    attack = resolved.args["goal"].args["g2"].args["attack"]
    assert isinstance(attack, Built) and attack.args["k"] == 2  # the second option, its own range drawn
    assert len(chosen) == 6


def test_a_study_knows_where_its_objectives_stand_among_the_tests():
    module = checked(SOURCE.replace("objectives = [Accuracy]", "objectives = [Verify, Accuracy]"))
    assert module.studies["T"].objectives == (1, 0)
    assert module.studies["T"].scheme is module.schemes["S"]
