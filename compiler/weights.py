"""Trained networks outside a run: `daic verify` (certify a checkpoint) and `daic export` (to ONNX)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from daic.dsl.parser import parse_net

from .constructors import REGISTRY
from .lower import lower_network
from .network import analyze_net
from .run import RunError
from .sources import read


def load_trained(net_path: str, weights: str, dataset: str | None):
    """The lowered network with the checkpoint's weights, its checkpoint, and the data set declaration."""
    import torch

    from daic.runtime.checkpoint import load

    try:
        state = load(weights)
    except Exception as exc:  # torch.load raises many kinds (pickle, zip, runtime) for a file it cannot read
        raise RunError(
            f"{weights}: not a checkpoint daic can read ({exc.__class__.__name__})", exit_code=2
        ) from None
    name = dataset or state.get("dataset")
    decls = [d for d in REGISTRY.lookup(name or "") if d.category == "dataset"]
    if not decls:
        known = ", ".join(REGISTRY.names("dataset"))
        raise RunError(f"name the data set with --dataset ({known})", exit_code=2)
    data_decl = decls[0]
    source = read(net_path)
    if source.problem is not None:
        raise RunError(f"{net_path} cannot be read", [source.problem])
    parsed = parse_net(source.text)
    facts = data_decl.facts
    network = analyze_net(parsed.tree, facts["shape"], facts["classes"])
    problems = [replace(d, path=net_path) for d in (*parsed.diagnostics, *network.diagnostics)]
    if any(d.is_error for d in problems):
        raise RunError(f"{net_path} does not fit {data_decl.name}", problems)
    model = lower_network(network)
    model_state = state.get("model", state)
    try:
        model.load_state_dict(model_state)
    except (RuntimeError, KeyError) as exc:
        raise RunError(
            f"{weights} does not hold weights for {net_path}: {str(exc).splitlines()[0]}", exit_code=1
        ) from None
    torch.set_grad_enabled(True)
    return model, state, data_decl, network


def export_onnx(model, input_shape: tuple[int, ...], path: Path) -> float:
    """Write the concrete network as ONNX, check it with onnx's checker, and compare onnxruntime's output
    with PyTorch's on random inputs; returns the largest difference (or -1 without onnxruntime)."""
    import torch

    try:
        import onnx
    except ImportError:
        raise RunError("exporting needs the onnx packages: pip install 'daic[onnx]'", exit_code=2) from None
    model = model.eval()
    example = torch.rand(2, *input_shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (example,),
        str(path),
        dynamo=True,
        verbose=False,
        input_names=["input"],
        output_names=["logits"],
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    onnx.checker.check_model(onnx.load(str(path)))
    try:
        import onnxruntime
    except ImportError:
        return -1.0
    session = onnxruntime.InferenceSession(str(path))
    probe = torch.rand(5, *input_shape)
    ours = model(probe).detach().numpy()
    theirs = session.run(None, {session.get_inputs()[0].name: probe.numpy()})[0]
    return float(abs(ours - theirs).max())
