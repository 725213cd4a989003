"""The Python API (`import daic`): the README's example (docs/python.md shows the same) runs as written,
and each function answers as its command does, a user's mistake a `daic.DaicError` with the command's
message."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import daic

ROOT = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)


def test_the_documented_example_runs(tmp_path, monkeypatch, capsys):
    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert re.search(r"```python\n(.*?)```", (ROOT / "docs" / "python.md").read_text(), re.S).group(1) == code
    for folder in ("examples", "stdlib"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    exec(compile(code, "README.md", "exec"), scope)  # twice: the run folder is resumed, finished as it is
    capsys.readouterr()
    exec(compile(code, "README.md", "exec"), scope)
    assert scope["errors"] == []
    assert scope["summary"]["epochs"] == 2 and (tmp_path / "runs" / "api" / "checkpoint.pt").exists()
    outcomes = scope["outcomes"]
    assert len(outcomes) == 40 and {o.status for o in outcomes} <= {"verified", "falsified", "unknown"}
    assert 0 < scope["verified"] <= 40
    assert re.fullmatch(
        r"\d+ of 40 verified at eps 0.05; the run's accuracy \d+\.\d%\n", capsys.readouterr().out
    )


def test_a_run_folder_taken_and_no_epochs_are_refused_in_pythons_terms(tmp_path):
    """The command line's options become the keywords a Python caller passes, and dir(daic) lists them."""
    plan = daic.load_scheme(ROOT / "examples" / "quickstart.dai")
    daic.train(plan, tmp_path / "runs" / "api", epochs=1)
    with pytest.raises(daic.DaicError) as taken:
        daic.train(plan, tmp_path / "runs" / "api", epochs=1)
    assert str(taken.value).endswith(
        "already holds a finished run: pass resume=True with more epochs to extend it, or choose another out"
    )
    for epochs in (0, -1, 1.5):
        with pytest.raises(daic.DaicError, match=rf"epochs={epochs}: train at least 1 epoch"):
            daic.train(plan, tmp_path / "runs" / "new", epochs=epochs)
    assert not (tmp_path / "runs" / "new").exists()
    assert {"certify", "train", "load_network", "DaicError", "verify_vnnlib"} <= set(dir(daic))


