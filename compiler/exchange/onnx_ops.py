"""The ONNX operators `daic import` reads, each as the layer of daic's language it is (see `onnx_in`).

A converter appends the layer of one node, which reads the data value `value`, to `items`, after checking
that the node's attributes are ones the layer computes; a node it cannot express is an `ImportFailure`
that names the node and what to change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from daic.compiler.exchange.onnx_nodes import (
    ImportedLayer,
    ImportFailure,
    Item,
    node_name,
    reshape_target,
    transpose_axes,
)


def _attributes(node) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _refuse(node, why: str) -> ImportFailure:
    return ImportFailure(f"node {node_name(node)} ({node.op_type}): {why}")


def _pair_or_one(values: list[int]) -> int | list[int]:
    return values[0] if len(set(values)) == 1 else list(values)


def _window(node, attrs: dict[str, Any]) -> dict[str, Any]:
    """A 2D window's kernel, stride and symmetric padding, as daic's layers take them."""
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    if len(kernel) != 2:
        raise _refuse(node, f"a window of {len(kernel)} dimensions: daic's layers are 2D")
    if any(d != 1 for d in attrs.get("dilations", [1, 1])):
        raise _refuse(node, f"dilations {list(attrs['dilations'])}: daic's layers have none")
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto not in ("NOTSET", "VALID"):
        raise _refuse(node, f"auto_pad {auto}: write explicit pads")
    pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
    if pads[:2] != pads[2:]:
        raise _refuse(node, f"pads {pads} differ at the two ends: daic pads each side alike")
    if int(attrs.get("ceil_mode", 0)):
        raise _refuse(node, "ceil_mode 1: daic's pooling rounds its output size down")
    strides = [int(s) for s in attrs.get("strides", [1, 1])]
    return {"kernel_size": kernel, "stride": strides, "padding": _pair_or_one(pads[:2])}


def conv(graph, node, value: str, items: list[Item]) -> None:
    attrs = _attributes(node)
    if int(attrs.get("group", 1)) != 1:
        raise _refuse(node, f"group {attrs['group']}: daic's Conv2D is a dense convolution")
    weight = graph.constant(node.input[1], node)
    if weight.ndim != 4:
        raise _refuse(node, f"a weight of shape {list(weight.shape)}: daic's Conv2D is 2D")
    attrs.setdefault("kernel_shape", list(weight.shape[2:]))
    window = _window(node, attrs)
    tensors = {"weight": weight}
    if len(node.input) > 2 and node.input[2]:
        tensors["bias"] = graph.constant(node.input[2], node)
    params = {"filters": int(weight.shape[0]), "kernel_size": window["kernel_size"]}
    params |= {"stride": window["stride"], "padding": window["padding"]}
    pointwise = weight.shape[2:] == (1, 1) and window["stride"] == [1, 1] and not np.any(window["padding"])
    first = pointwise and not items  # a pointwise first layer may be a Normalize
    normalize = _as_normalize(weight[:, :, 0, 0], tensors.get("bias"), node) if first else None
    if normalize is not None:
        items.append(normalize)  # the form `daic export` writes a Normalize in
        return
    params["padding"] = _with_pad(items, params["padding"])
    if "bias" not in tensors:
        params["bias"] = False
    items.append(ImportedLayer("Conv2D", params, tensors, node_name(node)))


def _with_pad(items: list[Item], padding: int | list[int]) -> int | list[int]:
    """`padding` and that of the Pad before the layer (`pad`), which the layer takes over."""
    if not (items and isinstance(items[-1], ImportedLayer) and items[-1].kind == "Pad"):
        return padding
    extra = items.pop().params["padding"]
    own = [padding, padding] if isinstance(padding, int) else list(padding)
    return _pair_or_one([own[0] + extra[0], own[1] + extra[1]])


def pad(graph, node, value: str, items: list[Item]) -> None:
    """A constant zero padding of an image's height and width, the same on both sides of each: kept for
    the convolution or average pooling that reads it, which pads so itself (`_with_pad`)."""
    attrs = _attributes(node)
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    pads = attrs.get("pads")
    if len(node.input) > 1 and node.input[1]:
        pads = graph.constant(node.input[1], node)
    fill = attrs.get("value", 0.0)
    if len(node.input) > 2 and node.input[2]:
        fill = float(graph.constant(node.input[2], node).reshape(-1)[0])
    if len(node.input) > 3 and node.input[3]:
        raise _refuse(node, "axes given: write the pads of every axis")
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    rank = len(pads) // 2
    begin, end = pads[:rank], pads[rank:]
    if mode != "constant" or float(fill) != 0.0:
        raise _refuse(node, f"mode {mode} with value {fill}: daic pads with zeros")
    if rank != 4 or begin[:2] != [0, 0] or end[:2] != [0, 0] or begin != end:
        raise _refuse(node, f"pads {pads}: daic pads an image's height and width, the same on both sides")
    items.append(ImportedLayer("Pad", {"padding": begin[2:]}, {}, node_name(node)))


def _as_normalize(weight: np.ndarray, bias: np.ndarray | None, node) -> ImportedLayer | None:
    """A first layer of weight ``diag(1 / std)`` (std positive) and bias ``-mean / std`` as the Normalize
    it computes; None for any other weight."""
    w = weight.astype(np.float64)
    scale = np.diag(w) if w.ndim == 2 and w.shape[0] == w.shape[1] else None
    if scale is None or np.any(w != np.diag(scale)) or np.any(scale <= 0):
        return None
    shift = np.zeros_like(scale) if bias is None else bias.astype(np.float64).reshape(-1)
    return ImportedLayer("Normalize", {"mean": -shift / scale, "std": 1 / scale}, {}, node_name(node))


def gemm(graph, node, value: str, items: list[Item]) -> None:
    attrs = _attributes(node)
    if int(attrs.get("transA", 0)):
        raise _refuse(node, "transA 1: the data must be the left operand as it is")
    b = graph.constant(node.input[1], node).astype(np.float64)
    weight = (b if int(attrs.get("transB", 0)) else b.T) * float(attrs.get("alpha", 1.0))
    tensors = {"weight": weight}
    if len(node.input) > 2 and node.input[2]:
        c = graph.constant(node.input[2], node).astype(np.float64) * float(attrs.get("beta", 1.0))
        tensors["bias"] = _bias(node, c, weight.shape[0])
    _linear(graph, node, value, tensors, items)


def matmul(graph, node, value: str, items: list[Item]) -> None:
    if node.input[0] != value:
        raise _refuse(node, "the data is its right operand (W x, a column): daic reads x W, data on the left")
    w = graph.constant(node.input[1], node)
    if w.ndim != 2:
        raise _refuse(node, "daic reads a MatMul of the data by a constant matrix (a linear layer)")
    _linear(graph, node, value, {"weight": w.T}, items)


def _linear(graph, node, value: str, tensors: dict[str, np.ndarray], items: list[Item]) -> None:
    shape = graph.shape(value)
    if shape is not None and len(shape) != 1:
        raise _refuse(
            node, f"its input has shape {list(shape)}: daic's Linear reads a vector (flatten first)"
        )
    normalize = None if items else _as_normalize(tensors["weight"], tensors.get("bias"), node)
    if normalize is not None:
        items.append(normalize)  # the form `daic export` writes a Normalize on vectors in
        return
    params: dict[str, Any] = {"out": int(tensors["weight"].shape[0])}
    if "bias" not in tensors:
        params["bias"] = False
    if items and isinstance(items[-1], ImportedLayer) and items[-1].kind == "Flatten":
        items.pop()  # daic's Linear flattens its input itself, as the listings write it
    items.append(ImportedLayer("Linear", params, tensors, node_name(node)))


def _bias(node, c: np.ndarray, out: int) -> np.ndarray:
    try:
        return np.broadcast_to(c, (1, out))[0].copy()
    except ValueError:
        raise _refuse(node, f"a bias of shape {list(c.shape)} for {out} outputs") from None


def activation(graph, node, value: str, items: list[Item]) -> None:
    """An activation of daic's family, by the operator's name (`ACTIVATIONS`)."""
    items.append(ImportedLayer(ACTIVATIONS[node.op_type], {}, {}, node_name(node)))


ACTIVATIONS = {"Relu": "ReLU", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Abs": "Abs"}
"""The ONNX operators that are an activation of daic's as they are (no attribute)."""


