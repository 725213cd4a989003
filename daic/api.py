"""daic as a library: check and format sources, describe a network, load and train a scheme, run a study,
load or import a network, certify images, test sets or VNN-LIB properties, export. The command line is a
client of these functions: each command parses its options, calls them, and adds its displays, tables and
exit codes. Every failure a user can cause is a `DaicError` with the message the command line prints. The
work lives in `daic.compiler.jobs` (and the compiler and runtime it drives); this module is its front.

    import daic
    plan = daic.load_scheme("examples/quickstart.dai")
    summary = daic.train(plan, "runs/q", epochs=2)
    model = daic.load_network("examples/digits_conv.net", "runs/q/checkpoint.pt")
    outcomes = daic.certify(model, x, y, epsilon=0.1, domains=["Box", "CROWN"])
    summary = daic.verify("examples/digits_conv.net", "runs/q/checkpoint.pt", limit=100)
    report = daic.tune(daic.load_study("examples/mnist_tune.dai", "MTLIBP_03"), data="DIR")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.errors import DaicError

if TYPE_CHECKING:
    from collections import Counter

    from torch import Tensor, nn

    from daic.compiler.checking.check import FileReport
    from daic.compiler.checking.network import Network
    from daic.compiler.exchange.imported import Imported
    from daic.compiler.jobs.export import Exported
    from daic.compiler.jobs.formatting import Formatted
    from daic.compiler.jobs.run import Plan
    from daic.compiler.jobs.run.display import Display
    from daic.compiler.jobs.tune import StudyPlan, StudyReport
    from daic.dsl.diagnostics import Diagnostic
    from daic.runtime.certification.certify import Outcome
    from daic.runtime.data.tensors import TensorData
    from daic.runtime.training.distributed import Group


def check(*paths: str | Path) -> list[Diagnostic]:
    """The diagnostics of `.net` and `.dai` files (folders: every such file in them), errors and
    warnings, as `daic check` reports them; an empty list when all is well."""
    return [d for report in check_reports(*paths) for d in report.diagnostics]


def check_reports(*paths: str | Path) -> list[FileReport]:
    """`check`'s diagnostics with their files: one report per file checked, each with its source and the
    index that places a diagnostic's span in it (what `daic check` renders)."""
    from daic.compiler.checking.check import check_path
    from daic.compiler.checking.sources import discover

    return [check_path(path) for path in discover([str(p) for p in paths])]


def check_text(text: str | bytes, filename: str | None = None) -> FileReport:
    """A source given as text checked as `daic check -` checks standard input: `filename` names it in the
    diagnostics, says its language by its suffix (without it, the text's first word decides) and is where
    its imports and nets are found from."""
    from daic.compiler.checking.check import check_source

    return check_source(_text_source(text, filename))


def _text_source(text: str | bytes, filename: str | None):
    from daic.compiler.checking.sources import from_stdin

    return from_stdin(text.encode("utf-8") if isinstance(text, str) else text, filename)


def format_files(*paths: str | Path) -> list[Formatted]:
    """The canonical form of `.net` and `.dai` files (folders: every such file in them), as `daic fmt`
    writes it: for each, ``.text`` (None where the file does not parse: ``.report.diagnostics`` say why),
    ``.changed`` and ``.diff()``. Nothing is written."""
    from daic.compiler.checking.sources import discover, read
    from daic.compiler.jobs.formatting import formatted

    return [formatted(read(path)) for path in discover([str(p) for p in paths])]


def format_text(text: str | bytes, filename: str | None = None) -> Formatted:
    """A source given as text in canonical form, as `daic fmt -` formats standard input (`filename` as
    for `check_text`)."""
    from daic.compiler.jobs.formatting import formatted

    return formatted(_text_source(text, filename))


