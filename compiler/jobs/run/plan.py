"""Planning a run: the scheme and its network checked and resolved, before any tensor exists; their
lowering to the runtime's scheme and network; and the run's definition, by meaning, which a resumed run
must share with the run it continues."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from daic.compiler.checking.check import check_source
from daic.compiler.checking.elaborate import did_you_mean
from daic.compiler.checking.network import Network, analyze_for_data
from daic.compiler.checking.program import Module, Program, SchemeInfo
from daic.compiler.checking.sources import language_of, read
from daic.compiler.checking.spaces import named_spaces
from daic.compiler.checking.values import Built
from daic.compiler.constructors import SCHEME_DECL
from daic.compiler.lower import lower_network, lower_value
from daic.dsl import ast as A
from daic.dsl.format import INDENT, flat, layer_text
from daic.dsl.parser import parse_net
from daic.errors import DaicError

if TYPE_CHECKING:  # the runtime (and torch) is imported only when a run starts
    from torch import nn

    from daic.runtime.training.scheme import Scheme


@dataclass
class Plan:
    """Everything checked and resolved, before any tensor exists."""

    scheme_path: str
    scheme: SchemeInfo
    module: Module
    net_path: str
    net_tree: A.NetFile
    network: Network

    def source_of(self, field: str) -> str:
        """A field of the run's scheme as its source wrote it (formatted on one line), in the scheme or the
        base it extends, or as the declaration writes its default."""
        info: SchemeInfo | None = self.scheme
        while info is not None:
            written = info.node.get_field(field)
            if written is not None:
                return flat(written.value)
            info = info.base
        return SCHEME_DECL.param(field).default_text()


def plan_run(scheme_path: str, scheme_name: str | None, net_override: str | None) -> Plan:
    """The scheme `scheme_name` of the file (the only one, when None) with its network (or
    `net_override`), checked: what a run trains. A mistake is a DaicError saying which."""
    _check_paths(scheme_path, net_override)
    report = check_source(read(scheme_path), Program(check_nets=net_override is None))
    errors = [d for d in report.diagnostics if d.is_error]
    if errors or report.module is None:
        raise DaicError(f"{scheme_path} has errors", list(report.diagnostics))
    module = report.module
    info = module.schemes[_scheme_named(scheme_path, module, scheme_name)]
    _refuse_spaces(info)
    net_path = net_override if net_override is not None else info.net_path
    if net_path is None:
        raise DaicError(
            f'scheme {info.node.name} names no network: add `net = "file.net"` or pass --net', exit_code=2
        )
    return _with_network(scheme_path, info, module, net_path)


def _check_paths(scheme_path: str, net_override: str | None) -> None:
    """A scheme must be a .dai file and a network given for it a .net file."""
    if language_of(scheme_path) == "net":
        raise DaicError(
            f"{scheme_path} is a network; `daic run` takes a .dai scheme (pass a network with --net)",
            exit_code=2,
        )
    if language_of(scheme_path) != "dai":
        raise DaicError(f"{scheme_path} is not a .dai scheme: `daic run` takes one", exit_code=2)
    if net_override is not None and language_of(net_override) != "net":
        raise DaicError(f"--net takes a .net network file, not {net_override}", exit_code=2)


def _scheme_named(scheme_path: str, module, scheme_name: str | None) -> str:
    """The scheme to run: the one named, or the file's only one."""
    if not module.schemes:
        raise DaicError(f"{scheme_path} defines no scheme")
    if scheme_name is None:
        if len(module.schemes) > 1:
            names = ", ".join(module.schemes)
            raise DaicError(
                f"{scheme_path} defines several schemes ({names}); choose one with --scheme", exit_code=2
            )
        return next(iter(module.schemes))
    if scheme_name not in module.schemes:
        hint = did_you_mean(scheme_name, list(module.schemes))
        raise DaicError(
            f"{scheme_path} has no scheme {scheme_name!r}"
            + (f"; {hint}" if hint else "")
            + f" (it has {', '.join(module.schemes)})",
            exit_code=2,
        )
    return scheme_name


def _refuse_spaces(info: SchemeInfo) -> None:
    spaces = named_spaces(info.built.args)
    if spaces:
        names = ", ".join(name for name, _ in spaces)
        raise DaicError(
            f"scheme {info.node.name} holds search spaces ({names}): `daic tune` runs a study that chooses "
            "their values; `daic run` trains a scheme of single values",
            exit_code=2,
        )


