"""Shape rules of the layers (shapes are (C, H, W) for images, (N,) for vectors). The layer declarations
attach them; shape inference, `daic show` and hover call them through the registry."""

from __future__ import annotations

import math
from collections.abc import Mapping

from daic.compiler.registry import Shape, ShapeError


def pair(value: object, name: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value  # type: ignore[return-value]
    if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], int):
        return value[0], value[0]
    raise ShapeError(f"`{name}` needs one or two integers", name)


def _image(shape: Shape, kind: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ShapeError("it needs an image (height, width, channels); flatten only with Linear or Flatten")
    return shape  # type: ignore[return-value]


def _window(shape: Shape, args: Mapping[str, object], kind: str, padding_name: str = "padding") -> Shape:
    channels, height, width = _image(shape, kind)
    kh, kw = pair(args["kernel_size"], "kernel_size")
    stride = args.get("stride")
    sh, sw = (kh, kw) if stride is None else pair(stride, "stride")
    ph, pw = pair(args.get(padding_name, 0), padding_name)
    if kh > height + 2 * ph or kw > width + 2 * pw:
        raise ShapeError(
            f"kernel {kh}x{kw} is larger than the padded input {height + 2 * ph}x{width + 2 * pw}",
            "kernel_size",
        )
    return channels, (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1


def conv2d(shape: Shape, args: Mapping[str, object]) -> Shape:
    _channels, height, width = _window(shape, args, "Conv2D")
    return args["filters"], height, width  # type: ignore[return-value]


def conv2d_params(shape: Shape, args: Mapping[str, object]) -> int:
    kh, kw = pair(args["kernel_size"], "kernel_size")
    filters = int(args["filters"])  # type: ignore[arg-type]
    return shape[0] * kh * kw * filters + (filters if args.get("bias", True) else 0)


def linear(shape: Shape, args: Mapping[str, object]) -> Shape:
    return (args["out"],)  # type: ignore[return-value]


def linear_params(shape: Shape, args: Mapping[str, object]) -> int:
    out = int(args["out"])  # type: ignore[arg-type]
    return math.prod(shape) * out + (out if args.get("bias", True) else 0)


def pool2d(shape: Shape, args: Mapping[str, object]) -> Shape:
    return _window(shape, args, "pooling")


def flatten(shape: Shape, args: Mapping[str, object]) -> Shape:
    return (math.prod(shape),)


def regroup(shape: Shape, args: Mapping[str, object]) -> Shape:
    """The output of a Regroup: `shape` as the listings write it ([H, W, C] or [N]), after `view` (the
    input's values read as these dimensions) and `axes` (their order) are checked to keep the count."""
    listed = tuple(args["shape"])  # type: ignore[arg-type]
    if len(listed) not in (1, 3):
        raise ShapeError("`shape` is an image [height, width, channels] or a vector [features]", "shape")
    out = (listed[2], listed[0], listed[1]) if len(listed) == 3 else listed
    count = math.prod(shape)
    view = tuple(args.get("view") or shape)  # type: ignore[arg-type]
    if math.prod(view) != count:
        raise ShapeError(
            f"`view` {list(view)} holds {math.prod(view)} values; the input holds {count}", "view"
        )
    axes = tuple(args.get("axes") or range(len(view)))  # type: ignore[arg-type]
    if sorted(axes) != list(range(len(view))):
        raise ShapeError(f"`axes` {list(axes)} must order the {len(view)} dimensions of `view`", "axes")
    if math.prod(out) != count:
        raise ShapeError(
            f"`shape` {list(listed)} holds {math.prod(out)} values; the input holds {count}", "shape"
        )
    return out  # type: ignore[return-value]


def normalize(shape: Shape, args: Mapping[str, object]) -> Shape:
    mean, std = args["mean"], args["std"]
    for name, values in (("mean", mean), ("std", std)):
        if isinstance(values, tuple) and len(values) not in (1, shape[0]):
            raise ShapeError(f"`{name}` has {len(values)} values for {shape[0]} channels", name)
    return shape


def corr_max_pool(shape: Shape, args: Mapping[str, object]) -> Shape:
    kernel = args["kernel_size"]
    if isinstance(kernel, tuple) and len(kernel) == 3:
        if len(shape) != 3 or kernel[0] > shape[0]:
            raise ShapeError(f"a {kernel[0]}-channel window does not fit shape {shape}", "kernel_size")
        _window(shape, {"kernel_size": kernel[1:], "stride": args.get("stride")}, "CorrMaxPool3D")
    else:
        _window(shape, {"kernel_size": kernel, "stride": args.get("stride")}, "CorrMaxPool2D")
    return shape


# What the lowering passes to runtime layers beyond the written parameters (LayerFacts.inputs).


def conv2d_inputs(shape: Shape, first: bool) -> dict[str, object]:
    return {"in_channels": shape[0]}


def linear_inputs(shape: Shape, first: bool) -> dict[str, object]:
    return {"in_features": math.prod(shape)}


def first_layer_input(shape: Shape, first: bool) -> dict[str, object]:
    # CorrelateMaxPool pools h_C before the first layer (where h_B is flat) and h_B after it (Section 3.1).
    return {"first_layer": first}


def batch_norm_params(shape: Shape, args: Mapping[str, object]) -> int:
    return 2 * shape[0]  # a scale and a shift per channel (per feature for vectors)


def batch_norm_inputs(shape: Shape, first: bool) -> dict[str, object]:
    return {"features": shape[0]}
