"""Random networks and properties, decided beside exact answers: every `sat` witness holds in rational
arithmetic of the stored weights and in onnxruntime at zero tolerance, no `unsat` where a sampled point
violates the property, and no early stop on a clear violation. The properties include single-point boxes
whose constraint is a tie or lies 2^-60 either side of the network's exact value there."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from daic.compiler.exchange.vnnlib_in import parse_property
from daic.compiler.jobs.properties import Instance, Networks, decide, default_domains
from daic.compiler.jobs.verify import cascade_of

torch.set_num_threads(1)
SIZES = (3, 8, 8, 2)


def random_network(path: Path, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A float32 ReLU network of `SIZES` as ONNX (Gemm and Relu nodes); its layers' weights and biases."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    generator = np.random.default_rng(seed)
    layers = [(generator.normal(size=(m, n)).astype(np.float32), generator.normal(size=m).astype(np.float32))
              for n, m in itertools.pairwise(SIZES)]  # fmt: skip
    nodes, arrays, value = [], [], "x"
    for k, (w, b) in enumerate(layers):
        arrays += [numpy_helper.from_array(w, f"w{k}"), numpy_helper.from_array(b, f"b{k}")]
        nodes.append(helper.make_node("Gemm", [value, f"w{k}", f"b{k}"], [f"h{k}"], transB=1))
        value = f"h{k}"
        if k < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [value], [f"r{k}"]))
            value = f"r{k}"
    nodes.append(helper.make_node("Identity", [value], ["y"]))
    ends = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, k]) for n, k in (("x", 3), ("y", 2))]
    graph = helper.make_graph(nodes, "random", ends[:1], ends[1:], arrays)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return layers


def exact_outputs(layers, x: list[Fraction]) -> list[Fraction]:
    """The network at `x` in rational arithmetic of its float32 weights."""
    value = x
    for k, (w, b) in enumerate(layers):
        value = [sum((Fraction(float(wi)) * v for wi, v in zip(row, value, strict=True)), Fraction(float(bi)))
                 for row, bi in zip(w, b, strict=True)]  # fmt: skip
        if k < len(layers) - 1:
            value = [max(v, Fraction(0)) for v in value]
    return value


def decimal(value: Fraction) -> str:
    """The exact decimal of a binary fraction (VNN-LIB reads decimals exactly)."""
    from decimal import Decimal, localcontext

    with localcontext() as context:
        context.prec = 400
        return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


def write_property(path: Path, lower: list[Fraction], upper: list[Fraction], gap: Fraction) -> Path:
    """A counterexample: a point of the box where y_0 - y_1 <= gap."""
    lines = [f"(declare-const X_{i} Real)" for i in range(3)] + [
        "(declare-const Y_0 Real)",
        "(declare-const Y_1 Real)",
    ]
    for i, (lo, hi) in enumerate(zip(lower, upper, strict=True)):
        lines += [f"(assert (>= X_{i} {decimal(lo)}))", f"(assert (<= X_{i} {decimal(hi)}))"]
    lines.append(f"(assert (<= (- Y_0 Y_1) {decimal(gap)}))")
    path.write_text("\n".join(lines) + "\n")
    return path


def cases(tmp_path: Path):
    """(network path, layers, property path, box, gap) for each generated property: on single points, a tie
    and 2^-60 either side; on boxes, a violation of 1e-6 at a grid point, a clear one, and (likely)
    none."""
    generator = np.random.default_rng(0)
    for seed in range(6):
        net = tmp_path / f"n{seed}.onnx"
        layers = random_network(net, seed)
        point = [Fraction(float(v)) for v in generator.uniform(-1, 1, size=3).astype(np.float32)]
        y = exact_outputs(layers, point)
        near = [v - Fraction(1, 8) for v in point], [v + Fraction(1, 8) for v in point]
        least = Fraction(sampled_margins(layers, *near).min())
        boxes = [((point, point), name, y[0] - y[1] + shift) for name, shift in
                 (("tie", 0), ("above", Fraction(1, 2**60)), ("below", -Fraction(1, 2**60)))]  # fmt: skip
        gaps = (("near", least + Fraction(1, 10**6)), ("far", y[0] - y[1] + 1), ("low", least - 2))
        boxes += [(near, name, gap) for name, gap in gaps]
        for (lower, upper), name, gap in boxes:
            path = write_property(tmp_path / f"{seed}-{name}.vnnlib", lower, upper, gap)
            yield net, layers, path, lower, upper, gap


def sampled_margins(layers, lower, upper) -> np.ndarray:
    """y_0 - y_1 in float64 at the points of a grid over the box."""
    axes = [np.linspace(float(lo), float(hi), 9) for lo, hi in zip(lower, upper, strict=True)]
    value = np.stack(np.meshgrid(*axes), -1).reshape(-1, 3).T
    for k, (w, b) in enumerate(layers):
        value = w.astype(np.float64) @ value + b.astype(np.float64)[:, None]
        value = np.maximum(value, 0) if k < len(layers) - 1 else value
    return value[0] - value[1]


def sampled_violation(layers, lower, upper, gap) -> bool:
    """Whether a point of a grid over the box violates the property by more than 1e-9, in float64."""
    return bool((sampled_margins(layers, lower, upper) <= float(gap) - 1e-9).any())


def test_random_properties_get_no_wrong_answer_and_every_witness_holds_exactly_and_in_onnxruntime(tmp_path):
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    networks = Networks(None, torch.device("cpu"))
    answers = []
    for net, layers, path, lower, upper, gap in cases(tmp_path):
        certifier = networks.get(str(net))
        steps = cascade_of(default_domains(certifier), True)
        row = decide(Instance(str(net), path, 2.0), parse_property(path.read_text()), certifier, steps, 0)
        answers.append(row["result"])
        single = lower == upper
        y = exact_outputs(layers, lower) if single else None
        if row["result"] == "sat":
            x = row["witness"]["X"]
            assert all(float(np.float32(v)) == v for v in x), path.name  # float32 numbers
            exact_x = [Fraction(v) for v in x]
            assert all(lo <= v <= hi for v, lo, hi in zip(exact_x, lower, upper, strict=True)), path.name
            exact_y = exact_outputs(layers, exact_x)
            assert exact_y[0] - exact_y[1] <= gap, path.name  # in rational arithmetic
            (checked,) = onnxruntime_session(net).run(None, {"x": np.array([x], dtype=np.float32)})[0]
            assert Fraction(float(checked[0])) - Fraction(float(checked[1])) <= gap, path.name  # no tolerance
        elif row["result"] == "unsat":
            assert not (single and y[0] - y[1] <= gap), path.name
            assert not sampled_violation(layers, lower, upper, gap), path.name
        if not single and not path.name.endswith(
            "low.vnnlib"
        ):  # a violation of 1e-6 is found, not stopped early
            assert row["result"] == "sat", (path.name, row)
    assert answers.count("sat") >= 12 and "unsat" in answers, answers
