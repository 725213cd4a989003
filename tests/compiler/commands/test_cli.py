"""`daic check`, `daic fmt` and `daic explain` through click's runner: output format, exit codes."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from tests.paths import DATA, EXAMPLES, STDLIB

COMBO = DATA / "listings" / "skipnet18_combo.net"


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_check_clean_files_exit_0():
    result = run("check", DATA / "listings" / "resnet18_none.net", DATA / "listings" / "resnettiny_none.net")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr == "checked 2 files: no problems\n"


def test_check_reports_the_combo_listing_defects():
    result = run("check", "--format", "concise", COMBO)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{COMBO}:28:43: error[E009]: `%s` (4 times) is not a value",
        "  hint: a format placeholder the paper's printer left unfilled; write the numbers it stood for "
        "(Section 5.2 (Combo) gives bw=Until(90, Lin(0, 0.2, 50, 40), 0))",
        f"{COMBO}:28:66: error[E009]: `<function relu at 0x10b94d620>` is a printed Python object, "
        "not a value",
        "  hint: write the function's name: relu",
    ]
    assert result.stderr == "checked 1 file: 2 errors in 1 file\n"


def test_check_strict_select_and_ignore_choose_what_counts_as_ruffs_options_do(tmp_path):
    empty = tmp_path / "empty.net"
    empty.write_text("# the layers go here\n")  # W202
    broken = tmp_path / "broken.net"
    broken.write_text("Linear out=10 input_shape=[4]\nBogus\n")  # an error
    found = run("check", "--format", "concise", empty, broken)
    assert found.exit_code == 1 and found.stderr == "checked 2 files: 1 error and 1 warning in 2 files\n"
    assert run("check", empty).exit_code == 0  # a warning alone passes
    strict = run("check", "--strict", empty)
    assert (strict.exit_code, strict.stderr) == (1, "checked 1 file: 1 warning in 1 file\n")
    warnings = run("check", "--format", "concise", "--select", "W", empty, broken)
    assert warnings.exit_code == 0 and "W202" in warnings.stdout and "error[" not in warnings.stdout
    quiet = run("check", "--strict", "--ignore", "w2,E1", empty, broken)
    assert (quiet.exit_code, quiet.stderr) == (0, "checked 2 files: no problems\n")
    wrong = run("check", "--select", "X1", empty)
    assert wrong.exit_code == 2 and "--select X1: a code is E or W and up to three digits" in wrong.stderr


def test_text_format_underlines_the_span():
    result = run("check", COMBO)
    lines = result.stdout.splitlines()
    assert lines[1].startswith(" 28 | DeepLoss only_train=True")
    assert lines[2] == "    | " + " " * 42 + "^" * 11


def test_check_json_output():
    result = run("check", "--format", "json", COMBO)
    data = json.loads(result.stdout)
    assert [(d["line"], d["column"], d["end_column"], d["code"], d["severity"]) for d in data] == [
        (28, 43, 54, "E009", "error"),
        (28, 66, 96, "E009", "error"),
    ]
    assert data[1]["hint"] == "write the function's name: relu"


def test_check_walks_folders(tmp_path):
    shutil.copytree(DATA / "listings", tmp_path / "nets")
    (tmp_path / "nets" / "sub").mkdir()
    (tmp_path / "nets" / "sub" / "bad.dai").write_text("let x = (1\n")
    (tmp_path / "nets" / "notes.txt").write_text("ignored")
    # A run's folder holds copies of the sources it ran: not checked again with the folder around it.
    run_folder = tmp_path / "runs" / "r1"
    run_folder.mkdir(parents=True)
    (run_folder / "run.json").write_text("{}")
    (run_folder / "bad.dai").write_text("let x = (1\n")
    result = run("check", "--format", "concise", tmp_path)
    assert result.exit_code == 1
    assert result.stderr == "checked 10 files: 6 errors in 3 files\n"
    # Named itself, it is checked.
    result = run("check", "--format", "concise", run_folder)
    assert result.stderr == "checked 1 file: 1 error in 1 file\n"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.net", "no such file or folder"),
        (lambda p: p, "no .net or .dai files in this folder"),
        (lambda p: _touch(p / "notes.txt"), "not a .net or .dai file"),
    ],
)
def test_usage_errors_exit_2(tmp_path, make, message):
    target = make(tmp_path)
    result = run("check", target)
    assert result.exit_code == 2
    assert result.stderr == f"daic: {target}: {message}\n"


def test_check_without_paths_is_a_usage_error():
    assert run("check").exit_code == 2


def test_fmt_check_diff_and_write(tmp_path):
    source = tmp_path / "a.net"
    source.write_text("Conv2D, filters=4, kernel_size=[3,3]\nReLU\n")
    result = run("fmt", "--check", source)
    assert (result.exit_code, result.stdout) == (1, f"would reformat {source}\n")
    result = run("fmt", "--diff", source)
    assert result.exit_code == 1
    assert "-Conv2D, filters=4, kernel_size=[3,3]\n+Conv2D filters=4 kernel_size=[3, 3]\n" in result.stdout
    assert source.read_text() == "Conv2D, filters=4, kernel_size=[3,3]\nReLU\n"
    result = run("fmt", source)
    assert result.exit_code == 0
    assert source.read_text() == "Conv2D filters=4 kernel_size=[3, 3]\nReLU\n"
    assert run("fmt", "--check", source).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.net"]


def test_fmt_leaves_unparsable_files_alone(tmp_path):
    source = tmp_path / "b.dai"
    source.write_text("let x = (1\n")
    result = run("fmt", source)
    assert result.exit_code == 1
    assert "E005" in result.stderr
    assert source.read_text() == "let x = (1\n"


def test_explain():
    assert run("explain", "e009").stdout.startswith("E009: text printed in place of a value")
    assert "E001" in run("explain").stdout
    assert run("explain", "E999").exit_code == 2


def test_check_never_imports_torch():
    code = (
        "import sys; from daic.compiler.commands.cli import main\n"
        "try:\n    main(['check', sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(COMBO)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "error[E009]" in done.stdout


def test_fmt_reports_a_file_it_cannot_write(tmp_path, monkeypatch):
    path = tmp_path / "a.dai"
    path.write_text("let x = 1\n\n\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    result = CliRunner().invoke(main, ["fmt", str(path)])
    assert result.exit_code == 1
    assert f"daic: cannot write {path}: Permission denied" in result.stderr
    assert path.read_text() == "let x = 1\n\n\n"


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (KeyboardInterrupt(), 130, "interrupted before training began: run the same command again"),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: 256000000000 bytes"),
            1,
            "out of memory on cpu",
        ),
    ],
    ids=["interrupt", "memory"],
)
def test_run_failures_before_and_outside_training_are_messages(tmp_path, monkeypatch, raised, code, message):
    def fail(*args, **kwargs):
        raise raised

    monkeypatch.setattr("daic.compiler.jobs.run.execute", fail)
    scheme = EXAMPLES / "quickstart.dai"
    result = CliRunner().invoke(main, ["run", str(scheme), "--out", str(tmp_path / "r")])
    assert result.exit_code == code
    assert message in result.stderr and "Traceback" not in result.output


def test_check_goes_on_past_a_file_it_cannot_read(tmp_path, monkeypatch):
    (tmp_path / "bad.dai").write_text("let x = Mixx\n")
    (tmp_path / "locked.dai").write_text("let y = 1\n")
    read_bytes = Path.read_bytes

    def guarded(self):
        if self.name == "locked.dai":
            raise PermissionError(13, "Permission denied")
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", guarded)
    result = CliRunner().invoke(main, ["check", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1
    found = {(Path(d["path"]).name, d["code"], d["message"]) for d in json.loads(result.stdout)}
    assert ("locked.dai", "E014", "cannot read: Permission denied") in found
    assert any(name == "bad.dai" and code == "E101" for name, code, _ in found)


def git_head() -> str | None:
    """The commit of daic's checkout, asked of git here (None outside a repository, as in an sdist)."""
    done = subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


