"""BatchNorm in the language: counted by `daic show`, trained with a scheme's statistics settings, certified
by every domain with its running statistics, and folded into the layer before it for export."""

from __future__ import annotations

import json

import pytest
import torch

from tests.compiler.commands.test_run import Quiet, run_plan
from tests.compiler.commands.test_run_checkpoints import daic

torch.set_num_threads(1)

NET = """Conv2D filters=4 kernel_size=3 input_shape=[8, 8, 1] padding=1
BatchNorm
ReLU
Conv2D filters=8 kernel_size=3 stride=2 padding=1
BatchNorm momentum=0.2
ReLU
Linear out=32
BatchNorm
ReLU
CorrelateAll only_train=False
Linear out=10
"""

SCHEME = """scheme Norm {
    net = "norm.net"
    data = Digits(subset=1000)
    epsilon = 0.05
    goal = Mix(Point, Box, 0.3)
    epochs = 4
    batch = 50
    optimizer = Adam(lr=0.01)
    bn_stats = "%s"
    precise_bn = %s
    test = [Accuracy, Verify(Box), Verify(CROWN)]
}
"""


def test_show_counts_a_scale_and_a_shift_per_channel(tmp_path):
    (tmp_path / "norm.net").write_text(NET)
    result = daic("show", tmp_path / "norm.net")
    assert result.exit_code == 0, result.output
    # convs 40 + 296, linears 4,128 + 330; BatchNorm 2 x (4 + 8 + 32) = 88
    assert "4,882" in result.output.splitlines()[-2]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("norm")
    (folder / "norm.net").write_text(NET)
    (folder / "norm.dai").write_text(SCHEME % ("centres", "True"))
    return folder, run_plan(folder / "norm.dai", folder / "run", Quiet())


def test_a_network_with_batch_norm_trains_and_certifies(trained):
    _folder, summary = trained
    assert summary["Acc"] > 60, summary
    assert 0 <= summary["Ver Box"] <= summary["Ver CROWN"] <= summary["Acc"]


def test_verify_certifies_with_the_running_statistics(trained):
    folder, summary = trained
    record = folder / "verify.jsonl"
    result = daic(
        "verify", folder / "norm.net", "--weights", folder / "run" / "checkpoint.pt", "--domain", "Box",
        "--eps", "0.05", "--no-attack", "--limit", "200", "--out", record, "--threads", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    verified = sum(r["status"] == "verified" for r in rows)
    assert len(rows) == 200 and abs(100 * verified / 200 - summary["Ver Box"]) < 1e-9


def test_export_folds_batch_norm_into_the_layer_before(trained, tmp_path):
    import onnx

    folder, _ = trained
    target = tmp_path / "norm.onnx"
    result = daic(
        "export", folder / "norm.net", "--weights", folder / "run" / "checkpoint.pt", "--onnx", target
    )
    assert result.exit_code == 0, result.output
    assert "onnxruntime matches PyTorch" in result.output
    difference = float(result.output.split("within ")[1].split(")")[0])
    assert difference < 1e-4
    kinds = {node.op_type for node in onnx.load(str(target)).graph.node}
    assert not kinds & {"BatchNormalization", "Sqrt", "Div"}, kinds
