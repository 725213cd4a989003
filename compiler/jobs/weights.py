"""Trained networks outside a run: `daic verify` (certify a checkpoint) and `daic export` (to ONNX)."""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.checking.elaborate import did_you_mean
from daic.compiler.checking.expressions import ExpressionError, check_expression
from daic.compiler.checking.sources import UsageError
from daic.compiler.checking.values import Built
from daic.compiler.constructors import REGISTRY
from daic.compiler.jobs.checkpoints import read_checkpoint, weights_mismatch
from daic.compiler.jobs.run.plan import load_network
from daic.compiler.lower import lower_network
from daic.compiler.registry import Category
from daic.compiler.types import DATASET
from daic.errors import DaicError

if TYPE_CHECKING:
    pass


def certified_epsilon(state: Mapping[str, Any], given: float | None) -> float:
    """The radius to certify: the one given, else the checkpoint's (the run's epsilon)."""
    epsilon = given if given is not None else state.get("epsilon")
    if epsilon is None:
        raise DaicError("the checkpoint does not say its epsilon: pass --eps", exit_code=2)
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        # A NaN or infinite radius certifies nothing (and an infinite one makes the attack a no-op).
        where = f"--eps {epsilon!r}" if given is not None else f"the checkpoint's epsilon, {epsilon!r},"
        fix = "" if given is not None else ": pass --eps"
        raise DaicError(f"{where} is not a radius (a finite number above 0){fix}", exit_code=2)
    return value


def load_trained(net_path: str, weights: str, dataset: str | None):
    """The lowered network with the checkpoint's weights, its checkpoint, and the data set (a `Built`, for
    `lower_dataset`)."""
    state = read_checkpoint(weights, "pass a whole checkpoint of `daic run`")
    data = dataset_named(dataset or state.get("dataset"), given=dataset is not None)
    try:
        _tree, network = load_network(net_path, data)
    except UsageError as exc:
        raise exc.as_usage() from None
    return _with_weights(network, net_path, weights, state), state, data, network


def load_without_data(net_path: str, weights: str):
    """The lowered network with the checkpoint's weights and the checkpoint, for a network whose file
    gives its input's shape (an `input_shape` annotation), with no data set: what a property certifies."""
    state = read_checkpoint(weights, "pass a whole checkpoint of `daic run` or `daic import`")
    try:
        network = load_network(net_path, None)[1]
    except UsageError as exc:
        raise exc.as_usage() from None
    if network.input_shape is None:
        raise DaicError(
            f"{net_path} does not say its input's shape: add input_shape=[H, W, C] (or [F]) to its first "
            "layer",
            exit_code=2,
        )
    return _with_weights(network, net_path, weights, state), state, network


def _with_weights(network, net_path: str, weights: str, state: dict[str, Any]):
    import torch

    model = lower_network(network)
    saved = state.get("model", state)
    mismatch = weights_mismatch(model, saved)
    if mismatch is not None:
        raise DaicError(
            f"{weights} does not hold weights for {net_path}: {mismatch}; pass the network it was trained "
            "with",
            exit_code=2,
        )
    model.load_state_dict(saved)
    torch.set_grad_enabled(True)
    return model


def dataset_named(name: object, given: bool) -> Built:
    """The data set `name` (given with --dataset, or the checkpoint's), with its default arguments; or, for
    a data set its arguments describe (ImageFolder), as --dataset writes it in the language."""
    known = REGISTRY.names(Category.DATASET)
    decl = REGISTRY.dataset(name) if isinstance(name, str) else None
    if decl is not None:
        if decl.dataset.for_args({}) is None:
            # A checkpoint records only the name; the arguments are in the scheme that trained it.
            which = f"--dataset {name}" if given else f"the checkpoint's data set, {decl.name},"
            call = f"{decl.name}({', '.join(f'{p.name}=...' for p in decl.params if p.required)})"
            raise DaicError(
                f"{which} takes its images' shape and classes from its arguments: pass it as the scheme "
                f"wrote it, --dataset '{call}'",
                exit_code=2,
            )
        return Built(decl, {})
    if given and isinstance(name, str) and "(" in name:
        try:
            return check_expression(name, DATASET)
        except ExpressionError as exc:
            raise DaicError(f"--dataset: {exc}", exit_code=2) from None
    if not given:
        raise DaicError(
            f"the checkpoint does not name its data set: pass --dataset ({', '.join(known)})", exit_code=2
        )
    hint = did_you_mean(str(name), known)
    raise DaicError(
        f"--dataset {name}: no such data set"
        + (f"; {hint}" if hint else "")
        + f" (known: {', '.join(known)})",
        exit_code=2,
    )