def _with_network(scheme_path: str, info: SchemeInfo, module: Module, net_path: str) -> Plan:
    tree, network = load_network(net_path, info.built.args["data"])
    return Plan(scheme_path, info, module, net_path, tree, network)


def load_network(net_path: str, data: Built | None) -> tuple[A.NetFile, Network]:
    """The `.net` file at `net_path`, parsed and checked against the data set `data` (as a scheme or
    --dataset builds it: ImageFolder's arguments give its shape; None: the file's own annotations); a
    DaicError with its diagnostics when it does not fit."""
    source = read(net_path)
    if source.problem is not None:
        raise DaicError(f"{net_path} cannot be read", [source.problem])
    parsed = parse_net(source.text)
    network = analyze_for_data(parsed.tree, None if data is None else data.decl.dataset.for_args(data.args))
    problems = [replace(d, path=net_path) for d in (*parsed.diagnostics, *network.diagnostics)]
    if any(d.is_error for d in problems):
        what = "has errors" if data is None else f"does not fit {data.decl.name}"
        raise DaicError(f"{net_path} {what}", problems)
    return parsed.tree, network


def lowered(plan: Plan, seed: int | None = None) -> tuple[Scheme, nn.Module]:
    """The plan's runtime scheme and its network, seeded and IBP-initialised with the scheme's seed (or
    `seed`, which replaces it): what a run trains (benchmarks time the same thing through this)."""
    import torch

    from daic.runtime import ibp_init_

    scheme = lower_value(plan.scheme.built)
    if seed is not None:
        scheme.seed = seed
    torch.manual_seed(scheme.seed)
    model = ibp_init_(lower_network(plan.network), seed=scheme.seed)
    if scheme.weights is not None:
        _start_from(model, plan, scheme.weights)
    return scheme, model


def _start_from(model: nn.Module, plan: Plan, weights: str) -> None:
    """The scheme's `weights`: the checkpoint's network weights loaded into the network to train."""
    from pathlib import Path

    from daic.compiler.jobs.checkpoints import read_checkpoint, weights_mismatch

    path = Path(plan.scheme_path).parent / weights
    where = f"scheme {plan.scheme.node.name}: `weights`"
    if not path.is_file():
        raise DaicError(
            f"{where}: no checkpoint {path} (paths are relative to the scheme's file)", exit_code=2
        )
    state = read_checkpoint(path, f"correct {where}")
    saved = state.get("model", state)
    mismatch = weights_mismatch(model, saved)
    if mismatch is not None:
        raise DaicError(
            f"scheme {plan.scheme.node.name}: `weights` {weights} does not fit {plan.net_path}: {mismatch}",
            exit_code=2,
        )
    model.load_state_dict(saved)


def definition(plan: Plan, scheme: Scheme) -> dict[str, object]:
    """What the run computes, by meaning: each field of the scheme as its checked value (the command
    line's --seed in place of the scheme's), and the network's layers in canonical form. Comments, layout,
    lets and the paths of the files do not count; the epochs are recorded on their own (a run may be
    extended)."""
    fields = {name: repr(value) for name, value in plan.scheme.built.args.items()}
    fields["seed"] = repr(scheme.seed)
    for unrecorded in ("net", "epochs"):
        fields.pop(unrecorded, None)
    return {"scheme": fields, "net": _layer_lines(plan.net_tree.layers, 0)}


def changes(recorded: dict, current: dict[str, object]) -> list[str]:
    """What differs between the definition a run recorded and the current one, one item per field and per
    changed stretch of the network."""
    before, now = recorded.get("scheme"), current["scheme"]
    before = before if isinstance(before, dict) else {}
    found = [
        f"{name}: was {before.get(name, 'unset')}, now {now.get(name, 'unset')}"
        for name in dict.fromkeys([*before, *now])
        if before.get(name) != now.get(name)
    ]
    old_net, new_net = recorded.get("net"), current["net"]
    old_net = old_net if isinstance(old_net, list) else []
    matcher = difflib.SequenceMatcher(a=old_net, b=new_net, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            was = "; ".join(line.strip() for line in old_net[a0:a1]) or "nothing"
            now_text = "; ".join(line.strip() for line in new_net[b0:b1]) or "nothing"
            found.append(f"network, layer {a0 + 1}: was `{was}`, now `{now_text}`")
    return found


def _layer_lines(layers: tuple[A.Layer, ...], depth: int) -> list[str]:
    lines = []
    for layer in layers:
        lines.append(INDENT * depth + layer_text(layer))
        lines.extend(_layer_lines(layer.body, depth + 1))
    return lines
