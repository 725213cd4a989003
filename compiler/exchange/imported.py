"""An imported ONNX network (`onnx_in`) made a network of daic's language: its `.net` text, checked like any
other; its runtime module with the ONNX file's weights; and `daic import`, which writes both, the weights as
a checkpoint that `daic verify`, `daic export` and a scheme's `weights` read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.compiler.checking.network import Network, analyze_net
from daic.compiler.exchange.onnx_in import read_onnx
from daic.compiler.exchange.onnx_nodes import ImportedBlock, ImportedNetwork, ImportFailure, Item
from daic.compiler.lower import lower_network
from daic.dsl.parser import parse_net

if TYPE_CHECKING:
    from torch import nn


def net_text(imported: ImportedNetwork) -> str:
    """The network as a `.net` file: a comment saying where it came from, then a layer per line, the first
    annotated with the input's shape (H, W, C as the listings write it)."""
    shape = imported.input_shape
    annotation = [shape[1], shape[2], shape[0]] if len(shape) == 3 else list(shape)
    lines = [f"# Imported by `daic import` from {Path(imported.source).name}."]
    if imported.layout is not None:
        lines.append(
            f"# The ONNX input, of shape {list(imported.onnx_shape)}, is regrouped into this network's input"
            " (a transposition or reshaping before its first layer): its values come in another order."
        )
    lines += _lines(imported.layers, 0, {"input_shape": annotation})
    return "\n".join(lines) + "\n"


def _lines(items: list[Item], depth: int, first: dict[str, Any] | None) -> list[str]:
    lines, indent = [], "    " * depth
    for item in items:
        extra, first = first or {}, None
        if isinstance(item, ImportedBlock):
            heads = (
                ("ParNet1", "ParNet2", "ParSum")
                if item.kind == "sum"
                else ("SkipNet1", "SkipNet2", "SkipCat")
            )
            for number, branch in enumerate(item.branches):
                lines.append(indent + " ".join([heads[number], *_params(extra if number == 0 else {})]))
                lines += _lines(branch, depth + 1, None)
            lines.append(indent + heads[2])
            continue
        lines.append(indent + " ".join([item.kind, *_params({**item.params, **extra})]))
    return lines


def _params(params: dict[str, Any]) -> list[str]:
    return [f"{key}={_value(value)}" for key, value in params.items()]


def _value(value: Any) -> str:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass
class Imported:
    """An ONNX network as daic holds it: the `.net` text, the checked network, its runtime module, and
    what was read (`source_network`: the ONNX input's shape and order of values among it)."""

    text: str
    network: Network
    model: nn.Module
    source_network: ImportedNetwork


def import_onnx(path: str | Path) -> Imported:
    """The ONNX network at `path` as a checked network of daic's language with the file's weights."""
    imported = read_onnx(path)
    text = net_text(imported)
    parsed = parse_net(text)
    network = analyze_net(parsed.tree)
    problems = [d for d in (*parsed.diagnostics, *network.diagnostics) if d.is_error]
    if problems:  # what the converters wrote should always check; say so plainly if it does not
        raise ImportFailure(
            f"{path}: the network read does not check as daic's language ({problems[0].message}, line "
            f"{problems[0].span.line})"
        )
    model = lower_network(network)
    _load(imported.layers, list(model))
    return Imported(text, network, model.eval(), imported)


def _load(items: list[Item], modules: list[Any]) -> None:
    """Copies each layer's tensors into the module it was lowered to (the lowering keeps the order)."""
    import torch

    for item, module in zip(items, modules, strict=True):
        if isinstance(item, ImportedBlock):
            for branch, sequential in zip(item.branches, (module.branch1, module.branch2), strict=True):
                _load(branch, list(sequential))
            continue
        own = module.state_dict()
        for name, array in item.tensors.items():
            if name not in own or own[name].numel() != array.size:
                expected = list(own[name].shape) if name in own else "none"
                raise ImportFailure(
                    f"node {item.node}: its {name} has shape {list(array.shape)}, the layer's {expected}"
                )
            # CPU: the ONNX file's weights go into the module on the host, where it was lowered
            value = torch.tensor(array.reshape(own[name].shape), dtype=torch.float32)
            with torch.no_grad():
                getattr(module, name).copy_(value)


def compare_with_onnxruntime(imported: Imported, path: str | Path) -> float:
    """The largest difference between onnxruntime's outputs and the imported network's on random inputs
    (-1 without onnxruntime)."""
    import numpy as np
    import torch

    from daic.compiler.exchange.onnx_in import onnx_inputs
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session, refusal_reason

    # CPU: onnxruntime runs on the host, beside the imported network
    probe = torch.rand(4, *imported.network.input_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = imported.model(probe).numpy()
    try:  # one point at a time, in the file's own shape and order of values (see `onnx_inputs`)
        session = onnxruntime_session(path)
        if session is None:
            return -1.0
        name = session.get_inputs()[0].name
        rows = onnx_inputs(imported.source_network, probe.numpy())
        theirs = [session.run(None, {name: row})[0] for row in rows]
    except Exception as exc:  # onnxruntime raises its own kinds for a model it cannot run
        raise ImportFailure(f"{path}: onnxruntime cannot run it ({refusal_reason(exc)})") from None
    return float(np.abs(ours - np.concatenate([t.reshape(1, -1) for t in theirs]).reshape(ours.shape)).max())


def checkpoint_state(imported: Imported, source: str | Path) -> dict[str, Any]:
    """What `daic import` saves beside the `.net` file: the weights, and where they came from."""
    return {"model": imported.model.state_dict(), "imported_from": str(Path(source).resolve())}


def write_import(source: str | Path, net: Path, force: bool = False) -> tuple[Imported, Path, float]:
    """`daic import`: the network of the ONNX file `source` written as `net` (a `.net` file) and its
    weights as the checkpoint beside it (`NAME.pt`); each written whole or not at all, and an existing
    file replaced only with `force`. Returns the import, the checkpoint's path and the largest difference
    between onnxruntime's outputs and the imported network's (-1 without onnxruntime)."""
    from daic.errors import DaicError
    from daic.files import write_atomic
    from daic.runtime.checkpoint import save_atomic

    weights = net.with_suffix(".pt")
    if net.suffix != ".net":
        raise DaicError(f"--out {net}: the network is written as a .net file", exit_code=2)
    existing = [str(p) for p in (net, weights) if p.exists()]
    if existing and not force:
        message = f"{' and '.join(existing)} already exist: pass --force to replace them"
        raise DaicError(message, exit_code=2)
    try:
        imported = import_onnx(source)
        difference = compare_with_onnxruntime(imported, source)
    except ImportFailure as exc:
        raise exc.as_usage() from None
    try:
        save_atomic(checkpoint_state(imported, source), weights)
        write_atomic(net, lambda handle: handle.write(imported.text.encode()))
    except OSError as exc:
        raise DaicError(f"cannot write {net}: {exc.strerror or exc}", exit_code=2) from None
    return imported, weights, difference
