"""`daic import`: ONNX networks that plain PyTorch wrote, read as `.net` files of daic's language with their
weights (the same function, checked and shown like any network), daic's own exports read back to the same
network and the same verdicts, and what cannot be read refused by name, writing nothing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from daic.compiler.commands.cli import main
from daic.compiler.exchange.imported import import_onnx
from daic.compiler.jobs.run.plan import lowered, plan_run
from daic.compiler.jobs.weights import export_onnx, load_trained
from daic.compiler.lower import lower_network
from tests.compiler.commands.test_verify_command import NET, weights  # noqa: F401 - the module's fixture

torch.set_num_threads(1)


def onnx_of(model: nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    """`model` exported by torch.onnx's TorchScript exporter, as the field's code bases export (a batch of
    any size)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.rand(1, *shape),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})  # fmt: skip
    return path


class Residual(nn.Module):
    """A normalised residual network with BatchNorm, pooling of both kinds and a bias-free linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.inner = nn.Conv2d(8, 8, 1)
        self.outer = nn.Conv2d(8, 8, 3, padding=1, stride=1)
        self.pool = nn.MaxPool2d(2)
        self.average = nn.AvgPool2d(2)
        self.linear = nn.Linear(8 * 2 * 2, 10, bias=False)
        self.register_buffer("mean", torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.2, 0.25, 0.5]).view(1, 3, 1, 1))

    def forward(self, x):
        x = torch.relu(self.norm(self.conv((x - self.mean) / self.std)))
        x = x + self.outer(torch.relu(self.inner(x)))
        return self.linear(torch.flatten(self.average(self.pool(torch.relu(x))), 1))


def residual_model() -> nn.Module:
    torch.manual_seed(0)
    model = Residual()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    return model.eval()


def test_a_pytorch_residual_network_is_read_as_the_layers_it_computes(tmp_path):
    model = residual_model()
    imported = import_onnx(onnx_of(model, (3, 8, 8), tmp_path / "m.onnx"))
    kinds = [line.split()[0] for line in imported.text.splitlines() if not line.startswith("#")]
    # TorchScript's exporter folds the test-time BatchNorm into the convolution before it.
    block = ["ParNet1", "Conv2D", "ReLU", "Conv2D", "ParNet2", "ParSum"]
    assert kinds == ["Normalize", "Conv2D", "ReLU", *block, "ReLU", "MaxPool2D", "AvgPool2D", "Linear"]
    lines = imported.text.splitlines()
    assert lines[1] == ("Normalize mean=[0.4000000059604645, 0.5, 0.6000000238418579] "
                        "std=[0.20000000298023224, 0.25, 0.5] input_shape=[8, 8, 3]")  # fmt: skip
    assert lines[-1] == "Linear out=10 bias=False"
    assert imported.network.input_shape == (3, 8, 8) and imported.network.output_shape == (10,)
    x = torch.rand(16, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(imported.model(x), model(x), atol=1e-5)


def test_batch_norm_an_exporter_keeps_is_imported_as_batch_norm(tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(12, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3)
    ).eval()
    with torch.no_grad():
        model[2].running_mean.uniform_(-1, 1)
        model[2].running_var.uniform_(0.5, 2.0)
    path = tmp_path / "bn.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Training-mode export keeps BatchNormalization as a node (eval mode folds it into the Gemm).
        torch.onnx.export(model, (torch.rand(2, 12),), str(path), dynamo=False,
                          training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)  # fmt: skip
    imported = import_onnx(path)
    assert "BatchNorm eps=" in imported.text
    x = torch.rand(9, 12)
    with torch.no_grad():
        assert torch.allclose(imported.model.eval()(x), model(x), atol=1e-5)


def test_a_matmul_and_its_bias_are_one_linear_layer(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(torch.arange(12.0).reshape(4, 3).numpy(), "w")
    bias = numpy_helper.from_array(torch.tensor([1.0, -1.0, 0.5]).numpy(), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Add", ["h", "b"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [weight, bias],
    )
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    imported = import_onnx(path)
    assert imported.text.splitlines()[1:] == ["Linear out=3 input_shape=[4]"]
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    expected = x @ torch.arange(12.0).reshape(4, 3) + torch.tensor([1.0, -1.0, 0.5])
    assert torch.equal(imported.model(x).detach(), expected)


def test_daic_import_writes_a_network_that_checks_shows_and_keeps_its_weights(tmp_path):
    source = onnx_of(residual_model(), (3, 8, 8), tmp_path / "model.onnx")
    runner = CliRunner()
    result = runner.invoke(main, ["import", str(source)])
    assert result.exit_code == 0, result.output
    net, checkpoint = tmp_path / "model.net", tmp_path / "model.pt"
    assert (
        f"wrote {net} (13 lines) and its weights, {checkpoint}; onnxruntime matches it within"
        in result.stdout
    )
    assert runner.invoke(main, ["check", str(net)]).exit_code == 0
    assert runner.invoke(main, ["fmt", "--check", str(net)]).exit_code == 0
    shown = runner.invoke(main, ["show", str(net)])
    assert shown.exit_code == 0 and "Total" in shown.stdout
    again = runner.invoke(main, ["import", str(source)])
    assert again.exit_code == 2
    assert f"daic: {net} and {checkpoint} already exist: pass --force to replace them" in again.stderr
    assert runner.invoke(main, ["import", str(source), "--force"]).exit_code == 0


def test_an_operator_daic_has_no_layer_for_is_named_and_nothing_is_written(tmp_path):
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.Softplus(), nn.Linear(3, 2))
    source = onnx_of(model, (4,), tmp_path / "sig.onnx")
    result = CliRunner().invoke(main, ["import", str(source)])
    assert result.exit_code == 2
    assert "node '/2/Softplus': daic has no layer for the ONNX operator Softplus (it reads" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sig.onnx"]


def test_a_file_that_is_no_onnx_model_is_a_message(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("not a model")
    result = CliRunner().invoke(main, ["import", str(bad)])
    assert result.exit_code == 2 and result.stderr.startswith(
        f"daic: {bad} is not an ONNX model onnx can read"
    )
    missing = CliRunner().invoke(main, ["import", str(tmp_path / "none.onnx")])
    assert missing.exit_code == 2 and "none.onnx does not exist" in missing.stderr


def test_daics_export_imports_to_the_same_network_and_the_same_verdicts(weights, tmp_path):  # noqa: F811
    model, _state, _data, network = load_trained(str(NET), str(weights), None)
    export_onnx(model, network.input_shape, tmp_path / "exported.onnx")
    runner = CliRunner()
    assert runner.invoke(main, ["import", str(tmp_path / "exported.onnx")]).exit_code == 0
    original = [line.split()[0] for line in NET.read_text().splitlines() if line and not line.startswith("#")]
    concrete = [kind for kind in original if kind not in ("CorrelateAll", "CorrMaxK", "Concretize")]
    written = (tmp_path / "exported.net").read_text().splitlines()[1:]
    assert [line.split()[0] for line in written] == concrete
    records = []
    for net, checkpoint in ((NET, weights), (tmp_path / "exported.net", tmp_path / "exported.pt")):
        out = tmp_path / f"{Path(net).stem}.jsonl"
        command = ["verify", str(net), "--weights", str(checkpoint), "--dataset", "Digits", "--eps", "0.05",
                   "--limit", "60", "--domain", "box", "--domain", "crown", "--out", str(out)]  # fmt: skip
        result = runner.invoke(main, command)
        assert result.exit_code == 0, result.output
        records.append(
            [(r["index"], r["status"], r["domain"]) for r in map(json.loads, out.read_text().splitlines())]
        )
    assert records[0] == records[1]
    assert {status for _, status, _ in records[0]} >= {"verified", "falsified"}


def test_a_scheme_fine_tunes_an_imported_network_from_its_weights(tmp_path):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10))
    onnx_of(model, (1, 8, 8), tmp_path / "digits.onnx")
    assert CliRunner().invoke(main, ["import", str(tmp_path / "digits.onnx")]).exit_code == 0
    scheme = tmp_path / "tune.dai"
    fields = 'net = "digits.net" weights = "digits.pt" data = Digits epsilon = 0.05 goal = Box epochs = 1'
    scheme.write_text(f"scheme FineTune {{ {fields} test = [Accuracy] }}\n")
    _scheme, start = lowered(plan_run(str(scheme), None, None))
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        assert torch.allclose(start(x), model(x), atol=1e-5)
    result = CliRunner().invoke(main, ["run", str(scheme), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    scheme.write_text(scheme.read_text().replace("digits.pt", "gone.pt"))
    result = CliRunner().invoke(main, ["run", str(scheme), "--out", str(tmp_path / "run2")])
    assert result.exit_code == 2
    assert f"scheme FineTune: `weights`: no checkpoint {tmp_path / 'gone.pt'}" in result.stderr
    assert not (tmp_path / "run2").exists()


def test_lowering_the_import_gives_the_module_it_loaded(tmp_path):
    imported = import_onnx(onnx_of(residual_model(), (3, 8, 8), tmp_path / "m.onnx"))
    fresh = lower_network(imported.network)
    fresh.load_state_dict(imported.model.state_dict())
    x = torch.rand(3, 3, 8, 8)
    with torch.no_grad():
        assert torch.equal(fresh.eval()(x), imported.model(x))


@pytest.mark.parametrize("change", ["group", "dilation"])
def test_a_convolution_daic_cannot_compute_is_refused_with_the_reason(tmp_path, change):
    conv = nn.Conv2d(2, 2, 3, groups=2) if change == "group" else nn.Conv2d(2, 2, 3, dilation=2)
    source = onnx_of(nn.Sequential(conv, nn.Flatten()), (2, 6, 6), tmp_path / "c.onnx")
    result = CliRunner().invoke(main, ["import", str(source)])
    assert result.exit_code == 2
    why = "group 2: daic's Conv2D is a dense convolution" if change == "group" else "dilations [2, 2]"
    assert "node '/0/Conv' (Conv): " in result.stderr and why in result.stderr


def test_an_input_the_network_flattens_first_is_a_vector_and_a_zero_mean_no_layer(tmp_path):
    """mnistfc's input is (1, 784, 1), flattened at once; ACAS Xu subtracts a mean of zeros."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(torch.ones(2, 6).numpy(), "w")
    zeros = numpy_helper.from_array(torch.zeros(1, 6, 1).numpy(), "mean")
    nodes = [
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Flatten", ["centred"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [weight, zeros],
    )
    path = tmp_path / "flat.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    result = CliRunner().invoke(main, ["import", str(path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "flat.net").read_text().splitlines()[1:] == ["Linear out=2 bias=False input_shape=[6]"]