def describe_network(
    net: str | Path, input_shape: Sequence[int] | None = None, classes: int | None = None
) -> Network:
    """A `.net` file's layers as `daic show` lists them: ``.nodes`` with each layer's output shape, neurons
    and parameters, the totals (``.neurons``, ``.params``, ``.output_shape``) and ``.diagnostics``, for
    inputs of `input_shape` (C, H, W, or a vector's length; default: the file's annotation), checked to end
    in `classes` outputs when given. A file that does not parse is a DaicError with its diagnostics."""
    from daic.compiler.checking.check import parse_source
    from daic.compiler.checking.network import analyze_net
    from daic.compiler.checking.sources import language_of, read

    if language_of(net) != "net":
        raise DaicError(f"{net}: not a .net file", exit_code=2)
    report = parse_source(read(str(net)))
    if report.parsed is None or report.has_errors:
        raise DaicError(f"{net}: the file does not parse", report.diagnostics)
    shape = None if input_shape is None else tuple(input_shape)
    return analyze_net(report.parsed.tree, shape, classes)


def init(folder: str | Path = ".") -> list[Path]:
    """Writes a starter network (model.net) and training scheme (train.dai) into `folder`, as `daic init`
    does, never over an existing file; returns their paths."""
    from daic.compiler.jobs.starter import write_starter

    return write_starter(Path(folder))


def load_scheme(path: str | Path, scheme: str | None = None, net: str | Path | None = None) -> Plan:
    """A scheme of a `.dai` file (`scheme`: which, when it declares several) with its network (or `net`),
    checked and resolved: what `train` trains."""
    from daic.compiler.jobs.run import plan_run

    return plan_run(str(path), scheme, None if net is None else str(net))


def train(
    plan: Plan | str | Path,
    out: str | Path,
    *,
    epochs: int | None = None,
    device: str = "cpu",
    seed: int | None = None,
    resume: bool = False,
    data: str | Path | None = None,
    download: bool = False,
    amp: str | None = None,
    display: Display | None = None,
    group: Group | None = None,
) -> dict[str, Any]:
    """Trains a scheme (a `load_scheme` result, or a `.dai` path) into the run folder `out`, as `daic run`
    does; returns the summary (the final row of each test, the epochs, the seconds). `data` is the folder of
    the data set's files (`download`: fetch them there), `amp` "bf16" or "fp16" mixed precision for the
    concrete passes; `display` shows progress (none by default), and `group` makes this one process of a
    distributed run (`daic run --nproc-per-node`)."""
    from daic.compiler.jobs.run import execute
    from daic.compiler.jobs.run.display import Silent

    if epochs is not None and not (isinstance(epochs, int) and epochs >= 1):
        raise DaicError(f"epochs={epochs!r}: train at least 1 epoch (None: the scheme's)", exit_code=2)

    plan = plan if not isinstance(plan, (str, Path)) else load_scheme(plan)
    root = None if data is None else str(data)
    return execute(plan, Path(out), epochs=epochs, data_root=root, download=download,
                    device=device, resume=resume, display=display or Silent(), group=group, amp=amp,
                    seed=seed)  # fmt: skip


def load_study(
    path: str | Path, study: str | None = None, out: str | Path | None = None, storage: str | None = None
) -> StudyPlan:
    """A study of a `.dai` file (`study`: which, when it declares several), checked, with its folder (`out`,
    default runs/STUDY) and Optuna storage (`storage`, default an SQLite file in the folder): what `tune`
    runs."""
    from daic.compiler.jobs.tune import plan_study

    return plan_study(str(path), study, None if out is None else str(out), storage)


def tune(
    plan: StudyPlan | str | Path,
    *,
    data: str | Path | None = None,
    device: str = "cpu",
    on_trial: Callable[[Any, str], None] | None = None,
    display: Callable[[int], Display] | None = None,
) -> StudyReport:
    """Runs a study (a `load_study` result, or a `.dai` path) as `daic tune` does: trials until the study
    has its number of results (continuing one its storage holds), then its best trial or Pareto front
    tested on the test set, `best.dai` (or `pareto-NNN.dai`), the plot and summaries in its folder. Returns
    the report: each trial's row, the chosen trials and their test figures, the importances, the files
    written. `on_trial(trial, progress)` sees each of this worker's trials as it ends (Optuna's trial, and
    a line of the study's progress); `display(number)` is trial `number`'s run display (none by default)."""
    from daic.compiler.jobs.run.display import Silent
    from daic.compiler.jobs.tune import TrialSettings, progress_text, report_study, work

    plan = plan if not isinstance(plan, (str, Path)) else load_study(plan)
    root = None if data is None else str(data)
    settings = TrialSettings(root, device, display or (lambda number: Silent()))

    def ended(study, trial) -> None:
        if on_trial is not None:
            on_trial(trial, progress_text(plan, study))

    return report_study(plan, work(plan, settings, ended), root, device)


