"""Device discipline, checked without a GPU: every tensor that `runtime/` and `compiler/` make either takes
the device of what it meets or says why the CPU is right.

A tensor factory (`torch.zeros`, `torch.tensor`, `torch.arange`, `torch.rand`, ...) passes when it is
given `device=`, when it is made inside `to_device(...)` (a draw from a CPU generator, so that runs
reproduce on any device, moved where it is used), or when a `# CPU: why` comment stands on its statement's
lines or the line above. Anything else makes a CPU tensor that a CUDA run meets on the GPU."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = {
    "zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "linspace", "logspace", "eye",
    "rand", "randn", "randint", "randperm", "normal", "bernoulli", "tril_indices", "triu_indices",
}  # fmt: skip
MARKER = "# CPU:"


def _factory(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
        and node.func.attr in FACTORIES
    )


def _explained(lines: list[str], first: int, end: int) -> bool:
    """Whether a `# CPU:` comment stands on the statement's lines (`first` to `end`, from 0) or heads the
    lines it belongs to: above it, with no blank line between, and no line indented less but the heads
    of the blocks the statement stands in."""
    if any(MARKER in line for line in lines[first:end]):
        return True
    indent = len(lines[first]) - len(lines[first].lstrip())
    for line in reversed(lines[:first]):
        depth = len(line) - len(line.lstrip())
        if not line.strip() or (depth < indent and not line.rstrip().endswith(":")):
            return False
        if MARKER in line:
            return True
        indent = min(indent, depth)  # out through the head of the block (`if ...:`) it stands in
    return False


def undisciplined(path: Path, root: Path = ROOT) -> list[str]:
    """The factories of one file that neither take a device nor say why the CPU is right."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text)
    moved: set[int] = set()  # ids of calls made inside to_device(...)
    statements: dict[int, ast.stmt] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", "")) == "to_device"
        ):
            moved.update(id(inner) for arg in node.args[:1] for inner in ast.walk(arg))
        if isinstance(node, ast.stmt):  # walked outermost first: inner statements overwrite
            for child in ast.iter_child_nodes(node):
                for inner in ast.walk(child):
                    if not isinstance(inner, ast.stmt):
                        statements[id(inner)] = node
    found = []
    for node in ast.walk(tree):
        if not _factory(node) or id(node) in moved or any(k.arg == "device" for k in node.keywords):
            continue
        statement = statements.get(id(node), node)
        if _explained(lines, statement.lineno - 1, statement.end_lineno):
            continue
        found.append(f"{path.relative_to(root)}:{node.lineno}: torch.{node.func.attr} without a device")
    return found


def test_every_tensor_factory_takes_a_device_or_says_why_the_cpu_is_right():
    files = sorted([*ROOT.glob("runtime/**/*.py"), *ROOT.glob("compiler/**/*.py")])
    assert [problem for path in files for problem in undisciplined(path)] == []


def test_the_scan_finds_a_bare_factory_and_accepts_the_three_ways(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "import torch\n"
        "a = torch.zeros(3)\n"
        "b = torch.zeros(3, device=x.device)\n"
        "c = to_device(torch.rand(3, generator=g) < 0.5, x.device)\n"
        "# CPU: an index of host-side bookkeeping\n"
        "d = torch.arange(\n    4\n)\n"
        "d2 = torch.arange(5)\n"
        "e = f(torch.tensor([1]))  # CPU: read back on the host at once\n"
        "\n"
        "g = torch.ones(2)\n"
    )
    assert undisciplined(source, tmp_path) == [
        "example.py:2: torch.zeros without a device",
        "example.py:12: torch.ones without a device",
    ]
