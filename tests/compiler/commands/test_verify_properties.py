"""`daic verify --vnnlib`: properties written by hand on a network daic did not write (an ONNX file made with
onnx's helpers), answered as VNN-COMP expects: `unsat`, `sat` with a witness that satisfies the property
in the network onnxruntime runs, `unknown` or `timeout`; a folder and an `instances.csv`; the record and
`--resume`; and each option or file that does not fit, a message."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.exchange.vnnlib_in import parse_property
from daic.compiler.jobs.properties import Instance, Networks, decide
from daic.runtime.certification.certify import Step
from daic.runtime.certification.verification import BoxBound

torch.set_num_threads(1)


def two_by_two(path: Path) -> Path:
    """y = relu(W x + 2) with W = [[1, 1], [1, -1]]: on [-0.5, 0.5]^2 both ReLUs are active, so
    y_0 - y_1 = 2 x_1 exactly, in [-1, 1]; intervals, blind to that, give [-2, 2]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.array([[1.0, 1.0], [1.0, -1.0]], dtype=np.float32), "w")
    bias = numpy_helper.from_array(np.array([2.0, 2.0], dtype=np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, name="fc"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [weight, bias],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def prop(path: Path, gap: str) -> Path:
    """A counterexample: a point of [-0.5, 0.5]^2 where y_1 - y_0 >= gap."""
    path.write_text(
        "; y_1 exceeds y_0 by the gap\n(declare-const X_0 Real)\n(declare-const X_1 Real)\n"
        "(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n(assert (>= X_0 -0.5))\n(assert (<= X_0 0.5))\n"
        f"(assert (>= X_1 -0.5))\n(assert (<= X_1 0.5))\n(assert (>= (- Y_1 Y_0) {gap}))\n"
    )
    return path


@pytest.fixture
def bench(tmp_path):
    two_by_two(tmp_path / "two.onnx")
    (tmp_path / "props").mkdir()
    prop(tmp_path / "props" / "p1.vnnlib", "1.5")  # the gap is at most 1: unsat
    prop(tmp_path / "props" / "p2.vnnlib", "0.5")  # x_1 = -0.5 makes it 1: sat
    return tmp_path


def daic(*arguments: str):
    return CliRunner().invoke(main, [str(a) for a in arguments])


def test_an_unsatisfiable_property_is_unsat_and_the_answer_alone_is_on_stdout(bench):
    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props" / "p1.vnnlib")
    assert result.exit_code == 0, result.output
    assert result.stdout == "unsat\n"
    assert re.search(r"p1.vnnlib: unsat by CROWN in [0-9.e-]+ s", result.stderr)
    (row,) = [json.loads(line) for line in (bench / "props" / "p1.verify.jsonl").read_text().splitlines()]
    assert (row["status"], row["result"], row["domain"]) == ("verified", "unsat", "CROWN")
    assert row["margin"] == pytest.approx(0.5, abs=1e-9)  # min of y_0 - y_1 + 1.5, exact for CROWN here


def test_intervals_alone_leave_it_unknown(bench):
    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props" / "p1.vnnlib", "--domain", "box",
                  "--no-attack", "--out", bench / "box.jsonl")  # fmt: skip
    assert result.exit_code == 0 and result.stdout == "unknown\n"
    (row,) = [json.loads(line) for line in (bench / "box.jsonl").read_text().splitlines()]
    assert row["margin"] == pytest.approx(-0.5, abs=1e-9)  # intervals: y_0 - y_1 >= -2


def test_a_satisfiable_property_is_sat_with_a_witness_onnxruntime_confirms(bench):
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props" / "p2.vnnlib")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "sat"
    values = dict(re.findall(r"\((\w+) (\S+?)\)", result.stdout))
    assert sorted(values) == ["X_0", "X_1", "Y_0", "Y_1"]
    x = np.array([[float(values["X_0"]), float(values["X_1"])]], dtype=np.float32)
    assert np.all(x >= -0.5) and np.all(x <= 0.5)
    session = onnxruntime_session(bench / "two.onnx")
    y = session.run(None, {"x": x})[0][0]
    assert y[1] - y[0] >= 0.5 - 1e-6
    assert y == pytest.approx([float(values["Y_0"]), float(values["Y_1"])], abs=1e-6)


def test_a_folder_and_an_instances_file_give_a_table_and_a_record_that_resumes(bench):
    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["properties"], summary["unsat"], summary["sat"], summary["timeout"]) == (2, 1, 1, 0)
    assert summary["cascade"] == ["Box", "PGD", "CROWN", "InputSplit"]  # two inputs: split the box
    record = bench / "props.verify.jsonl"
    assert [json.loads(line)["result"] for line in record.read_text().splitlines()] == ["unsat", "sat"]
    again = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props")
    assert again.exit_code == 2 and "already holds a record: pass --resume" in again.stderr
    resumed = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props", "--resume")
    assert resumed.exit_code == 0 and "│ unsat      │ 1 (50.00%) │" in resumed.stdout
    (bench / "instances.csv").write_text("two.onnx,props/p1.vnnlib,30\ntwo.onnx,props/p2.vnnlib,30\n")
    listed = daic("verify", "--vnnlib", bench / "instances.csv", "--format", "json")
    assert listed.exit_code == 0, listed.output
    assert (json.loads(listed.stdout)["unsat"], json.loads(listed.stdout)["sat"]) == (1, 1)
    named = daic("verify", bench / "two.onnx", "--vnnlib", bench / "instances.csv")
    assert named.exit_code == 2 and "names the network of each property: omit NET" in named.stderr