def load_network(
    net: str | Path | nn.Module, weights: str | Path | None = None, input_shape: Sequence[int] | None = None
) -> nn.Module:
    """The network of a `.net` file (its first layer says the input's shape) with a checkpoint's weights
    (of `daic run` or `daic import`), or freshly initialised without one; in evaluation mode. A plain
    `torch.nn.Module` (of layers daic has: `daic import` reads them) is taken through ONNX as `daic import`
    takes a file, for inputs of `input_shape` (one example's, without the batch)."""
    from daic.compiler.jobs.run.plan import load_network as checked_network
    from daic.compiler.jobs.weights import load_without_data
    from daic.compiler.lower import lower_network

    if not isinstance(net, (str, Path)):
        if input_shape is None:
            raise DaicError(
                "input_shape: a torch module's input shape (one example's) is needed", exit_code=2
            )
        return _from_torch(net, tuple(input_shape))
    if weights is not None:
        return load_without_data(str(net), str(weights))[0].eval()
    return lower_network(checked_network(str(net), None)[1]).eval()


def load_data(dataset: str, root: str | Path | None = None, download: bool = False) -> TensorData:
    """A data set by its name in the language (`Digits`, `MNIST`, ...; a call such as
    `ImageFolder(path="DIR", size=32, classes=10)` too): ``train_x``, ``train_y``, ``test_x``, ``test_y``
    (float32 images in [0, 1], channels first), ``classes``, ``value_range``."""
    from daic.compiler.jobs.weights import dataset_named
    from daic.compiler.lower import lower_dataset
    from daic.runtime.data.tensors import DataError

    built = dataset_named(dataset, True)
    try:
        return lower_dataset(built).load(None if root is None else str(root), download)
    except DataError as exc:
        raise exc.as_usage() from None


def import_onnx(path: str | Path) -> Imported:
    """An ONNX network as daic reads it: ``.text`` (the `.net` file), ``.network`` (checked) and
    ``.model`` (the module with the file's weights)."""
    from daic.compiler.exchange.imported import import_onnx as read

    return read(path)


def write_import(path: str | Path, net: str | Path, force: bool = False) -> tuple[Imported, Path, float]:
    """`import_onnx`, written as `daic import` writes it: the `.net` file `net` and its weights beside it
    (NAME.pt), after onnxruntime's outputs are compared with the imported network's, never over an existing
    file unless `force`. Returns the import, the checkpoint's path and that difference (-1 without
    onnxruntime)."""
    from daic.compiler.exchange.imported import write_import as write

    return write(path, Path(net), force)


def certify(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    epsilon: float,
    *,
    domains: Sequence[str] = ("Box", "HBox", "CROWN"),
    attack: bool = True,
    value_range: tuple[float, float] = (0.0, 1.0),
) -> list[Outcome]:
    """Certifies the images `x` (labels `y`) at radius `epsilon` with the cascade `domains` (written as in
    a scheme's Verify: "Box", "CROWN", "BranchAndBound(timeout=30)"), after PGD unless `attack` is False,
    in float64 with outward rounding, as `daic verify` does; `model` is daic's network or a plain torch
    module of layers daic has (`load_network` reads it). Each outcome has ``status`` (verified,
    falsified, unknown, error), ``by``, ``margin`` and, when falsified, the ``witness``."""
    import copy
    import math

    from daic.runtime.certification.certify import certify as run_cascade

    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
        raise DaicError(f"epsilon={epsilon!r} is not a radius: a finite number >= 0", exit_code=2)
    steps = _cascade(domains, attack)
    if not hasattr(model, "abstract"):  # a plain torch module is read as daic's network first
        model = _from_torch(model, tuple(x.shape[1:]))
    float64 = copy.deepcopy(model).double()
    _check_images(float64, x, y)
    return run_cascade(float64, steps, x.double(), y, float(epsilon), value_range)


