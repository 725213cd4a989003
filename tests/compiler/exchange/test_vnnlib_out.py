"""`daic export --vnnlib`: one VNN-LIB property per test image, read back here by a small reader of the
format: the image lies in the input box, which is the exact clipped eps-ball, and the property's output
condition holds at the network's logits exactly when the image is misclassified."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
import torch

from daic.compiler.exchange.vnnlib_out import decimal
from daic.compiler.jobs.weights import load_trained
from daic.compiler.lower import lower_dataset
from tests.compiler.commands.test_run_checkpoints import FFNN, checkpoint, daic  # noqa: F401  (checkpoint: a fixture)

torch.set_num_threads(1)


def read_vnnlib(text: str) -> list:
    """The forms of a VNN-LIB file, as nested lists of atoms (comments dropped); strict about parentheses."""
    tokens = re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text))
    stack: list[list] = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            assert len(stack) > 1, "a ) closes nothing"
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    assert len(stack) == 1, "a ( is never closed"
    return stack[0]


def holds(formula, values: dict[str, Fraction]) -> bool:
    head, *args = formula
    if head in ("and", "or"):
        found = [holds(a, values) for a in args]
        return all(found) if head == "and" else any(found)
    left, right = (values[a] if a in values else Fraction(a) for a in args)
    return {">=": left >= right, "<=": left <= right}[head]


def split(forms: list) -> tuple[list[str], list[str], list, list]:
    """(inputs, outputs, the input constraints, the output constraints), by the variables they name."""
    declared = [f[1] for f in forms if f[0] == "declare-const"]
    assert all(f[2] == "Real" for f in forms if f[0] == "declare-const")
    asserted = [f[1] for f in forms if f[0] == "assert"]
    assert len(declared) + len(asserted) == len(forms)

    def names(formula) -> set[str]:
        return {a for a in formula[1:] if isinstance(a, str)} | {
            n for a in formula[1:] if isinstance(a, list) for n in names(a)
        }

    on_inputs = [a for a in asserted if all(n.startswith("X_") or n[0].isdigit() for n in names(a))]
    on_outputs = [a for a in asserted if a not in on_inputs]
    return (
        [d for d in declared if d.startswith("X_")],
        [d for d in declared if d.startswith("Y_")],
        on_inputs,
        on_outputs,
    )


def test_decimals_are_the_floats_exactly():
    assert decimal(Fraction(0.1)) == "0.1000000000000000055511151231257827021181583404541015625"
    assert decimal(Fraction(0)) == "0.0" and decimal(Fraction(-3)) == "-3.0"
    assert decimal(Fraction(5e-324)).startswith("0.000") and Fraction(decimal(Fraction(5e-324))) == Fraction(
        5e-324
    )
    generator = torch.Generator().manual_seed(0)
    for value in (
        torch.randn(200, generator=generator, dtype=torch.float64)
        * 10.0 ** torch.randint(-30, 30, (200,), generator=generator)
    ).tolist():
        assert Fraction(decimal(Fraction(value))) == Fraction(value)
    with pytest.raises(ValueError):
        decimal(Fraction(1, 3))


def test_each_property_is_the_clipped_ball_and_the_labels_margins(checkpoint, tmp_path):  # noqa: F811
    folder = tmp_path / "props"
    result = daic(
        "export", FFNN, "--weights", checkpoint, "--vnnlib", folder, "--eps", "0.3", "--limit", "12"
    )
    assert (result.exit_code, result.stdout) == (0, f"wrote 12 VNN-LIB properties (eps 0.3) to {folder}\n")
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"prop_{i}.vnnlib" for i in range(12))
    model, _state, decl, _network = load_trained(str(FFNN), str(checkpoint), None)
    data = lower_dataset(decl).load(None, False)
    misclassified = 0
    for i in range(12):
        text = (folder / f"prop_{i}.vnnlib").read_text()
        assert text.startswith(
            f"; daic export: image {i} of the Digits test set, label {int(data.test_y[i])}.\n"
        )
        inputs, outputs, on_inputs, on_outputs = split(read_vnnlib(text))
        pixels = data.test_x[i].double().flatten().tolist()
        assert inputs == [f"X_{k}" for k in range(64)] and outputs == [f"Y_{j}" for j in range(10)]
        # The box: a lower and an upper end per input, exactly max(x - eps, 0) and min(x + eps, 1).
        ends: dict[tuple[str, str], Fraction] = {}
        for op, name, value in on_inputs:
            assert (op, name) not in ends
            ends[op, name] = Fraction(value)
        for k, p in enumerate(pixels):
            assert ends[">=", f"X_{k}"] == max(Fraction(p) - Fraction(0.3), Fraction(0))
            assert ends["<=", f"X_{k}"] == min(Fraction(p) + Fraction(0.3), Fraction(1))
            assert ends[">=", f"X_{k}"] <= Fraction(p) <= ends["<=", f"X_{k}"]
        assert any(ends[">=", f"X_{k}"] == 0 for k in range(64)) and any(
            ends["<=", f"X_{k}"] == 1 for k in range(64)
        )
        # The output condition: some other class scores at least the label, true at the image just when the
        # network gets the image wrong.
        (condition,) = on_outputs
        assert condition[0] == "or" and len(condition) == 10
        logits = model.double()(data.test_x[i : i + 1].double())[0].tolist()
        wrong = (
            max(v for j, v in enumerate(logits) if j != int(data.test_y[i])) >= logits[int(data.test_y[i])]
        )
        assert holds(condition, {f"Y_{j}": Fraction(v) for j, v in enumerate(logits)}) == wrong
        misclassified += wrong
        # Moving the winning other class above the label makes it hold.
        raised = {f"Y_{j}": Fraction(v) for j, v in enumerate(logits)}
        other = next(j for j in range(10) if j != int(data.test_y[i]))
        raised[f"Y_{other}"] = raised[f"Y_{int(data.test_y[i])}"]
        assert holds(condition, raised)
    assert misclassified < 12


def test_export_asks_for_a_target_and_keeps_others_files(checkpoint, tmp_path):  # noqa: F811
    result = daic("export", FFNN, "--weights", checkpoint)
    assert (result.exit_code, result.stderr) == (2, "daic: export: pass --onnx FILE, --vnnlib DIR, or both\n")
    folder = tmp_path / "props"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    result = daic("export", FFNN, "--weights", checkpoint, "--vnnlib", folder, "--limit", "2")
    assert result.exit_code == 2
    assert result.stderr == (
        f"daic: --vnnlib {folder} holds files an export did not write (notes.txt): "
        "pass an empty or new folder\n"
    )
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    result = daic("export", FFNN, "--weights", checkpoint, "--vnnlib", folder / "notes.txt")
    assert result.exit_code == 2 and "is a file: pass a folder for the properties" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["props"]  # no staging folder left behind


def test_a_new_export_replaces_the_last_one(checkpoint, tmp_path):  # noqa: F811
    folder = tmp_path / "props"
    assert daic("export", FFNN, "--weights", checkpoint, "--vnnlib", folder, "--limit", "5").exit_code == 0
    result = daic("export", FFNN, "--weights", checkpoint, "--vnnlib", folder, "--limit", "2", "--eps", "0.2")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["prop_0.vnnlib", "prop_1.vnnlib"]
    assert "Robust at eps 0.2 " in (folder / "prop_1.vnnlib").read_text()


@pytest.mark.slow
def test_the_onnx_network_and_the_properties_form_a_benchmark(checkpoint, tmp_path):  # noqa: F811
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    target, folder = tmp_path / "net" / "m.onnx", tmp_path / "props"
    result = daic(
        "export", FFNN, "--weights", checkpoint, "--onnx", target, "--vnnlib", folder, "--limit", "4"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith(f"wrote 4 VNN-LIB properties (eps 0.05) and instances.csv to {folder}\n")
    rows = (folder / "instances.csv").read_text().splitlines()
    assert rows == [f"../net/m.onnx,prop_{i}.vnnlib,60" for i in range(4)]
    session = onnxruntime_session(target)
    model, _state, decl, _network = load_trained(str(FFNN), str(checkpoint), None)
    data = lower_dataset(decl).load(None, False)
    for i in range(4):
        _inputs, _outputs, _on_inputs, (condition,) = split(
            read_vnnlib((folder / f"prop_{i}.vnnlib").read_text())
        )
        theirs = session.run(None, {session.get_inputs()[0].name: data.test_x[i : i + 1].numpy()})[0][0]
        ours = model(data.test_x[i : i + 1])[0].detach().numpy()
        assert abs(theirs - ours).max() < 1e-5
        wrong = (
            max(v for j, v in enumerate(theirs) if j != int(data.test_y[i])) >= theirs[int(data.test_y[i])]
        )
        assert holds(condition, {f"Y_{j}": Fraction(float(v)) for j, v in enumerate(theirs)}) == wrong
