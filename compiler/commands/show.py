"""`daic show`: a network as a table, one row per layer (branches indented), with each layer's output shape,
neurons (ReLU outputs) and parameters, and the totals."""

from __future__ import annotations

from rich.table import Table

from daic.compiler.checking.network import LayerNode, Network, Node
from daic.dsl import ast as A
from daic.dsl.format import layer_text

INDENT = "    "


def shape_text(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "×".join(str(s) for s in shape)


def _count(value: int) -> str:
    return f"{value:,}" if value else ""


def _describe(layer: A.Layer) -> str:
    shown = A.Layer(layer.kind, tuple(p for p in layer.params if p.name != "input_shape"))
    return layer_text(shown)


def _rows(nodes: list[Node], depth: int) -> list[tuple[str, str, str, str]]:
    rows = []
    for node in nodes:
        pad = INDENT * depth
        if isinstance(node, LayerNode):
            rows.append(
                (
                    pad + _describe(node.layer),
                    shape_text(node.out_shape),
                    _count(node.neurons),
                    _count(node.params),
                )
            )
            continue
        first, second, closer = node.heads
        for head, branch, out in zip((first, second), node.branches, node.branch_shapes, strict=True):
            label = head.kind + ("" if branch else "  (identity)")
            rows.append((pad + label, shape_text(out), "", ""))
            rows.extend(_rows(branch, depth + 1))
        rows.append((pad + _describe(closer), shape_text(node.out_shape), "", ""))
    return rows


def network_table(network: Network, title: str) -> Table:
    table = Table(title=title, title_justify="left", show_footer=True)
    table.add_column("Layer", footer="Total", no_wrap=True)
    table.add_column("Output (C×H×W)", footer=shape_text(network.output_shape))
    table.add_column("Neurons", justify="right", footer=f"{network.neurons:,}")
    table.add_column("Params", justify="right", footer=f"{network.params:,}")
    table.add_row("input", shape_text(network.input_shape), "", "")
    for row in _rows(network.nodes, 0):
        table.add_row(*row)
    return table
