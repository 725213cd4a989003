"""The run folder loses nothing: files that are not the run's are never overwritten, an attempt that saved
no epoch starts again, and a checkpoint of another run (or a damaged one) is refused with a message."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from daic.compiler.commands.cli import main
from daic.compiler.jobs.run import execute, plan_run
from daic.errors import DaicError
from tests.compiler.commands.test_run import DIGITS_SCHEME, STDLIB, Quiet
from tests.runtime.test_checkpoint import fill_disk_after

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
    with pytest.raises(DaicError, match=r"already has tiny\.dai, which a run would overwrite") as info:
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
        DaicError, match="interrupted before an epoch finished: run the same command again"
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


def zero_inside_the_weights(checkpoint, count=2000):
    """Zeroes `count` bytes inside the first tensor stored in a checkpoint (a torch zip archive)."""
    import zipfile

    with zipfile.ZipFile(checkpoint) as archive:
        record = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= count)
    data = bytearray(checkpoint.read_bytes())
    start = record.header_offset + 100  # past the record's local header
    data[start : start + count] = bytes(count)
    checkpoint.write_bytes(bytes(data))


def test_resume_refuses_damaged_and_foreign_checkpoints(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    good = (out / "checkpoint.pt").read_bytes()

    for damage in (
        lambda c: c.write_bytes(good[:1000]),
        lambda c: c.write_bytes(b""),
        zero_inside_the_weights,
    ):
        (out / "checkpoint.pt").write_bytes(good)
        damage(out / "checkpoint.pt")
        with pytest.raises(
            DaicError, match=r"checkpoint\.pt is damaged \(.+\); the run cannot resume"
        ) as info:
            run(scheme, out, epochs=2, resume=True)
        assert info.value.exit_code == 2

    # A checkpoint of another scheme, copied in.
    other = tmp_path / "other.dai"
    other.write_text(DIGITS_SCHEME.replace("scheme Tiny", "scheme Other") % NET)
    run(other, tmp_path / "other")
    (out / "checkpoint.pt").write_bytes((tmp_path / "other" / "checkpoint.pt").read_bytes())
    another = r"is from another run \(scheme 'Other' there, 'Tiny' here\)"
    with pytest.raises(DaicError, match=another) as info:
        run(scheme, out, epochs=2, resume=True)
    assert info.value.exit_code == 2
    # Nothing was lost on the way: the run still resumes.
    (out / "checkpoint.pt").write_bytes(good)
    run(scheme, out, epochs=2, resume=True)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 2


def test_resume_refuses_sources_whose_meaning_changed(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    record = (out / "run.json").read_text()
    checkpoint = (out / "checkpoint.pt").read_bytes()

    edited = tmp_path / "edited.dai"
    edited.write_text(
        (DIGITS_SCHEME % NET).replace("epsilon = 0.05", "epsilon = 0.1").replace("lr=0.003", "lr=0.01")
    )
    with pytest.raises(DaicError) as info:
        run(edited, out, epochs=2, resume=True)
    assert info.value.exit_code == 2
    assert info.value.command_message.splitlines() == [
        f"{out} holds a run of other sources; --resume would train something else:",
        "  epsilon: was 0.05, now 0.1",
        "  optimizer: was Adam(lr=0.003, weight_decay=0.0), now Adam(lr=0.01, weight_decay=0.0)",
        f"resume with the sources it started from (copied in {out}), or start a new run with another --out",
    ]
    narrower = tmp_path / "narrower.net"
    narrower.write_text(NET.read_text().replace("Linear out=100\nReLU\nCorr", "Linear out=50\nReLU\nCorr"))
    with pytest.raises(DaicError, match=r"network, layer 4: was `Linear out=100`, now `Linear out=50`"):
        run(scheme, out, epochs=2, resume=True, net=str(narrower))
    with pytest.raises(DaicError, match=r"epochs: was 1, now 0 \(a run may be extended, not shortened\)"):
        run(scheme, out, epochs=0, resume=True)
    assert (out / "run.json").read_text() == record
    assert (out / "checkpoint.pt").read_bytes() == checkpoint

    # Comments, layout and the way a value is written are not its meaning.
    same = tmp_path / "same.dai"
    same.write_text(
        "# the same run\nlet rate = 0.006 / 2\n"
        + (DIGITS_SCHEME % NET).replace("lr=0.003", "lr = rate").replace("    batch = 50\n", "")
    )
    run(same, out, epochs=2, resume=True)
    assert torch.load(out / "checkpoint.pt", weights_only=True)["epoch"] == 2


def test_more_epochs_extend_a_run_and_are_recorded(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    assert json.loads((out / "run.json").read_text())["epochs"] == 1
    run(scheme, out, epochs=3, resume=True)
    record = json.loads((out / "run.json").read_text())
    assert record["epochs"] == 3 and "finished" in record
    assert [(r["after_epoch"], r["epochs"]) for r in record["resumed"]] == [(1, 3)]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]


def test_a_run_removes_its_stale_temporary_files(scheme, tmp_path):
    out = tmp_path / "run"
    run(scheme, out)
    stale = [".checkpoint.pt.k1l2m3.tmp", ".run.json.abc.tmp", ".tiny.dai.x.tmp", ".metrics.png.y.tmp"]
    for name in stale:
        (out / name).write_bytes(b"left by a kill")
    (out / ".notes.txt.z.tmp").write_text("not the run's")
    run(scheme, out, epochs=2, resume=True)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".notes.txt.z.tmp"]

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".checkpoint.pt.q.tmp").write_bytes(b"left by a kill")
    run(scheme, fresh)
    assert not (fresh / ".checkpoint.pt.q.tmp").exists()


def resume_on_a_full_disk(scheme, out, monkeypatch, only: str, room: int) -> DaicError:
    """The error of resuming the run in `out` to 2 epochs, where files whose names start with `only` find
    the disk full after `room` bytes."""
    with monkeypatch.context() as patch:
        fill_disk_after(patch, room=room, only=only)
        with pytest.raises(DaicError) as info:
            run(scheme, out, epochs=2, resume=True)
    assert info.value.exit_code == 2
    return info.value


def test_a_full_disk_loses_nothing(scheme, tmp_path, monkeypatch):
    out = tmp_path / "run"
    run(scheme, out)
    saved, plot = (out / "checkpoint.pt").read_bytes(), (out / "metrics.png").read_bytes()
    assert resume_on_a_full_disk(scheme, out, monkeypatch, ".checkpoint.pt.", room=5000).command_message == (
        f"cannot save epoch 2 in {out} (No space left on device); epoch 1 is saved: "
        f"resume with --resume --out {out}"
    )
    assert (out / "checkpoint.pt").read_bytes() == saved
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # The disk fills after the last epoch, while the report is written: the epochs are saved, the plot is
    # the last one written whole, and --resume writes the report.
    assert resume_on_a_full_disk(scheme, out, monkeypatch, ".metrics.png.", room=1000).command_message == (
        f"cannot write the report in {out} (No space left on device); every epoch is saved: free some "
        f"space and run the same command with --resume --out {out} to write it"
    )
    assert (out / "metrics.png").read_bytes() == plot and plot.startswith(b"\x89PNG")
    assert "finished" not in json.loads((out / "run.json").read_text())
    run(scheme, out, epochs=2, resume=True)
    assert (out / "metrics.png").read_bytes() != plot
    assert json.loads((out / "summary.json").read_text())["epochs"] == 2


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
    from daic.compiler.checking.check import check_path

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