def _write_checked(model, example, staged: Path) -> None:
    """The network exported to `staged` (a batch dimension of any size) and passed by onnx's checker."""
    import onnx
    import torch

    torch.onnx.export(
        model,
        (example,),
        str(staged),
        dynamo=True,
        verbose=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    written = onnx.load(str(staged))  # with the weights the exporter put beside it
    onnx.checker.check_model(written)
    if sum(t.ByteSize() for t in written.graph.initializer) < ONE_FILE_BYTES:
        for made in staged.parent.iterdir():
            made.unlink()
        onnx.save(written, str(staged), save_as_external_data=False)


ONE_FILE_BYTES = 2**31 - 2**24
"""Weights below this size go inside the `.onnx` file (protobuf's limit is 2 GB, with room for the graph);
larger ones stay beside it (`NAME.onnx.data`), as the exporter writes them."""


def export_onnx(model, input_shape: tuple[int, ...], path: Path) -> float:
    """Write the concrete network as ONNX (abstract layers are the identity there; BatchNorm is folded into
    the convolution or linear layer before it), check it with onnx's checker, and compare onnxruntime's output
    with PyTorch's on random inputs; returns the largest difference (or -1 without onnxruntime). One file
    holds the network and its weights, unless they pass 2 GB (then the weights go
    beside it, `NAME.onnx.data`). The files are made in a temporary folder beside the target and moved into
    place once checked, so a failure leaves nothing half-written."""
    import torch

    try:
        import onnx  # noqa: F401  (the exporter's dependencies, checked before anything is written)
    except ImportError:
        message = "exporting needs the onnx packages: pip install 'daic[onnx]'"
        raise DaicError(message, exit_code=2) from None
    from daic.runtime.layers.normalization import fold_batch_norms

    model = fold_batch_norms(model)  # test-time BatchNorm is affine: folded into the layer before it
    # CPU: the network is exported from the host, where its checkpoint was loaded
    example = torch.rand(2, *input_shape)
    model = _normalizations_as_layers(model, example)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as exc:
        raise DaicError(f"cannot write {path}: {exc.strerror or exc}", exit_code=2) from None
    staged = work / path.name
    try:
        _write_checked(model, example, staged)
        difference = _compare_with_onnxruntime(model, staged, input_shape)
        for made in sorted(work.iterdir(), key=lambda p: p == staged):  # the model last: it names the rest
            os.replace(made, path.parent / made.name)
    except OSError as exc:
        raise DaicError(f"cannot write {path}: {exc.strerror or exc}", exit_code=2) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return difference


def _normalizations_as_layers(model, example):
    """A copy of the network whose Normalize layers are affine layers of the same function: a 1x1
    convolution of weight ``diag(1 / std)`` and bias ``-mean / std`` on images (Conv1d on sequences, a
    diagonal Linear on vectors). alpha-beta-CROWN's default "patches" mode reads a convolution, but fails
    on every form of a constant Sub/Div or Mul/Add tried on MNIST ConvSmall and ConvBig (per channel,
    scalar, the input's whole shape: `size of tensor a (25088) must match the size of tensor b (28)`,
    `const.ndim == 4`); folding into the first convolution is exact only without padding."""
    import copy

    import torch

    from daic.runtime.layers.affine import Normalize

    model = copy.deepcopy(model)
    ranks: dict[int, int] = {}
    found = [m for m in model.modules() if isinstance(m, Normalize)]

    def record(layer, args) -> None:  # a pre-hook that returns nothing leaves the input as it is
        ranks.setdefault(id(layer), args[0].dim() - 1)

    probes = [layer.register_forward_pre_hook(record) for layer in found]
    with torch.no_grad():
        model(example)
    for probe in probes:
        probe.remove()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Normalize) and ranks.get(id(child)) in _AFFINE_LAYERS:
                setattr(parent, name, _as_affine_layer(child, ranks[id(child)]))
    return model


_AFFINE_LAYERS = {1: "Linear", 2: "Conv1d", 3: "Conv2d"}
"""The layer that computes a Normalize on inputs of each rank (channels, then the rest)."""


def _as_affine_layer(layer, rank: int):
    """`layer` (a Normalize) as `_AFFINE_LAYERS[rank]`: weight ``diag(1 / std)``, bias ``-mean / std``."""
    import torch
    from torch import nn

    scale = 1.0 / layer.std.double()
    c = len(scale)
    kind = getattr(nn, _AFFINE_LAYERS[rank])
    affine = (kind(c, c) if rank == 1 else kind(c, c, 1)).to(layer.std.dtype)
    with torch.no_grad():
        affine.weight.copy_(torch.diag(scale).reshape(affine.weight.shape))
        affine.bias.copy_(-layer.mean.double() * scale)
    return affine


def _compare_with_onnxruntime(model, path: Path, input_shape: tuple[int, ...]) -> float:
    import torch

    from daic.compiler.exchange.onnx_runtime import onnxruntime_session, refusal_reason

    # CPU: onnxruntime runs on the host, beside the exported network
    probe = torch.rand(5, *input_shape)
    ours = model(probe).detach().numpy()
    try:
        session = onnxruntime_session(path)
        if session is None:
            return -1.0
        theirs = session.run(None, {session.get_inputs()[0].name: probe.numpy()})[0]
    except Exception as exc:  # onnxruntime raises kinds of its own; nothing is written then
        raise DaicError(f"onnxruntime cannot run the exported network ({refusal_reason(exc)})") from None
    return float(abs(ours - theirs).max())