def test_an_imported_network_certifies_the_same_from_its_net_file(bench):
    assert daic("import", bench / "two.onnx").exit_code == 0
    result = daic(
        "verify", bench / "two.net", "--weights", bench / "two.pt", "--vnnlib", bench / "props" / "p1.vnnlib"
    )
    assert result.exit_code == 0 and result.stdout == "unsat\n"
    bare = daic("verify", bench / "two.net", "--vnnlib", bench / "props" / "p1.vnnlib")
    assert bare.exit_code == 2 and "pass its weights with --weights" in bare.stderr


class Undecided(Step):
    """A complete step that decides nothing: it runs out of time (`out_of_time`), or ends early with a
    reason."""

    label = "Search"
    complete = True
    timeout = 1.0
    out_of_time = True

    def decide(self, model, batch, pending):
        for i in pending.tolist():
            batch.outcomes[i].timed_out = self.out_of_time
            batch.outcomes[i].message = None if self.out_of_time else "Search: nothing left to split"


def test_a_search_out_of_time_is_a_timeout_one_that_ends_early_says_why_and_neither_gives_a_point(bench):
    prop_ = parse_property((bench / "props" / "p1.vnnlib").read_text())
    instance = Instance(str(bench / "two.onnx"), bench / "props" / "p1.vnnlib", 5.0)
    certifier = Networks(None, torch.device("cpu")).get(instance.network)
    row = decide(instance, prop_, certifier, [BoxBound(), Undecided()], 0)
    assert (row["result"], row["reason"]) == ("timeout", "no step of the cascade could decide it")
    assert row["margin"] == pytest.approx(-0.5, abs=1e-9)  # Box's lower bound, not a point's value
    early = Undecided()
    early.out_of_time = False
    row = decide(instance, prop_, certifier, [BoxBound(), early], 0)
    assert (row["result"], row["reason"]) == ("unknown", "Search: nothing left to split")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--eps", "0.1"], "--eps: a property states its own inputs; omit these with --vnnlib"),
        (["--limit", "3"], "--limit: a property states its own inputs"),
        (["--weights", "w.pt"], "two.onnx holds its weights: omit --weights"),
    ],
)
def test_options_of_a_test_set_do_not_mix_with_properties(bench, extra, message):
    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props" / "p1.vnnlib", *extra)
    assert result.exit_code == 2 and message in result.stderr


def test_a_property_that_does_not_fit_the_network_or_cannot_be_read_is_a_message(bench):
    wide = bench / "wide.vnnlib"
    wide.write_text("".join(f"(declare-const X_{i} Real)\n(assert (<= 0 X_{i} ))\n(assert (<= X_{i} 1))\n"
                            for i in range(3)) + "(declare-const Y_0 Real)\n")  # fmt: skip
    result = daic("verify", bench / "two.onnx", "--vnnlib", wide)
    assert result.exit_code == 2
    assert f"{wide} declares 3 inputs and 1 outputs; {bench / 'two.onnx'} has 2 and 2" in result.stderr
    broken = bench / "broken.vnnlib"
    broken.write_text("(declare-const X_0 Real)\n(assert (<= X_0 1)\n")
    result = daic("verify", bench / "two.onnx", "--vnnlib", broken)
    assert result.exit_code == 2 and f"{broken}:2: an expression is never closed" in result.stderr
    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "none.vnnlib")
    assert result.exit_code == 2 and "none.vnnlib does not exist" in result.stderr


