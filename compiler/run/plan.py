"""Planning a run: the scheme and its network checked and resolved, before any tensor exists; and their
lowering to the runtime's scheme and network."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from daic.dsl.parser import parse_net

from ..check import check_source
from ..lower import lower_network, lower_value
from ..network import Network, analyze_net
from ..program import Module, Program, SchemeInfo
from ..sources import language_of, read
from .errors import RunError

if TYPE_CHECKING:  # the runtime (and torch) is imported only when a run starts
    from torch import nn

    from daic.runtime.scheme import Scheme


@dataclass
class Plan:
    """Everything checked and resolved, before any tensor exists."""

    scheme_path: str
    scheme: SchemeInfo
    module: Module
    net_path: str
    net_text: str
    network: Network


def plan_run(scheme_path: str, scheme_name: str | None, net_override: str | None) -> Plan:
    if language_of(scheme_path) == "net":
        raise RunError(
            f"{scheme_path} is a network; `daic run` takes a .dai scheme (pass a network with --net)",
            exit_code=2,
        )
    if net_override is not None and language_of(net_override) != "net":
        raise RunError(f"--net takes a .net network file, not {net_override}", exit_code=2)
    report = check_source(read(scheme_path), Program(check_nets=net_override is None))
    errors = [d for d in report.diagnostics if d.is_error]
    if errors or report.module is None:
        raise RunError(f"{scheme_path} has errors", list(report.diagnostics))
    module = report.module
    if not module.schemes:
        raise RunError(f"{scheme_path} defines no scheme")
    if scheme_name is None:
        if len(module.schemes) > 1:
            names = ", ".join(module.schemes)
            raise RunError(
                f"{scheme_path} defines several schemes ({names}); choose one with --scheme", exit_code=2
            )
        scheme_name = next(iter(module.schemes))
    if scheme_name not in module.schemes:
        raise RunError(
            f"{scheme_path} has no scheme {scheme_name!r} (it has {', '.join(module.schemes)})", exit_code=2
        )
    info = module.schemes[scheme_name]
    if net_override is not None:
        net_path = net_override
    elif info.net_path is not None:
        net_path = info.net_path
    else:
        raise RunError(
            f'scheme {scheme_name} names no network: add `net = "file.net"` or pass --net', exit_code=2
        )
    return _with_network(scheme_path, info, module, net_path)


def _with_network(scheme_path: str, info: SchemeInfo, module: Module, net_path: str) -> Plan:
    source = read(net_path)
    data = info.built.args["data"]
    facts = data.decl.facts
    parsed = parse_net(source.text) if source.problem is None else None
    if parsed is None:
        raise RunError(f"{net_path} cannot be read", [source.problem])
    network = analyze_net(parsed.tree, facts["shape"], facts["classes"])
    problems = [replace(d, path=net_path) for d in (*parsed.diagnostics, *network.diagnostics)]
    if any(d.is_error for d in problems):
        raise RunError(f"{net_path} does not fit {data.decl.name}", problems)
    return Plan(scheme_path, info, module, net_path, source.text, network)


def lowered(plan: Plan) -> tuple[Scheme, nn.Module]:
    """The plan's runtime scheme and its network, seeded and IBP-initialised with the scheme's seed: what a
    run trains (benchmarks time the same thing through this)."""
    import torch

    from daic.runtime import ibp_init_

    scheme = lower_value(plan.scheme.built)
    torch.manual_seed(scheme.seed)
    return scheme, ibp_init_(lower_network(plan.network), seed=scheme.seed)
