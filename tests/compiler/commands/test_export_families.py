"""The ONNX that `daic export` writes, for each family of the standard library's networks: onnxruntime
computes what PyTorch does, and a Normalize layer subtracts and divides by constants of its input's whole
shape (alpha-beta-CROWN's default "patches" mode fails on a per-channel constant broadcast against a
convolution's patches)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from daic.compiler.checking.elaborate import Built
from daic.compiler.commands.run.plan import load_network
from daic.compiler.commands.weights import export_onnx
from daic.compiler.constructors import REGISTRY
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
    assert 0 <= difference < 1e-4
    graph = onnx.load(str(target)).graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    constants |= {  # a Constant node's tensor (other exporters write small ones as `value_ints` and such)
        n.output[0]: numpy_helper.to_array(a.t)
        for n in graph.node
        if n.op_type == "Constant"
        for a in n.attribute
        if a.name == "value"
    }
    normalizing = [n for n in graph.node if n.op_type in ("Sub", "Div") and n.input[1] in constants]
    assert normalizing, "the family's networks normalise their input"
    for node in normalizing:
        shape = constants[node.input[1]].shape
        assert shape == (1, *network.input_shape), (node.op_type, shape)
        assert np.all(np.isfinite(constants[node.input[1]]))