def gemm_relu_gemm(path: Path, arrays: dict[str, Any]) -> Path:
    """y = v relu(w x + b) + c, float32 weights, input and output with a batch axis of 1."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.array(a, dtype=np.float32), n) for n, a in arrays.items()]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "v", "c"], ["y"], transB=1)]  # fmt: skip
    ends = [("x", np.shape(arrays["w"])[1]), ("y", np.shape(arrays["v"])[0])]
    inputs, outputs = ([helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, k])] for n, k in ends)
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def offset_onnx(path: Path, offset: float) -> Path:
    """One input, one output: y = relu(x + offset) - 1 (offset a float32 number)."""
    assert float(np.float32(offset)) == offset
    return gemm_relu_gemm(path, {"w": [[1.0]], "b": [offset], "v": [[1.0]], "c": [-1.0]})


def point_property(path: Path, constraint: str) -> Path:
    """The box of the single point x = 1, and a counterexample's output `constraint`."""
    path.write_text(
        "(declare-const X_0 Real)\n(declare-const Y_0 Real)\n(assert (>= X_0 1.0))\n(assert (<= X_0 1.0))\n"
        f"(assert {constraint})\n"
    )
    return path


def exact_decimal(value: float) -> str:
    from decimal import Decimal

    return format(Decimal(value), "f")