def test_a_plain_torch_module_certifies_as_the_network_daic_reads_from_it():
    """An auto_LiRPA user's network, plain torch.nn, certifies in one call; it is read as `daic import`
    reads its ONNX export, and a module of a layer daic lacks is refused naming the operator."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 10)
    )
    x, y = torch.rand(6, 1, 8, 8), torch.zeros(6, dtype=torch.long)
    with torch.no_grad():
        y = module(x).argmax(1)
    outcomes = daic.certify(module, x, y, epsilon=0.01, domains=["Box", "CROWN"], attack=False)
    network = daic.load_network(module, input_shape=(1, 8, 8))
    with torch.no_grad():
        assert torch.allclose(network.float()(x), module(x), atol=1e-5)
    again = daic.certify(network, x, y, epsilon=0.01, domains=["Box", "CROWN"], attack=False)
    assert [o.status for o in outcomes] == [o.status for o in again] and len(outcomes) == 6
    assert [o.margin for o in outcomes] == pytest.approx([o.margin for o in again])
    with pytest.raises(daic.DaicError, match="input_shape"):
        daic.load_network(module)
    lacking = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3), torch.nn.Softplus())
    with pytest.raises(daic.DaicError, match="Softplus"):
        daic.certify(lacking, x, torch.zeros(6, dtype=torch.long), epsilon=0.01)


def test_import_daic_loads_no_torch():
    code = "import sys, daic; print('torch' in sys.modules, daic.__version__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split()[0] == "False"


def test_check_returns_the_diagnostics_of_a_source(tmp_path):
    net = tmp_path / "bad.net"
    net.write_text("Conv2D filters=16 input_shape=[8, 8, 1]\n")
    (diagnostic,) = daic.check(net)
    assert diagnostic.is_error and diagnostic.span.line == 1 and "kernel_size" in diagnostic.message


def test_mistakes_are_daic_errors_with_the_commands_message(tmp_path):
    with pytest.raises(daic.DaicError, match=r"is not a \.dai scheme"):
        daic.load_scheme(tmp_path / "x.txt")
    with pytest.raises(daic.DaicError, match=r"^dataset Nope: no such data set"):
        daic.load_data("Nope")
    with pytest.raises(daic.DaicError, match=r"^domains: "):
        daic.certify(
            torch.nn.Identity(), torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), 0.1, domains=["Bx"]
        )
    with pytest.raises(daic.DaicError, match="does not exist"):
        daic.import_onnx(tmp_path / "none.onnx")
    with pytest.raises(AttributeError):
        daic.not_a_function  # noqa: B018


def test_a_network_without_weights_is_freshly_initialised_and_exports(tmp_path):
    model = daic.load_network(ROOT / "stdlib" / "nets" / "digits_ffnn.net")
    assert model(torch.rand(3, 1, 8, 8)).shape == (3, 10)
    assert 0 <= daic.export_onnx(model, (1, 8, 8), tmp_path / "m.onnx") < 1e-4
    imported = daic.import_onnx(tmp_path / "m.onnx")
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        assert torch.allclose(imported.model(x), model(x), atol=1e-5)


def test_a_vnnlib_property_is_answered_as_the_command_answers_it(tmp_path):
    from tests.compiler.commands.test_verify_properties import prop, two_by_two

    network = two_by_two(tmp_path / "two.onnx")
    assert daic.verify_vnnlib(network, prop(tmp_path / "p1.vnnlib", "1.5"))["result"] == "unsat"
    answer = daic.verify_vnnlib(network, prop(tmp_path / "p2.vnnlib", "0.5"), domains=["Box"])
    assert answer["result"] == "sat" and answer["witness"]["Y"][1] - answer["witness"]["Y"][0] >= 0.5


def test_a_test_set_is_verified_as_the_command_verifies_it(tmp_path):
    """daic.verify and `daic verify` on the same checkpoint: the same summary, from records alike."""
    from click.testing import CliRunner

    from daic.compiler.commands.cli import main
    from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB

    net = STDLIB / "nets" / "digits_ffnn.net"
    (tmp_path / "s.dai").write_text(DIGITS_SCHEME % net)
    daic.train(tmp_path / "s.dai", tmp_path / "run", epochs=1)
    weights = tmp_path / "run" / "checkpoint.pt"
    options = {"eps": 0.05, "domains": ["Box", "CROWN"], "limit": 30}
    summary = daic.verify(net, weights, out=tmp_path / "api.jsonl", **options)
    command = ["verify", str(net), "--weights", str(weights), "--eps", "0.05", "--domain", "Box"]
    command += [
        "--domain",
        "CROWN",
        "--limit",
        "30",
        "--out",
        str(tmp_path / "cli.jsonl"),
        "--format",
        "json",
    ]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert summary["images"] == printed["images"] == 30
    for key in ("verified", "falsified", "unknown", "verified_by", "accuracy_percent", "epsilon", "cascade"):
        assert summary[key] == printed[key], key
    # A second radius makes a curve: one summary each, the record of 0.05 reused.
    curve = daic.verify(net, weights, **{**options, "eps": [0.05, 0.1]}, out=tmp_path / "api.jsonl")
    assert [point["epsilon"] for point in curve] == [0.05, 0.1]
    with pytest.raises(daic.DaicError, match=r"^limit=0: "):
        daic.verify(net, weights, limit=0)


def test_check_reports_and_write_import_answer_as_their_commands(tmp_path):
    net = tmp_path / "bad.net"
    net.write_text("Conv2D filters=16 input_shape=[8, 8, 1]\n")
    (report,) = daic.check_reports(tmp_path)
    assert report.source.path == str(net) and report.has_errors and len(report.diagnostics) == 1
    model = daic.load_network(ROOT / "stdlib" / "nets" / "digits_ffnn.net")
    daic.export_onnx(model, (1, 8, 8), tmp_path / "m.onnx")
    imported, weights, difference = daic.write_import(tmp_path / "m.onnx", tmp_path / "m.net")
    assert (tmp_path / "m.net").read_text() == imported.text and weights == tmp_path / "m.pt"
    assert 0 <= difference < 1e-4
    with pytest.raises(daic.DaicError, match="force=True") as refused:
        daic.write_import(tmp_path / "m.onnx", tmp_path / "m.net")
    assert refused.value.exit_code in (1, 2)


@pytest.mark.parametrize(
    ("epsilon", "x", "y", "message"),
    [
        (-1.0, (2, 1, 8, 8), (2,), r"epsilon=-1.0 is not a radius: a finite number >= 0"),
        (float("nan"), (2, 1, 8, 8), (2,), r"epsilon=nan is not a radius"),
        (0.1, (2, 64), (2,), r"the network cannot take images of shape \(64,\)"),
        (0.1, (2, 1, 8, 8), (3,), r"x has shape \(2, 1, 8, 8\) and y \(3,\): pass a batch of images"),
    ],
)
def test_certify_refuses_what_it_cannot_certify_with_a_daic_error(epsilon, x, y, message):
    model = daic.load_network(ROOT / "stdlib" / "nets" / "digits_conv.net")
    with pytest.raises(daic.DaicError, match=message) as refused:
        daic.certify(model, torch.rand(*x), torch.zeros(*y, dtype=torch.long), epsilon, domains=["Box"])
    assert refused.value.exit_code == 2


def test_sources_as_text_are_checked_and_formatted_as_standard_input_is(tmp_path):
    report = daic.check_text("Linear out=10\nReLU\nLinear out=x\n", "model.net")
    assert report.source.path == "model.net" and [d.code.id for d in report.diagnostics if d.is_error]
    assert not daic.check_text(b"Linear out=10 input_shape=[4]\n", "m.net").diagnostics
    assert daic.format_text("Conv2D, filters=4, kernel_size=[3,3]\n", "a.net").text == (
        "Conv2D filters=4 kernel_size=[3, 3]\n"
    )
    broken = daic.format_text("scheme S {\n", "s.dai")
    assert broken.text is None and broken.report.diagnostics[0].is_error
    with pytest.raises(daic.DaicError, match=r"^filename a.txt: not a .net or .dai name$"):
        daic.check_text("ReLU\n", "a.txt")


def test_files_are_formatted_without_writing_anything(tmp_path):
    (tmp_path / "a.net").write_text("Conv2D, filters=4, kernel_size=[3,3]\n")
    (tmp_path / "b.net").write_text("ReLU\n")
    results = {Path(r.path).name: r for r in daic.format_files(tmp_path)}
    assert results["a.net"].changed and not results["b.net"].changed
    assert results["a.net"].diff().splitlines()[-2:] == [
        "-Conv2D, filters=4, kernel_size=[3,3]",
        "+Conv2D filters=4 kernel_size=[3, 3]",
    ]
    assert (tmp_path / "a.net").read_text() == "Conv2D, filters=4, kernel_size=[3,3]\n"


def test_a_network_is_described_as_daic_show_lists_it(tmp_path):
    network = daic.describe_network(ROOT / "stdlib" / "nets" / "digits_ffnn.net")
    assert network.input_shape == (1, 8, 8) and network.output_shape == (10,)
    assert network.params == sum(
        p.numel() for p in daic.load_network(ROOT / "stdlib/nets/digits_ffnn.net").parameters()
    )
    wrong = daic.describe_network(ROOT / "stdlib" / "nets" / "digits_ffnn.net", classes=7).diagnostics
    assert [d.is_error for d in wrong] == [True] and "7" in wrong[0].message
    (tmp_path / "bad.net").write_text("Conv2D filters=\n")
    with pytest.raises(daic.DaicError) as refused:
        daic.describe_network(tmp_path / "bad.net")
    assert refused.value.diagnostics and refused.value.exit_code == 1
    with pytest.raises(daic.DaicError, match=r"s.dai: not a .net file") as refused:
        daic.describe_network(tmp_path / "s.dai")
    assert refused.value.exit_code == 2


def test_init_writes_the_starter_once(tmp_path):
    written = daic.init(tmp_path / "project")
    assert sorted(path.name for path in written) == ["model.net", "train.dai"]
    assert daic.check(tmp_path / "project") == []
    with pytest.raises(daic.DaicError, match="already exist; init overwrites nothing"):
        daic.init(tmp_path / "project")


def test_a_folder_of_properties_is_answered_as_the_command_answers_it(tmp_path):
    from click.testing import CliRunner

    from daic.compiler.commands.cli import main
    from tests.compiler.commands.test_verify_properties import prop, two_by_two

    network = two_by_two(tmp_path / "two.onnx")
    (tmp_path / "props").mkdir()
    prop(tmp_path / "props" / "p1.vnnlib", "1.5")
    prop(tmp_path / "props" / "p2.vnnlib", "0.5")
    summary, rows = daic.verify_properties(tmp_path / "props", network, out=tmp_path / "api.jsonl")
    assert (summary["properties"], summary["unsat"], summary["sat"]) == (2, 1, 1)
    assert [row["result"] for row in rows] == ["unsat", "sat"]
    command = [
        "verify",
        str(network),
        "--vnnlib",
        str(tmp_path / "props"),
        "--out",
        str(tmp_path / "c.jsonl"),
    ]
    result = CliRunner().invoke(main, [*command, "--format", "json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert {key: printed[key] for key in ("properties", "unsat", "sat", "timeout", "unknown", "errors")} == {
        key: summary[key] for key in ("properties", "unsat", "sat", "timeout", "unknown", "errors")
    }
    with pytest.raises(daic.DaicError, match=r"^vnnlib .*nowhere does not exist$"):
        daic.verify_properties(tmp_path / "nowhere", network)


def test_export_writes_onnx_and_properties_and_nothing_on_a_mistake(tmp_path):
    from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB

    net = STDLIB / "nets" / "digits_ffnn.net"
    (tmp_path / "s.dai").write_text(DIGITS_SCHEME % net)
    daic.train(tmp_path / "s.dai", tmp_path / "run", epochs=1)
    weights = tmp_path / "run" / "checkpoint.pt"
    with pytest.raises(daic.DaicError, match=r"^vnnlib .*taken is a file: pass a folder") as refused:
        (tmp_path / "taken").write_text("")
        daic.export(net, weights, onnx=tmp_path / "n.onnx", vnnlib=tmp_path / "taken", limit=3)
    assert refused.value.exit_code == 2 and not (tmp_path / "n.onnx").exists()
    written = daic.export(net, weights, onnx=tmp_path / "n.onnx", vnnlib=tmp_path / "props", limit=3)
    assert written.onnx == tmp_path / "n.onnx" and 0 <= written.difference < 1e-4
    assert [p.name for p in written.properties] == ["prop_0.vnnlib", "prop_1.vnnlib", "prop_2.vnnlib"]
    assert written.instances.read_text().count("\n") == 3 and written.epsilon > 0
    with pytest.raises(daic.DaicError, match=r"^export: pass onnx=FILE, vnnlib=DIR, or both$"):
        daic.export(net, weights)
