"""`daic export`'s work: a trained network as ONNX, and its test set's robustness as VNN-LIB properties
(with `instances.csv` naming the ONNX file when both are written)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from daic.errors import DaicError


@dataclass(frozen=True)
class Exported:
    """What an export wrote: the ONNX file and onnxruntime's largest difference from PyTorch (-1 without
    onnxruntime), the properties and their radius, and instances.csv when there is one."""

    onnx: Path | None = None
    difference: float = -1.0
    properties: list[Path] = field(default_factory=list)
    epsilon: float | None = None
    instances: Path | None = None


@dataclass(frozen=True)
class ExportRequest:
    net: str
    weights: str
    onnx: Path | None
    vnnlib: Path | None
    eps: float | None = None
    dataset: str | None = None
    data_root: str | None = None
    download: bool = False
    limit: int | None = None
    timeout: float = 60.0


def export_trained(request: ExportRequest) -> Exported:
    """Writes what `request` asks for. The data, radius and properties folder are checked before anything
    is written: a mistake there writes nothing."""
    from daic.compiler.exchange.vnnlib_out import check_properties_folder
    from daic.compiler.jobs.weights import certified_epsilon, export_onnx, load_trained
    from daic.compiler.lower import lower_dataset

    if request.onnx is None and request.vnnlib is None:
        raise DaicError("export: pass --onnx FILE, --vnnlib DIR, or both", exit_code=2)
    model, state, built, network = load_trained(request.net, request.weights, request.dataset)
    if request.vnnlib is not None:
        epsilon = certified_epsilon(state, request.eps)
        data = lower_dataset(built).load(request.data_root, request.download)
        check_properties_folder(request.vnnlib, request.onnx)
    difference = -1.0
    if request.onnx is not None:
        difference = export_onnx(model, network.input_shape, request.onnx)
    if request.vnnlib is None:
        return Exported(request.onnx, difference)
    written = _write_properties(request, data, epsilon, built.decl.name)
    instances = request.vnnlib / "instances.csv" if request.onnx is not None else None
    return Exported(request.onnx, difference, written, epsilon, instances)


def _write_properties(request: ExportRequest, data, epsilon: float, name: str) -> list[Path]:
    from daic.compiler.exchange.vnnlib_out import write_properties

    n = min(request.limit or len(data.test_y), len(data.test_y))
    images = data.test_x[:n].double().flatten(1).tolist()
    return write_properties(
        request.vnnlib, images, data.test_y[:n].tolist(), data.classes, epsilon, data.value_range,
        f"the {name} test set", request.onnx, request.timeout,
    )  # fmt: skip