def leaky_relu(graph, node, value: str, items: list[Item]) -> None:
    slope = float(_attributes(node).get("alpha", 0.01))
    if not 0 <= slope < 1:
        raise _refuse(node, f"alpha {slope:g}: daic's LeakyReLU has a slope in [0, 1) below zero")
    items.append(ImportedLayer("LeakyReLU", {"negative_slope": slope}, {}, node_name(node)))


def clip(graph, node, value: str, items: list[Item]) -> None:
    """Clip to [-1, 1] (what `torch.onnx.export` writes for a Hardtanh) is HardTanh; to [0, inf), ReLU."""
    attrs = _attributes(node)
    ends = [attrs.get("min"), attrs.get("max")]  # before opset 11, attributes; since, optional inputs
    for k, name in enumerate(node.input[1:3]):
        if name:
            ends[k] = float(graph.constant(name, node).reshape(()))
    low, high = (None if end is None else float(end) for end in ends)
    if (low, high) == (-1.0, 1.0):
        items.append(ImportedLayer("HardTanh", {}, {}, node_name(node)))
    elif low == 0.0 and high is None:
        items.append(ImportedLayer("ReLU", {}, {}, node_name(node)))
    else:
        raise _refuse(node, f"min {low} and max {high}: daic clips to [-1, 1] (HardTanh) or [0, inf) (ReLU)")


