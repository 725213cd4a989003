"""`daic verify --vnnlib`: properties written by hand on a network daic did not write (an ONNX file made with
onnx's helpers), answered as VNN-COMP expects: `unsat`, `sat` with a witness that satisfies the property
in the network onnxruntime runs, `unknown` or `timeout`; a folder and an `instances.csv`; the record and
`--resume`; and each option or file that does not fit, a message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.commands.properties import Instance, Networks, decide
from daic.compiler.exchange.vnnlib_in import parse_property
from daic.runtime.certification.certify import Step

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
    import onnxruntime

    result = daic("verify", bench / "two.onnx", "--vnnlib", bench / "props" / "p2.vnnlib")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "sat"
    values = dict(re.findall(r"\((\w+) (\S+?)\)", result.stdout))
    assert sorted(values) == ["X_0", "X_1", "Y_0", "Y_1"]
    x = np.array([[float(values["X_0"]), float(values["X_1"])]], dtype=np.float32)
    assert np.all(x >= -0.5) and np.all(x <= 0.5)
    session = onnxruntime.InferenceSession(str(bench / "two.onnx"))
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
    """A complete step that ran out of time: it decides nothing."""

    label = "Search"
    complete = True
    timeout = 1.0

    def decide(self, model, batch, pending):
        pass


def test_a_complete_step_that_decides_nothing_is_a_timeout_and_an_incomplete_one_unknown(bench):
    prop_ = parse_property((bench / "props" / "p1.vnnlib").read_text())
    instance = Instance(str(bench / "two.onnx"), bench / "props" / "p1.vnnlib", 5.0)
    certifier = Networks(None, torch.device("cpu")).get(instance.network)
    assert decide(instance, prop_, certifier, [Undecided()], 0)["result"] == "timeout"
    Undecided.complete = False
    try:
        assert decide(instance, prop_, certifier, [Undecided()], 0)["result"] == "unknown"
    finally:
        Undecided.complete = True


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
