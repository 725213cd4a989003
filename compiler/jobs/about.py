"""What daic runs on: the versions of daic, Python, torch and CUDA, the git commit of daic's sources, and
the host. `daic --version` prints it and every run records it in run.json.

Nothing here imports torch (`daic --version` must answer at once): torch's version comes from its package
metadata, and the CUDA version it was built for from its generated `torch/version.py`, read as text.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import platform
import subprocess
from pathlib import Path

from daic.version import __version__


def environment() -> dict[str, str | None]:
    """The versions and the host, as run.json records them (None for what is absent)."""
    torch_version, cuda = _torch_build()
    return {
        "daic": __version__,
        "daic_commit": git_commit(Path(__file__).resolve().parent),
        "python": platform.python_version(),
        "torch": torch_version,
        "cuda": cuda,
        "host": platform.node() or None,
        "platform": platform.platform(),
    }


def version_text() -> str:
    about = environment()
    commit = f" (git {about['daic_commit'][:12]})" if about["daic_commit"] else ""
    cuda = f", CUDA {about['cuda']}" if about["cuda"] else ", no CUDA"
    torch = f"torch {about['torch']}{cuda}" if about["torch"] else "torch not installed"
    return (
        f"daic {about['daic']}{commit}\n"
        f"Python {about['python']}, {torch}\n"
        f"host {about['host'] or 'unknown'} ({about['platform']})"
    )


def git_commit(folder: Path) -> str | None:
    """The commit checked out in the git repository holding `folder`, if it is in one."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None  # no git, or a repository too slow to answer
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _torch_build() -> tuple[str | None, str | None]:
    try:
        version = importlib.metadata.version("torch")
        spec = importlib.util.find_spec("torch")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None, None
    if spec is None or spec.origin is None:
        return version, None
    return version, _assigned(Path(spec.origin).parent / "version.py", "cuda")


def _assigned(path: Path, name: str) -> str | None:
    """The string constant assigned to `name` at the top of a Python file, without running it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            value = node.value
            return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
    return None