def batch_norm(graph, node, value: str, items: list[Item]) -> None:
    attrs = _attributes(node)
    if int(attrs.get("training_mode", 0)):
        raise _refuse(node, "training_mode 1: daic imports a network for test time")
    names = ("weight", "bias", "running_mean", "running_var")
    tensors = {name: graph.constant(i, node) for name, i in zip(names, node.input[1:5], strict=True)}
    items.append(
        ImportedLayer("BatchNorm", {"eps": float(attrs.get("epsilon", 1e-5))}, tensors, node_name(node))
    )


def max_pool(graph, node, value: str, items: list[Item]) -> None:
    if len(node.output) > 1 and node.output[1]:
        raise _refuse(node, "its indices are used: daic's MaxPool2D gives only the maxima")
    items.append(ImportedLayer("MaxPool2D", _window(node, _attributes(node)), {}, node_name(node)))


def average_pool(graph, node, value: str, items: list[Item]) -> None:
    attrs = _attributes(node)
    window = _window(node, attrs)
    if window["padding"] != 0 and not int(attrs.get("count_include_pad", 0)):
        raise _refuse(node, "count_include_pad 0 with padding: daic's AvgPool2D counts the zero padding")
    window["padding"] = _with_pad(items, window["padding"])  # a Pad's zeros count in the average too
    items.append(ImportedLayer("AvgPool2D", window, {}, node_name(node)))


def global_average_pool(graph, node, value: str, items: list[Item]) -> None:
    shape = graph.shape(value)
    if shape is None or len(shape) != 3:
        raise _refuse(node, f"its input's shape is {shape}: daic pools (C, H, W) images")
    items.append(ImportedLayer("AvgPool2D", {"kernel_size": [shape[1], shape[2]]}, {}, node_name(node)))


def flatten(graph, node, value: str, items: list[Item]) -> None:
    if int(_attributes(node).get("axis", 1)) != 1:
        raise _refuse(node, "an axis other than 1: daic flattens every dimension but the batch")
    _flatten_unless_flat(graph, value, node, items)


def _flatten_unless_flat(graph, value: str, node, items: list[Item]) -> None:
    shape = graph.shape(value)
    if value == graph.start and len(graph.input_shape) == 1:
        return  # an input of another rank, read as the vector it is
    if shape is None or len(shape) > 1:
        items.append(ImportedLayer("Flatten", {}, {}, node_name(node)))


def reshape(graph, node, value: str, items: list[Item]) -> str | None:
    before = graph.shape(value)
    after = graph.shape(node.output[0]) or (None if before is None else reshape_target(graph, node, before))
    if before is None or after is None:
        raise _refuse(node, "its shapes are unknown to onnx's shape inference: export with fixed shapes")
    if after == before:
        return None
    if len(after) == 1 and after[0] == int(np.prod(before)):
        _flatten_unless_flat(graph, value, node, items)
        return None
    return regroup(graph, node, value, items)


