"""The ONNX that `daic export` writes, for each family of the standard library's networks: onnxruntime
computes what PyTorch does, and a Normalize layer is a 1x1 convolution of weight diag(1 / std) and bias
-mean / std, with no constant Sub or Div left (alpha-beta-CROWN's default "patches" mode fails on every
shape of such a constant tried, and reads a convolution)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from daic.compiler.checking.values import Built
from daic.compiler.constructors import REGISTRY
from daic.compiler.jobs.run.plan import load_network
from daic.compiler.jobs.weights import export_onnx
from daic.compiler.lower import lower_network

NETS = Path(str(resources.files("daic.stdlib"))) / "nets"
FAMILIES = {
    "mnist_convsmall.net": "MNIST",
    "mnist_convbig.net": "MNIST",
    "mnist_cnn7.net": "MNIST",  # BatchNorm, folded
    "cifar10_convmed.net": "CIFAR10",
    "digits_resnet.net": "Digits",  # residual blocks
}


@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_exports_to_what_onnxruntime_and_the_verifiers_read(name, tmp_path):
    _, network = load_network(str(NETS / name), Built(REGISTRY.dataset(FAMILIES[name]), {}))
    model = lower_network(network).eval()
    target = tmp_path / "m.onnx"
    difference = export_onnx(model, network.input_shape, target)
    assert 0 <= difference < 1e-4 and [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # weights inside
    graph = onnx.load(str(target)).graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    assert not [n.op_type for n in graph.node if n.op_type in ("Sub", "Div")]
    first = _reading_the_input(graph)
    assert first.op_type == "Conv"
    weight, bias = constants[first.input[1]], constants[first.input[2]]
    channels = network.input_shape[0]
    assert weight.shape == (channels, channels, 1, 1) and bias.shape == (channels,)
    normalize = next(m for m in model.modules() if type(m).__name__ == "Normalize")
    std, mean = normalize.std.numpy(), normalize.mean.numpy()
    assert np.allclose(weight.reshape(channels, channels), np.diag(1 / std), rtol=1e-6)
    assert np.allclose(bias, -mean / std, rtol=1e-6)


def test_a_normalize_on_vectors_exports_as_a_diagonal_linear_layer(tmp_path):
    import torch

    from daic.runtime import Linear, Sequential
    from daic.runtime.layers.affine import Normalize

    torch.manual_seed(0)
    model = Sequential(Normalize([0.5, -1.0, 2.0], [0.25, 2.0, 4.0]), Linear(3, 2)).eval()
    target = tmp_path / "v.onnx"
    assert 0 <= export_onnx(model, (3,), target) < 1e-5
    graph = onnx.load(str(target)).graph
    assert _reading_the_input(graph).op_type in ("Gemm", "MatMul")
    assert not [n.op_type for n in graph.node if n.op_type in ("Sub", "Div")]


def _reading_the_input(graph):
    """The node that computes with the network's input: exporters order nodes differently, and an older
    torch's also reads the input's Shape (for a later flattening)."""
    return next(n for n in graph.node if graph.input[0].name in n.input and n.op_type != "Shape")
