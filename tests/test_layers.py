"""The package's layering: no module imports, even inside a function, one that imports it back; the library
(`daic.api` and the work behind it, `compiler/jobs/`) never reaches for the command line; and each option
a message may name has its keyword in the API. (Imports under `if TYPE_CHECKING:` are annotations, not
dependencies, and are left out.)"""

import ast
import inspect
from pathlib import Path

import click

from daic import api
from daic.compiler.commands.cli import main
from daic.errors import PYTHON_TERMS

ROOT = Path(__file__).parents[1]
PACKAGES = {"daic": "daic", "daic.dsl": "dsl", "daic.compiler": "compiler", "daic.runtime": "runtime"}


def _modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [
                part for part in path.relative_to(ROOT / folder).with_suffix("").parts if part != "__init__"
            ]
            found[".".join([package, *parts])] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                      for a in node.names}  # fmt: skip
        elif isinstance(node, ast.Import):
            named |= {a.name for a in node.names}
    return {name for name in named if name in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter = counter + 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter = counter + 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read_from_the_sources():
    graph = _graph()
    assert {"daic.compiler.jobs.test_set", "daic.compiler.jobs.export"} <= graph["daic.api"]
    assert "daic.api" in graph["daic.compiler.commands.check"]
    # the walker finds a circle where there is one
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    assert _circles(_graph()) == []


def test_the_library_never_imports_the_command_line():
    graph = _graph()
    library = [name for name in graph if name == "daic.api" or name.startswith("daic.compiler.jobs")]
    reached = {
        (name, used) for name in library for used in graph[name] if used.startswith("daic.compiler.commands")
    }
    assert reached == set()


def test_each_option_a_message_names_is_an_option_of_a_command_and_a_keyword_of_the_api():
    options = {
        opt for command in main.commands.values() for param in command.params
        if isinstance(param, click.Option) for opt in param.opts
    }  # fmt: skip
    keywords = {name for function in vars(api).values() if inspect.isfunction(function)
                for name in inspect.signature(function).parameters}  # fmt: skip
    for option, term in PYTHON_TERMS.items():
        assert option in options, f"{option} is no option of any command"
        assert term.split("=")[0] in keywords, f"{term} is no keyword of daic.api"
