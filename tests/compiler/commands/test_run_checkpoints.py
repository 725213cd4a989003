"""A checkpoint read outside its run (`daic verify`, `daic export`): damaged, missing or foreign files are
refused with exit 2 and a message that says which; ONNX is written whole or not at all."""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.run import execute, plan_run
from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB, Quiet
from tests.compiler.commands.test_run_folder import zero_inside_the_weights

FFNN = STDLIB / "nets" / "digits_ffnn.net"
CONV = STDLIB / "nets" / "digits_conv.net"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    scheme = folder / "tiny.dai"
    scheme.write_text(DIGITS_SCHEME % FFNN)
    plan = plan_run(str(scheme), None, None)
    execute(
        plan,
        folder / "run",
        epochs=1,
        data_root=None,
        download=False,
        device="cpu",
        resume=False,
        display=Quiet(),
    )
    return folder / "run" / "checkpoint.pt"


def daic(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("command", ["verify", "export"])
def test_a_damaged_checkpoint_is_refused(checkpoint, tmp_path, command):
    damaged = tmp_path / "checkpoint.pt"
    damaged.write_bytes(checkpoint.read_bytes())
    zero_inside_the_weights(damaged)
    extra = ["--onnx", tmp_path / "m.onnx"] if command == "export" else []
    result = daic(command, FFNN, "--weights", damaged, *extra)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"daic: {damaged} is damaged (its record ")
    assert "does not match its checksum); pass a whole checkpoint of `daic run`" in result.stderr
    assert not (tmp_path / "m.onnx").exists()


def test_another_networks_checkpoint_says_what_does_not_fit(checkpoint):
    result = daic("verify", CONV, "--weights", checkpoint)
    assert result.exit_code == 2
    assert result.stderr == (
        f"daic: {checkpoint} does not hold weights for {CONV}: it lacks 5.weight, 5.bias, 8.weight and 1 "
        "more; it has 6.weight, 6.bias, which the network does not; 1.weight is [100, 64] in the checkpoint, "
        "[16, 1, 3, 3] in the network, 1.bias is [100] in the checkpoint, [16] in the network, 3.weight is "
        "[100, 100] in the checkpoint, [32, 16, 4, 4] in the network and 1 more; pass the network it was "
        "trained with\n"
    )


def test_checkpoint_options_name_what_is_wrong(checkpoint, tmp_path):
    result = daic("verify", FFNN, "--weights", tmp_path / "nope.pt")
    assert (result.exit_code, result.stderr) == (2, f"daic: {tmp_path / 'nope.pt'} does not exist\n")
    result = daic("verify", FFNN, "--weights", checkpoint, "--dataset", "Foo")
    assert result.exit_code == 2
    assert result.stderr == (
        "daic: --dataset Foo: no such data set "
        "(known: CIFAR10, CIFAR100, Digits, FashionMNIST, ImageFolder, MNIST, SVHN, TinyImageNet)\n"
    )
    result = daic(
        "export", FFNN, "--weights", checkpoint, "--dataset", "digits", "--onnx", tmp_path / "m.onnx"
    )
    assert (
        result.exit_code == 2
        and "--dataset digits: no such data set; did you mean `Digits`?" in result.stderr
    )
    result = daic("verify", tmp_path / "nowhere.net", "--weights", checkpoint)
    assert result.exit_code == 2 and "nowhere.net: cannot read: No such file or directory" in result.stderr


def test_export_into_a_read_only_folder_is_a_message(checkpoint, tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    target = tmp_path / "ro" / "m.onnx"
    result = daic("export", FFNN, "--weights", checkpoint, "--onnx", target)
    assert (result.exit_code, result.stderr) == (2, f"daic: cannot write {target}: Read-only file system\n")
    assert "Traceback" not in result.output and not target.exists()


@pytest.mark.slow
def test_export_writes_one_file_that_holds_the_weights_and_imports_alone(checkpoint, tmp_path):
    import onnx

    target = tmp_path / "out" / "m.onnx"
    result = daic("export", FFNN, "--weights", checkpoint, "--onnx", target)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"wrote {target} (onnx checker passed")
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.onnx"]
    model = onnx.load(str(target), load_external_data=False)
    assert not [t.name for t in model.graph.initializer if t.external_data]
    alone = tmp_path / "elsewhere" / "copy.onnx"  # copied alone, as users and verifiers pass it around
    alone.parent.mkdir()
    alone.write_bytes(target.read_bytes())
    assert daic("import", alone).exit_code == 0