def _from_torch(module: nn.Module, shape: tuple[int, ...]) -> nn.Module:
    """A plain torch module as daic's network: exported by torch.onnx (its TorchScript exporter, as the
    field's code bases export) and read by `daic import`; its outputs must be the module's."""
    import copy
    import tempfile
    import warnings

    import torch

    if hasattr(module, "abstract"):  # daic's own network already
        return module
    source = copy.deepcopy(module).float().eval()
    example = torch.rand(2, *shape, generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "module.onnx"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(source, (example,), str(path), dynamo=False, input_names=["x"],
                                  dynamic_axes={"x": {0: "batch"}})  # fmt: skip
        except Exception as exc:
            raise DaicError(f"the module does not export to ONNX: {str(exc).splitlines()[0][:300]}") from None
        model = _read_onnx(path).model
    with torch.no_grad():
        expected = source(example)
        gap = float((model.float()(example) - expected).abs().max())
    if not gap <= 1e-4 * max(1.0, float(expected.abs().max())):
        raise DaicError(
            f"the module read through ONNX computes another function (outputs differ by {gap:.3g})"
        )
    return model


def _read_onnx(path: Path):
    from daic.compiler.exchange.imported import import_onnx as read

    return read(path)


def _check_images(model: nn.Module, x: Tensor, y: Tensor) -> None:
    """Refuses, with a DaicError, images the network cannot take or labels that do not match them."""
    import torch

    from daic.runtime.layers.base import placement

    if x.dim() < 2 or y.dim() != 1 or len(x) != len(y):
        raise DaicError(
            f"x has shape {tuple(x.shape)} and y {tuple(y.shape)}: pass a batch of images (N, ...) and their "
            "N labels", exit_code=2,
        )  # fmt: skip
    try:
        with torch.no_grad():
            model(x[:1].to(*placement(model)))
    except RuntimeError as exc:
        first = str(exc).splitlines()[0][:200]
        raise DaicError(
            f"the network cannot take images of shape {tuple(x.shape[1:])} ({first})", exit_code=2
        ) from None


def _cascade(domains: Sequence[str], attack: bool) -> list:
    from daic.compiler.jobs.verify import cascade_of

    return cascade_of(domains, attack)


def verify(
    net: str | Path,
    weights: str | Path,
    *,
    eps: float | str | Sequence[float | str] | None = None,
    domains: Sequence[str] = ("Box", "HBox", "CROWN"),
    attack: bool = True,
    dataset: str | None = None,
    data: str | Path | None = None,
    download: bool = False,
    limit: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    device: str = "cpu",
    display: Callable[[Counter, int, float], None] | None = None,
    group: Group | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Certifies a trained network's test set image by image, as `daic verify` does: the checkpoint's data
    set (or `dataset`; `data` its folder), at the run's radius or `eps` (several, or "START:STOP:COUNT":
    a curve), by the cascade `domains` after PGD unless `attack` is False, each image's outcome a line of
    the record `out` (default: beside the checkpoint, NAME.verify.jsonl; `resume` continues one). Returns
    the summary of the record (images, verified, falsified, unknown, ...), or one per radius for a curve.
    `display(counts, done, seconds)` sees the progress; `group` makes this one process of several."""
    import torch

    from daic.compiler.jobs.test_set import verify_test_set
    from daic.compiler.jobs.verify import Settings, default_record
    from daic.runtime.training.distributed import Group

    if limit is not None and not (isinstance(limit, int) and limit >= 1):
        raise DaicError(f"limit={limit!r}: certify at least 1 image (None: every test image)", exit_code=2)
    radii = [] if eps is None else [eps] if isinstance(eps, (int, float, str)) else list(eps)
    record = Path(out) if out is not None else default_record(str(weights))
    root = None if data is None else str(data)
    settings = Settings(str(net), str(weights), [str(e) for e in radii], list(domains), attack, dataset, root,
                        download, limit, record, resume)  # fmt: skip
    group = group if group is not None else Group(device=torch.device(device))
    return verify_test_set(settings, group, display or (lambda counts, done, seconds: None))


def verify_vnnlib(
    network: str | Path,
    prop: str | Path,
    *,
    weights: str | Path | None = None,
    domains: Sequence[str] | None = None,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """One VNN-LIB property on a network (an `.onnx` file, or a `.net` file with `weights`), as `daic
    verify --vnnlib` answers it: a dict with ``result`` (unsat, sat, timeout, unknown), ``status``,
    ``domain``, ``margin``, ``seconds`` and, for sat, the ``witness`` (``X`` and ``Y``) and who ``checked``
    it; for timeout and unknown the ``reason``."""
    import torch

    from daic.compiler.exchange.vnnlib_in import read_property
    from daic.compiler.jobs.properties import Instance, Networks, decide, default_domains

    certifier = Networks(None if weights is None else str(weights), torch.device("cpu")).get(str(network))
    chosen = domains if domains is not None else default_domains(certifier)
    instance = Instance(str(network), Path(prop), float(timeout))
    return decide(instance, read_property(prop), certifier, _cascade(chosen, True), 0)


def verify_properties(
    vnnlib: str | Path,
    network: str | Path | None = None,
    *,
    weights: str | Path | None = None,
    domains: Sequence[str] | None = None,
    attack: bool = True,
    timeout: float = 60.0,
    out: str | Path | None = None,
    resume: bool = False,
    device: str = "cpu",
    display: Callable[[Counter, int, float], None] | None = None,
    group: Group | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """VNN-LIB properties as `daic verify --vnnlib` certifies them: `vnnlib` is a `.vnnlib` file or a folder
    of them on `network` (an `.onnx` file, or a `.net` file with `weights`), or a benchmark's instances.csv
    (which names each property's network and timeout; else `timeout` seconds each). Each answer is a line
    of the record `out` (default: beside the properties, NAME.verify.jsonl; `resume` continues one). Returns
    the summary (unsat, sat, timeout, unknown, errors) and the rows, each as `verify_vnnlib` answers; in a
    folder or instances.csv, an instance that cannot be read or decided is that row's ``error``."""
    import torch

    from daic.compiler.jobs.properties import PropertySettings, default_out
    from daic.compiler.jobs.properties import verify_properties as certify_properties
    from daic.runtime.training.distributed import Group

    record = Path(out) if out is not None else default_out(str(vnnlib))
    settings = PropertySettings(
        None if network is None else str(network), None if weights is None else str(weights),
        str(vnnlib), None if domains is None else tuple(domains), attack, float(timeout), record, resume,
    )  # fmt: skip
    group = group if group is not None else Group(device=torch.device(device))
    return certify_properties(settings, group, display or (lambda counts, done, seconds: None))


def export_onnx(model: nn.Module, input_shape: Sequence[int], path: str | Path) -> float:
    """Writes the concrete network as ONNX (checked; abstract layers dropped, BatchNorm folded) and
    returns the largest difference between onnxruntime's outputs and PyTorch's (-1 without onnxruntime)."""
    from daic.compiler.jobs.weights import export_onnx as write

    return write(model, tuple(input_shape), Path(path))


def export(
    net: str | Path,
    weights: str | Path,
    *,
    onnx: str | Path | None = None,
    vnnlib: str | Path | None = None,
    eps: float | None = None,
    dataset: str | None = None,
    data: str | Path | None = None,
    download: bool = False,
    limit: int | None = None,
    timeout: float = 60.0,
) -> Exported:
    """A trained network (a `.net` file and a checkpoint of `daic run`) written as `daic export` writes it:
    as ONNX (`onnx`: checked, and compared with onnxruntime), and each test image's robustness at the run's
    radius (or `eps`) as a VNN-LIB property in the folder `vnnlib` (the first `limit` images; with `onnx`,
    also instances.csv, `timeout` seconds each). Checks everything before writing anything; returns what was
    written."""
    from daic.compiler.jobs.export import ExportRequest, export_trained

    def path(value: str | Path | None) -> Path | None:
        return None if value is None else Path(value)

    request = ExportRequest(str(net), str(weights), path(onnx), path(vnnlib), eps, dataset,
                            None if data is None else str(data), download, limit, float(timeout))  # fmt: skip
    return export_trained(request)