class Dense(nn.Module):
    """DenseNet's pattern: the input joined along the channels with what a branch computes from it."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.grow = nn.Conv2d(4, 3, 3, padding=1)
        self.head = nn.Linear(7 * 6 * 6, 5)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.cat([x, torch.relu(self.grow(x))], 1)
        return self.head(torch.flatten(x, 1))


@pytest.mark.parametrize("flip", [False, True])
def test_a_concat_of_a_fork_is_a_skip_block_with_its_branches_in_order(tmp_path, flip):
    torch.manual_seed(2)
    model = Dense().eval()
    if flip:  # the computed branch first: SkipNet1 holds it, the identity is SkipNet2

        def flipped(x):
            stem = torch.relu(model.stem(x))
            return model.head(torch.flatten(torch.cat([torch.relu(model.grow(stem)), stem], 1), 1))

        model.forward = flipped
    imported = import_onnx(onnx_of(model, (1, 6, 6), tmp_path / "dense.onnx"))
    kinds = [line.split()[0] for line in imported.text.splitlines()[1:]]
    grown = ["Conv2D", "ReLU"]
    branches = [*grown, "SkipNet2"] if flip else ["SkipNet2", *grown]
    assert kinds == ["Conv2D", "ReLU", "SkipNet1", *branches, "SkipCat", "Linear"]
    x = torch.rand(5, 1, 6, 6)
    with torch.no_grad():
        assert torch.allclose(imported.model(x), model(x), atol=1e-5)


class KerasStyle(nn.Module):
    """An NHWC input (Keras's layout) transposed to NCHW, a zero Pad before a convolution, and a vector
    regrouped into an image inside the network's input run."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d(1)
        self.conv = nn.Conv2d(2, 3, 3)
        self.linear = nn.Linear(3 * 4 * 4, 4)

    def forward(self, x):
        x = self.conv(self.pad(x.permute(0, 3, 1, 2)))
        return self.linear(torch.flatten(torch.relu(x), 1))


class Regrouped(nn.Module):
    """A vector input regrouped into an image (its target computed from the input's shape)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.linear = nn.Linear(3 * 4 * 4, 4)

    def forward(self, x):
        x = self.conv(x.reshape(x.shape[0], 2, 4, 4))
        return self.linear(torch.flatten(torch.relu(x), 1))


FIRST = "Conv2D filters=3 kernel_size=[3, 3] stride=[1, 1] padding=1 input_shape=[4, 4, 2]"
"""The first layer both networks import to: the image (2, 4, 4), the Pad taken into the padding."""


@pytest.mark.parametrize(("model", "shape"), [(KerasStyle(), (4, 4, 2)), (Regrouped(), (32,))])
def test_an_input_transposed_or_regrouped_first_and_a_zero_pad_import_as_the_network_they_compute(
    tmp_path, model, shape
):
    from daic.compiler.exchange.imported import compare_with_onnxruntime

    torch.manual_seed(0)
    source = onnx_of(model, shape, tmp_path / "m.onnx")
    imported = import_onnx(source)
    assert imported.network.input_shape == (2, 4, 4)
    assert next(line for line in imported.text.splitlines() if not line.startswith("#")) == FIRST
    assert (imported.source_network.layout is None) == isinstance(
        model, Regrouped
    )  # a reshape keeps the order
    assert 0 <= compare_with_onnxruntime(imported, source) < 1e-5


def test_a_keras_style_network_answers_properties_in_its_own_input_order(tmp_path):
    import numpy as np

    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    torch.manual_seed(0)
    source = onnx_of(KerasStyle(), (4, 4, 2), tmp_path / "k.onnx")
    # Only X_1 (NHWC: row 0, column 0, channel 1) moves; a counterexample makes y_0 at least y_1 + gap.
    lines = [f"(declare-const X_{i} Real)" for i in range(32)] + [
        f"(declare-const Y_{j} Real)" for j in range(4)
    ]
    for i in range(32):
        low, high = ("-3.0", "3.0") if i == 1 else ("0.5", "0.5")
        lines += [f"(assert (>= X_{i} {low}))", f"(assert (<= X_{i} {high}))"]
    session = onnxruntime_session(source)
    ends = []
    for end in (-3.0, 3.0):
        x = np.full((1, 4, 4, 2), 0.5, dtype=np.float32)
        x[0, 0, 0, 1] = end
        ends.append(session.run(None, {"x": x})[0][0])
    gap = max(float(y[0] - y[1]) for y in ends) - 1e-3  # reached at an end of X_1's interval
    (tmp_path / "k.vnnlib").write_text("\n".join([*lines, f"(assert (>= (- Y_0 Y_1) {gap!r}))"]) + "\n")
    result = CliRunner().invoke(main, ["verify", str(source), "--vnnlib", str(tmp_path / "k.vnnlib")])
    assert result.exit_code == 0 and result.stdout.startswith("sat"), result.output
    (row,) = [json.loads(line) for line in (tmp_path / "k.verify.jsonl").read_text().splitlines()]
    x = np.array(row["witness"]["X"], dtype=np.float32)
    assert np.all(np.delete(x, 1) == 0.5) and -3.0 <= x[1] <= 3.0
    (y,) = session.run(None, {"x": x.reshape(1, 4, 4, 2)})[0]
    assert float(y[0]) - float(y[1]) >= gap and y.tolist() == pytest.approx(row["witness"]["Y"], abs=0)


def test_a_pad_only_max_pooling_reads_and_a_graph_of_two_inputs_are_refused_by_name(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    padded = onnx_of(
        nn.Sequential(nn.ZeroPad2d(1), nn.MaxPool2d(2), nn.Flatten()), (1, 4, 4), tmp_path / "p.onnx"
    )
    result = CliRunner().invoke(main, ["import", str(padded)])
    assert (
        result.exit_code == 2
        and "(Pad): daic pads only as a convolution or an average pooling does" in result.stderr
    )
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2]) for n in "aby"]
    graph = helper.make_graph(nodes, "two", values[:2], values[2:])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "two.onnx")
    )
    result = CliRunner().invoke(main, ["import", str(tmp_path / "two.onnx")])
    assert result.exit_code == 2 and "the graph has 2 inputs and 1 outputs ('a', 'b', 'y')" in result.stderr


def test_a_vector_input_without_a_batch_axis_is_read_as_the_vector_it_is(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from daic.compiler.exchange.imported import compare_with_onnxruntime

    generator = torch.Generator().manual_seed(0)
    arrays = [numpy_helper.from_array(torch.randn(*s, generator=generator).numpy(), n)
              for n, s in (("w", (6, 4)), ("b", (4,)), ("v", (4, 2)))]  # fmt: skip
    steps = [
        ("MatMul", ["x", "w"], "h"),
        ("Add", ["h", "b"], "a"),
        ("Relu", ["a"], "r"),
        ("MatMul", ["r", "v"], "y"),
    ]
    nodes = [helper.make_node(op, inputs, [out]) for op, inputs, out in steps]
    ends = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [k]) for n, k in (("x", 6), ("y", 2))]
    graph = helper.make_graph(nodes, "flat", ends[:1], ends[1:], arrays)
    path = tmp_path / "flat.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    imported = import_onnx(path)
    assert imported.network.input_shape == (6,)
    assert imported.text.splitlines()[1:] == [
        "Linear out=4 input_shape=[6]",
        "ReLU",
        "Linear out=2 bias=False",
    ]
    assert 0 <= compare_with_onnxruntime(imported, path) < 1e-5


def test_a_one_channel_network_exports_as_its_layers_and_imports_back(tmp_path):
    # CPU training runs one-channel maps channels-last through a strided view; traced for export, that view
    # became an `as_strided` Gather in the graph, which daic's import (and other verifiers) refused.
    from daic.compiler.checking.network import analyze_net
    from daic.dsl.parser import parse_net
    from tests.paths import EXAMPLES

    network = analyze_net(parse_net((EXAMPLES / "digits_conv.net").read_text()).tree)
    export_onnx(lower_network(network), network.input_shape, tmp_path / "digits.onnx")
    imported = import_onnx(tmp_path / "digits.onnx")
    kinds = [line.split()[0] for line in imported.text.splitlines() if not line.startswith("#")]
    assert kinds == ["Conv2D", "ReLU", "Conv2D", "ReLU", "Linear", "ReLU", "Linear"]


class Inner(nn.Module):
    """Regroupings inside the network: a vector into an image, rows and columns swapped, and an NHWC
    flattening (Keras's order) before the last linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(5, 32)
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.last = nn.Linear(48, 4)

    def forward(self, x):
        x = torch.relu(self.first(x)).reshape(-1, 2, 4, 4)
        x = torch.relu(self.conv(x)).transpose(2, 3)
        return self.last(x.permute(0, 2, 3, 1).reshape(-1, 48))


def test_regroupings_inside_a_network_import_as_regroup_layers_that_compute_and_certify_the_same(tmp_path):
    from daic.compiler.exchange.imported import compare_with_onnxruntime
    from daic.runtime.certification.verification import CROWNBound

    torch.manual_seed(1)
    model = Inner().eval()
    source = onnx_of(model, (5,), tmp_path / "inner.onnx")
    imported = import_onnx(source)
    layers = [line for line in imported.text.splitlines() if not line.startswith("#")]
    assert layers == [
        "Linear out=32 input_shape=[5]",
        "ReLU",
        "Regroup shape=[4, 4, 2]",
        "Conv2D filters=3 kernel_size=[3, 3] stride=[1, 1] padding=1",
        "ReLU",
        "Regroup shape=[4, 3, 4] axes=[2, 1, 0]",
        "Linear out=4",
    ]  # the exporter writes the two transpositions as one
    assert 0 <= compare_with_onnxruntime(imported, source) < 1e-5
    ours = imported.model.double()
    lower, upper = torch.full((2, 5), -0.2, dtype=torch.float64), torch.full((2, 5), 0.3, dtype=torch.float64)
    lower[1] += 0.1
    with torch.no_grad():
        bounds = CROWNBound().margins(ours, lower, upper, torch.tensor([0, 1]), "hybrid")
        points = lower + (upper - lower) * torch.rand(256, 2, 5, dtype=torch.float64)
        logits = model.double()(points.reshape(-1, 5)).reshape(256, 2, 4)
    for b, t in enumerate((0, 1)):
        others = [j for j in range(4) if j != t]
        sampled = (logits[:, b, t : t + 1] - logits[:, b, others]).amin(0)
        assert bool((bounds[b] <= sampled + 1e-9).all())