@pytest.mark.parametrize(
    ("offset", "constraint"),
    [
        # exactly y = 2^-70 > 2^-71: the property holds; float64 and float32 compute y = 0
        (2.0**-70, f"(<= Y_0 {exact_decimal(2.0**-71)})"),
        # exactly y = -2^-30 <= -2^-31: violated; but float32 (onnxruntime) computes y = 0, so no witness
        (-(2.0**-30), f"(<= Y_0 {exact_decimal(-(2.0**-31))})"),
    ],
)
def test_a_point_that_fails_exact_arithmetic_or_the_float32_checker_is_not_sat(tmp_path, offset, constraint):
    net = offset_onnx(tmp_path / "offset.onnx", offset)
    result = daic(
        "verify", net, "--vnnlib", point_property(tmp_path / "p.vnnlib", constraint), "--timeout", "3"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout in ("unknown\n", "timeout\n")
    (row,) = [json.loads(line) for line in (tmp_path / "p.verify.jsonl").read_text().splitlines()]
    assert row["reason"] and "witness" not in row


def test_a_clear_violation_is_sat_and_the_record_says_who_checked_the_witness(tmp_path):
    net = offset_onnx(tmp_path / "offset.onnx", -(2.0**-10))
    result = daic("verify", net, "--vnnlib", point_property(tmp_path / "p.vnnlib", "(<= Y_0 0.0)"))
    assert result.exit_code == 0 and result.stdout.startswith("sat\n"), result.output
    (row,) = [json.loads(line) for line in (tmp_path / "p.verify.jsonl").read_text().splitlines()]
    assert row["witness"] == {"X": [1.0], "Y": [-(2.0**-10)]} and row["checked"] == "onnxruntime float32"


def test_an_instance_that_cannot_be_imported_is_its_own_error_and_the_others_are_answered(bench):
    (bench / "broken.onnx").write_bytes(b"not a network")
    (bench / "instances.csv").write_text(
        "two.onnx,props/p1.vnnlib,30\nbroken.onnx,props/p1.vnnlib,30\ntwo.onnx,props/p2.vnnlib,30\n"
        "two.onnx,props/missing.vnnlib,30\n"
    )
    result = daic("verify", "--vnnlib", bench / "instances.csv", "--format", "json")
    assert result.exit_code == 1, result.output
    assert "2 of the instances could not be decided" in result.stderr
    rows = [json.loads(line) for line in (bench / "instances.verify.jsonl").read_text().splitlines()]
    assert [row["result"] for row in rows] == ["unsat", "error", "sat", "error"]
    assert "broken.onnx" in rows[1]["message"] and "missing.vnnlib" in rows[3]["message"]
    assert json.loads(result.stdout)["errors"] == 2


def test_the_default_cascade_bounds_by_crown_before_branch_and_bound_on_a_small_network(tmp_path):
    from daic.compiler.jobs.properties import default_domains

    generator = np.random.default_rng(0)
    shapes = {"w": (16, 64), "b": (16,), "v": (2, 16), "c": (2,)}
    gemm_relu_gemm(tmp_path / "w.onnx", {n: generator.normal(size=shape) for n, shape in shapes.items()})
    certifier = Networks(None, torch.device("cpu")).get(str(tmp_path / "w.onnx"))
    assert default_domains(certifier) == ("Box", "CROWN", "BranchAndBound")


def test_most_inputs_fixed_and_a_two_sided_output_band_is_sat_well_before_the_limit(tmp_path):
    # The shape of VNN-COMP 2022's collins_rul_cnn properties, where daic ended `timeout` early: most inputs
    # fixed (here at float32 numbers written in decimal, as a data set's values are), two free, and a
    # counterexample's output in a narrow band a <= Y_0 <= b that a point of the free square reaches.
    generator = np.random.default_rng(3)
    shapes = {"w": (16, 40), "b": (16,), "v": (1, 16), "c": (1,)}
    arrays = {n: generator.normal(size=shape).astype(np.float32) for n, shape in shapes.items()}
    net = gemm_relu_gemm(tmp_path / "rul.onnx", arrays)
    fixed = generator.uniform(0, 1, size=38).astype(np.float32)
    x = np.concatenate([[0.37, 0.61], fixed]).astype(np.float32)
    w, b, v, c = (arrays[n].astype(np.float64) for n in "wbvc")
    centre = float((v @ np.maximum(w @ x.astype(np.float64) + b, 0) + c)[0])
    lines = [f"(declare-const X_{i} Real)" for i in range(40)] + ["(declare-const Y_0 Real)"]
    lines += [
        "(assert (>= X_0 0.0))",
        "(assert (<= X_0 1.0))",
        "(assert (>= X_1 0.0))",
        "(assert (<= X_1 1.0))",
    ]
    for i, value in enumerate(fixed.tolist(), 2):
        lines += [f"(assert (>= X_{i} {value!r}))", f"(assert (<= X_{i} {value!r}))"]
    lines += [f"(assert (>= Y_0 {centre - 1e-3!r}))", f"(assert (<= Y_0 {centre + 1e-3!r}))"]
    (tmp_path / "band.vnnlib").write_text("\n".join(lines) + "\n")
    result = daic("verify", net, "--vnnlib", tmp_path / "band.vnnlib", "--timeout", "20")
    assert result.exit_code == 0 and result.stdout.startswith("sat\n"), result.output
    (row,) = [json.loads(line) for line in (tmp_path / "band.verify.jsonl").read_text().splitlines()]
    assert row["seconds"] < 10, row
    from daic.compiler.exchange.onnx_runtime import onnxruntime_session

    point = np.array([row["witness"]["X"]], dtype=np.float32)
    assert point[0, 2:].tolist() == fixed.tolist()
    (y,) = onnxruntime_session(net).run(None, {"x": point})[0]
    assert centre - 1e-3 <= float(y[0]) <= centre + 1e-3


def test_a_box_that_holds_no_float32_point_is_unknown_and_says_so(tmp_path):
    # X_0 = 0.1: the float64 nearest 0.1 is no float32 number, so no input a checker can be given is in the
    # box, although every output violates the property.
    net = offset_onnx(tmp_path / "offset.onnx", 0.0)
    text = point_property(tmp_path / "p.vnnlib", "(<= Y_0 100.0)").read_text().replace("1.0))", "0.1))")
    (tmp_path / "p.vnnlib").write_text(text)
    result = daic("verify", net, "--vnnlib", tmp_path / "p.vnnlib", "--timeout", "3")
    assert result.exit_code == 0 and result.stdout == "unknown\n", result.output
    (row,) = [json.loads(line) for line in (tmp_path / "p.verify.jsonl").read_text().splitlines()]
    assert row["reason"].startswith("X_0 lies in [0.1, 0.1] (as read), which holds no float32 number")


def test_a_network_without_parameters_is_certified(tmp_path):
    # VNN-COMP 2021's test_nano: y = relu(x / 2), a Normalize and a ReLU, nothing trained; it raised
    # StopIteration where the cascade looked for a parameter to learn the network's device and dtype.
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    half = numpy_helper.from_array(np.array([0.5], dtype=np.float32), "half")
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    ends = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1]) for n in "xy"]
    graph = helper.make_graph(nodes, "nano", ends[:1], ends[1:], [half])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "nano.onnx")
    )
    box = "(declare-const X_0 Real)\n(declare-const Y_0 Real)\n(assert (>= X_0 -1))\n(assert (<= X_0 1))\n"
    (tmp_path / "unsat.vnnlib").write_text(box + "(assert (<= Y_0 -1))\n")
    (tmp_path / "sat.vnnlib").write_text(box + "(assert (>= Y_0 0.25))\n")
    unsat = daic("verify", tmp_path / "nano.onnx", "--vnnlib", tmp_path / "unsat.vnnlib")
    assert unsat.exit_code == 0 and unsat.stdout == "unsat\n", unsat.output
    sat = daic("verify", tmp_path / "nano.onnx", "--vnnlib", tmp_path / "sat.vnnlib")
    assert sat.exit_code == 0 and sat.stdout.startswith("sat\n"), sat.output