def regroup(graph, node, value: str, items: list[Item]) -> str:
    """A run of Reshapes and Transposes from `node` to the first value that is an image or a vector, as
    one Regroup (the values read as `view`, its axes put in the order `axes`, read as the output); returns
    that value."""
    shape = graph.shape(value)
    order, view, axes, taken = np.arange(int(np.prod(shape))).reshape(shape), None, None, node
    while True:
        if taken.op_type == "Transpose":
            if axes is not None:
                raise _refuse(taken, "a second Transpose in one run of regroupings: daic reads one")
            view, axes = order.shape, tuple(transpose_axes(taken, order.ndim, graph.batched))
            order = order.transpose(axes)
        else:
            after = graph.shape(taken.output[0]) or reshape_target(graph, taken, order.shape)
            if after is None:
                raise _refuse(
                    taken, "its shapes are unknown to onnx's shape inference: export with fixed shapes"
                )
            order = order.reshape(after)
        if order.ndim in (1, 3):
            break
        following = graph.only_reader(taken.output[0])
        if following is None or following.op_type not in ("Reshape", "Transpose"):
            raise _refuse(taken, f"it leaves the values as {list(order.shape)}: daic's layers read an image "
                                 "(C, H, W) or a vector")  # fmt: skip
        taken = following
    view = tuple(view) if view is not None else tuple(shape)
    axes = tuple(int(a) for a in axes) if axes is not None else tuple(range(len(view)))
    if not np.array_equal(np.arange(order.size).reshape(view).transpose(axes).reshape(-1), order.reshape(-1)):
        raise _refuse(taken, "a run of regroupings that is no reshape, transpose and reshape")
    out = [order.shape[1], order.shape[2], order.shape[0]] if order.ndim == 3 else [order.size]
    params = {"shape": out, "view": list(view), "axes": list(axes)}
    if params["view"] == list(shape):
        del params["view"]
    if params["axes"] == sorted(axes):
        del params["axes"]
    items.append(ImportedLayer("Regroup", params, {}, node_name(node)))
    return taken.output[0]


def elementwise(graph, node, value: str, items: list[Item]) -> None:
    """x - c, x + c, x / c or x * c for a constant c of one value per channel (per feature of a vector):
    composed with the Normalize before it, if the previous layer is one, else a new one; the Add of a
    bias after a MatMul is that Linear's bias."""
    if node.input[0] != value:
        raise _refuse(node, "daic reads a constant on the right of the data (x - c, x / c)")
    c = graph.constant(node.input[1], node).astype(np.float64)
    last = items[-1] if items else None
    linear = isinstance(last, ImportedLayer) and last.kind == "Linear" and "bias" not in last.tensors
    if node.op_type == "Add" and linear:
        last.tensors["bias"] = _bias(node, c, last.params["out"])
        del last.params["bias"]
        return
    shape = graph.shape(value)
    if len(graph.input_shape) == 1 and shape is not None and len(shape) > 1:
        shape = (math.prod(shape),)  # a vector network's input before its flattening: per feature
        c = c.reshape(-1) if c.size == shape[0] else c
    per = _per_channel(node, c, shape)
    if not (isinstance(last, ImportedLayer) and last.kind == "Normalize"):
        last = ImportedLayer(
            "Normalize", {"mean": np.zeros_like(per), "std": np.ones_like(per)}, {}, node_name(node)
        )
        items.append(last)
    mean, std = last.params["mean"], last.params["std"]
    if node.op_type in ("Div", "Mul") and np.any(per <= 0):
        raise _refuse(node, "a constant that is not positive: daic's Normalize divides by a positive std")
    if node.op_type == "Sub":
        last.params["mean"] = mean + per * std
    elif node.op_type == "Add":
        last.params["mean"] = mean - per * std
    elif node.op_type == "Div":
        last.params["std"] = std * per
    else:
        last.params["std"] = std / per


def _per_channel(node, c: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
    if shape is None:
        raise _refuse(node, "its input's shape is unknown to onnx's shape inference")
    try:
        full = np.broadcast_to(c, (1, *shape))
    except ValueError:
        raise _refuse(node, f"a constant of shape {list(c.shape)} for data of shape {list(shape)}") from None
    channels = full.reshape(shape[0], -1)
    per = channels[:, 0]
    if not np.all(channels == per[:, None]):
        raise _refuse(node, "a constant that varies within a channel: daic's Normalize is per channel")
    return per.copy()


def skip(graph, node, value: str, items: list[Item]) -> None:
    """The identity at test time (Identity, Dropout)."""


CONVERTERS: dict[str, Callable[[Any, Any, str, list[Item]], str | None]] = {
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": matmul,
    **{op: activation for op in ACTIVATIONS},
    "LeakyRelu": leaky_relu,
    "Clip": clip,
    "BatchNormalization": batch_norm,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool,
    "Flatten": flatten,
    "Reshape": reshape,
    "Transpose": regroup,
    "Pad": pad,
    **{op: elementwise for op in ("Sub", "Div", "Mul", "Add")},
    **{op: skip for op in ("Identity", "Dropout")},
}
