"""The run folder loses nothing: files that are not the run's are never overwritten, an attempt that saved
no epoch starts again, and a checkpoint of another run (or a damaged one) is refused with a message."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.cli import main
from daic.compiler.run import RunError, execute, plan_run

from .test_run import DIGITS_SCHEME, STDLIB, Quiet

NET = STDLIB / "nets" / "digits_ffnn.net"


@pytest.fixture
def scheme(tmp_path):
    path = tmp_path / "tiny.dai"
    path.write_text(DIGITS_SCHEME % NET)
    return path


def run(scheme, out, *, epochs=1, resume=False, display=None, net=None):
    options = {"data_root": None, "download": False, "device": "cpu"}
    plan = plan_run(str(scheme), None, net)
    return execute(plan, out, epochs=epochs, resume=resume, display=display or Quiet(), **options)


def test_files_that_are_not_the_runs_are_never_overwritten(scheme, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "tiny.dai").write_text("# my own experiment\n")
    (out / "notes.txt").write_text("kept\n")
    with pytest.raises(RunError, match=r"already has tiny\.dai, which a run would overwrite") as info:
        run(scheme, out)
    assert info.value.exit_code == 2
    assert (out / "tiny.dai").read_text() == "# my own experiment\n"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "tiny.dai"]
    # Other files do not stand in the way.
    (out / "tiny.dai").unlink()
    run(scheme, out)
    assert (out / "notes.txt").read_text() == "kept\n"
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 1


@pytest.mark.parametrize("resume", [False, True], ids=["again", "resume"])
def test_a_run_cut_in_its_first_epoch_starts_again(scheme, tmp_path, resume):
    out = tmp_path / "run"
    with pytest.raises(
        RunError, match="interrupted before an epoch finished: run the same command again"
    ) as info:
        run(scheme, out, display=Quiet(stop_in_epoch=0))
    assert info.value.exit_code == 130
    assert not (out / "checkpoint.pt").exists() and (out / "run.json").exists()
    (out / "metrics.jsonl").write_text('{"epoch": 1, "loss": 1.0}\n')  # a row whose checkpoint never came
    run(scheme, out, resume=resume)
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["epoch"] for r in rows] == [1] and "Acc" in json.loads(rows[0])


def test_resume_drops_a_metrics_row_cut_short(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    with open(out / "metrics.jsonl", "a") as handle:
        handle.write('{"epoch": 2, "lo')  # a crash while the row was appended
    run(scheme, out, epochs=2, resume=True)
    assert [json.loads(r)["epoch"] for r in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_resume_refuses_damaged_and_foreign_checkpoints(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    good = (out / "checkpoint.pt").read_bytes()

    (out / "checkpoint.pt").write_bytes(good[:1000])
    with pytest.raises(RunError, match=r"checkpoint\.pt cannot be read \(\w+\)") as info:
        run(scheme, out, epochs=2, resume=True)
    assert info.value.exit_code == 2
    (out / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(RunError, match="cannot be read"):
        run(scheme, out, epochs=2, resume=True)

    (out / "checkpoint.pt").write_bytes(good)
    sgd = tmp_path / "sgd.dai"
    sgd.write_text(DIGITS_SCHEME.replace("Adam(lr=0.003)", "SGD(lr=0.01)") % NET)
    with pytest.raises(RunError, match="is from another run \\(optimizer_type 'Adam' there, 'SGD' here\\)"):
        run(sgd, out, epochs=2, resume=True)
    other_net = STDLIB / "nets" / "digits_conv.net"
    with pytest.raises(RunError, match=r"does not fit .*digits_conv\.net") as info:
        run(scheme, out, epochs=2, resume=True, net=str(other_net))
    assert info.value.exit_code == 2
    # Nothing was lost on the way: the run still resumes.
    run(scheme, out, epochs=2, resume=True)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 2


def test_run_takes_a_scheme_and_net_takes_a_network(scheme, tmp_path):
    result = CliRunner().invoke(main, ["run", str(NET)])
    assert result.exit_code == 2
    assert "is a network; `daic run` takes a .dai scheme (pass a network with --net)" in result.stderr
    result = CliRunner().invoke(main, ["run", str(scheme), "--net", str(scheme)])
    assert result.exit_code == 2 and "--net takes a .net network file" in result.stderr


def test_net_replaces_a_missing_network(tmp_path):
    scheme = tmp_path / "missing.dai"
    scheme.write_text(DIGITS_SCHEME % "nowhere.net")
    summary = run(scheme, tmp_path / "run", net=str(NET))
    assert summary["epochs"] == 1
    assert (tmp_path / "run" / "digits_ffnn.net").exists()


def test_the_copied_sources_check_as_they_are_in_the_run_folder(tmp_path):
    from daic.compiler.check import check_path

    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "small.net").write_text(NET.read_text())
    (tmp_path / "lib.dai").write_text("let epochs = 2\n")
    scheme = tmp_path / "two.dai"
    body = DIGITS_SCHEME % "nets/small.net"
    scheme.write_text(
        'import "lib.dai" as lib\n' + body + "scheme Other extends Tiny {\n    epochs = lib.epochs\n}\n"
    )
    out = tmp_path / "runs" / "other"
    plan = plan_run(str(scheme), "Other", str(STDLIB / "nets" / "digits_conv.net"))
    execute(plan, out, epochs=1, data_root=None, download=False, device="cpu", resume=False, display=Quiet())
    copy = (out / "two.dai").read_text()
    assert 'net = "../../nets/small.net"' in copy  # Tiny's own network, from the folder
    assert copy.startswith('import "../../lib.dai" as lib\n')
    assert 'scheme Other extends Tiny {\n    net = "digits_conv.net"\n' in copy  # the run's, copied beside it
    assert check_path(str(out / "two.dai")).diagnostics == ()