def test_version_names_what_daic_runs_on_without_importing_torch():
    code = (
        "import sys; from daic.compiler.commands.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit as exit:\n    assert exit.code == 0\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import platform
    from importlib.metadata import version

    import torch

    lines = done.stdout.splitlines()
    commit = git_head()
    assert lines[0] == ("daic 0.1.0" + (f" (git {commit[:12]})" if commit else ""))
    cuda = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
    assert lines[1] == f"Python {platform.python_version()}, torch {version('torch')}, {cuda}"
    assert lines[2].startswith(f"host {platform.node()} (")


RUNS = STDLIB
MNIST_SCHEME = f"""scheme M {{
    net = "{RUNS / "nets" / "mnist_ffnn.net"}"
    data = MNIST
    epsilon = 0.1
    goal = Box
    epochs = 1
}}
"""


def test_run_usage_errors_exit_2_and_say_what_to_do(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("scheme A {}\n")
    result = run("run", text)
    assert (result.exit_code, result.stderr) == (
        2,
        f"daic: {text} is not a .dai scheme: `daic run` takes one\n",
    )
    result = run("run", RUNS / "schemes.dai", "--scheme", "Basline")
    assert result.exit_code == 2 and "has no scheme 'Basline'; did you mean `Baseline`?" in result.stderr

    scheme = tmp_path / "m.dai"
    scheme.write_text(MNIST_SCHEME)
    result = run("run", scheme, "--out", tmp_path / "r")
    assert result.exit_code == 2
    assert (
        result.stderr
        == "daic: MNIST is read from a folder: pass --data DIR (and --download to fetch it there)\n"
    )
    result = run("run", scheme, "--out", tmp_path / "r", "--data", tmp_path / "nowhere")
    assert result.exit_code == 2 and "the data folder" in result.stderr and "does not exist" in result.stderr
    raw = tmp_path / "garbage" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (raw / name).write_bytes(bytes(range(256)) * 20)
    result = run("run", scheme, "--out", tmp_path / "r", "--data", tmp_path / "garbage")
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"daic: MNIST: no usable data under {tmp_path / 'garbage'} (the files there do not read as MNIST's: "
        "damaged, or another data set's); expected MNIST/raw/"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs `patch` on the PATH")
def test_fmt_diff_of_a_file_without_a_final_newline_is_a_patch_that_applies(tmp_path):
    source = tmp_path / "a.net"
    source.write_text("ReLU\nLinear  out=10")
    result = run("fmt", "--diff", source)
    assert result.exit_code == 1
    assert "-Linear  out=10\n\\ No newline at end of file\n+Linear out=10\n" in result.stdout
    (tmp_path / "fmt.diff").write_text(result.stdout)
    done = subprocess.run(["patch", str(source), str(tmp_path / "fmt.diff")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert source.read_text() == "ReLU\nLinear out=10\n"


@pytest.mark.parametrize(
    "text", ["let a  =  Box  # x\rlet b = a\n", "let a  =  Box\rlet b = a", "let a = 1\r\nlet b  = a\r\n"]
)
def test_fmt_diff_with_carriage_returns_is_a_patch_that_applies(tmp_path, text):
    """daic ends lines at a lone \\r; `patch` does not, and the diff is made in its lines."""
    source = tmp_path / "a.dai"
    source.write_bytes(text.encode())
    result = run("fmt", "--diff", source)
    assert result.exit_code == 1
    (tmp_path / "fmt.diff").write_bytes(result.stdout_bytes)  # as written: CliRunner.stdout folds \r\n
    done = subprocess.run(["patch", str(source), str(tmp_path / "fmt.diff")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert run("fmt", "--check", source).exit_code == 0


def test_fmt_formats_the_target_of_a_symbolic_link_and_keeps_the_link(tmp_path):
    target = tmp_path / "nets" / "real.net"
    target.parent.mkdir()
    target.write_text("ReLU\nLinear  out=10\n")
    link = tmp_path / "link.net"
    link.symlink_to(target)
    result = run("fmt", link)
    assert (result.exit_code, result.stderr) == (
        0,
        f"reformatted {link}\n1 file reformatted, 0 files unchanged\n",
    )
    assert link.is_symlink() and link.readlink() == target
    assert target.read_text() == "ReLU\nLinear out=10\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["link.net", "nets", "real.net"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("let g = Mixx\n", "<stdin>:1:9: error[E101]: unknown name `Mixx`\n  hint: did you mean `Mix`?\n"),
        # No name to tell the language: a text whose first statement is no `import`, `let` or `scheme`
        # is a network.
        (
            "# a net\nReLUU\n",
            "<stdin>:2:1: error[E102]: unknown layer `ReLUU`\n  hint: did you mean `ReLU`?\n",
        ),
    ],
    ids=["dai", "net"],
)
def test_check_reads_standard_input(text, expected):
    result = CliRunner().invoke(main, ["check", "--format", "concise", "-"], input=text)
    assert (result.exit_code, result.stdout) == (1, expected)
    assert result.stderr == "checked 1 file: 1 error in 1 file\n"


def test_check_standard_input_under_a_file_name(tmp_path, monkeypatch):
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "goals.dai").write_text("let g = Mix(Point, Box, 0.5)\n")
    monkeypatch.chdir(tmp_path)
    text = 'import "goals.dai" as goals\nlet h = goals.g\nlet k = goals.q\n'
    result = CliRunner().invoke(
        main, ["check", "--format", "concise", "--stdin-filename", "nets/mine.dai", "-"], input=text
    )
    # Its imports are found beside the name it was given, and diagnostics carry that name.
    assert result.stdout.splitlines()[0] == "nets/mine.dai:3:9: error[E101]: `goals.dai` defines no `q`"
    assert run("check", "--stdin-filename", "a.txt", "-").exit_code == 2
    assert run("check", "-", "other.dai").exit_code == 2


def test_fmt_formats_standard_input_to_standard_output():
    result = CliRunner().invoke(main, ["fmt", "-"], input="ReLU\nLinear  out=10")
    assert (result.exit_code, result.stdout) == (0, "ReLU\nLinear out=10\n")
    result = CliRunner().invoke(main, ["fmt", "--check", "-"], input="ReLU\nLinear  out=10")
    assert (result.exit_code, result.stdout) == (1, "would reformat <stdin>\n")
    result = CliRunner().invoke(main, ["fmt", "-"], input="let x = (1\n")
    assert (result.exit_code, result.stdout) == (1, "")
    assert "error[E005]" in result.stderr


def test_doc_documents_every_scheme_field_its_listing_names():
    from daic.compiler.constructors import SCHEME_DECL

    listing = run("doc").stdout
    fields = listing.split("Scheme fields:\n", 1)[1].split("\n")[0].strip().split(", ")
    assert fields == [p.name for p in SCHEME_DECL.params]
    for field in SCHEME_DECL.params:
        result = run("doc", field.name)
        assert result.exit_code == 0, result.output
        # `relu` is also an activation: both are documented.
        assert f"scheme field {field.name}: {field.type} (" in result.stdout
        assert field.doc in result.stdout
    assert run("doc", "seed").stdout == (
        "scheme field seed: Int (default 0; >= 0)\n\nSeed of every random number generator.\n"
    )
    result = run("doc", "sede")
    assert (result.exit_code, result.stderr) == (
        2,
        "daic: no constructor or scheme field 'sede'; did you mean `seed`?\n",
    )
