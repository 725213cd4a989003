"""The trainer's loss module and mixed precision: concrete passes may run in bf16/fp16, abstract ones always
in float32; checkpoints hold the plain network; and (on a GPU) a step never waits for the device."""

import math
import time

import pytest
import torch

from daic.runtime import CorrelateAll, Flatten, Linear, ReLU, Sequential
from daic.runtime.certification.evaluate import Accuracy, Verify
from daic.runtime.certification.verification import BoxBound
from daic.runtime.data.sets import Digits
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.distributed import Group
from daic.runtime.training.goals import EpsBox, IFGSMPoint, Mix, Point, Sub
from daic.runtime.training.optim import Adam
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import LossModule, Trainer, epoch_generator


def tiny_net():
    torch.manual_seed(0)
    return Sequential(Flatten(), Linear(64, 32), ReLU(), CorrelateAll(only_train=True), Linear(32, 10))


def tiny_data(n_train=32, n_test=16):
    g = torch.Generator().manual_seed(0)
    return TensorData(
        torch.rand(n_train, 1, 8, 8, generator=g),
        torch.randint(0, 10, (n_train,), generator=g),
        torch.rand(n_test, 1, 8, 8, generator=g),
        torch.randint(0, 10, (n_test,), generator=g),
        10,
    )


def scheme(goal=None, batch=8):
    return Scheme(
        data=Digits(image=(1, 8, 8), classes=10),
        epsilon=0.05,
        goal=goal or Mix(Mix(Point(), IFGSMPoint(2), 0.5), Sub(0.5, EpsBox()), 0.5),
        epochs=1,
        batch=batch,
        optimizer=Adam(lr=0.01),
        test=[Accuracy(), Verify(BoxBound())],
    )


class Spy:
    """Records, for every concrete and abstract pass, the dtype it produced and whether autocast was on."""

    def __init__(self, model):
        self.concrete, self.abstract = [], []
        inner_walk = model.walk
        model.register_forward_hook(
            lambda _m, _i, out: self.concrete.append((out.dtype, torch.is_autocast_enabled("cpu")))
        )

        def walk(value, ctx):  # the trainer's abstract passes are traced walks
            autocast = torch.is_autocast_enabled("cpu")
            out = yield from inner_walk(value, ctx)
            self.abstract.append((out.head.dtype, out.beta.dtype, autocast))
            return out

        model.walk = walk


@pytest.mark.parametrize(("amp", "dtype"), [(None, torch.float32), ("bf16", torch.bfloat16)])
def test_only_concrete_passes_run_in_reduced_precision(amp, dtype):
    model = tiny_net()
    spy = Spy(model)
    trainer = Trainer(model, scheme(), tiny_data(), amp=amp)
    data = trainer.data
    loss = trainer.loss(data.train_x[:8], data.train_y[:8], 0.5, epoch_generator(0, 0))
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    # The point, the IFGSM point and its 2 attack steps: 4 concrete passes, all under autocast with amp.
    assert spy.concrete == [(dtype, amp is not None)] * 4
    assert spy.abstract == [(torch.float32, torch.float32, False)]


def test_bf16_training_stays_close_to_float32():
    rows = {}
    for amp in (None, "bf16"):
        trainer = Trainer(tiny_net(), scheme(), tiny_data(), amp=amp)
        rows[amp] = [trainer.train_epoch(e)["loss"] for e in range(3)]
    assert rows[None][-1] < rows[None][0]  # it learns
    assert rows["bf16"] == pytest.approx(rows[None], rel=0.05)


def test_fp16_scales_the_loss_and_checkpoints_the_scaler():
    trainer = Trainer(tiny_net(), scheme(), tiny_data(), amp="fp16")
    before = [p.detach().clone() for p in trainer.model.parameters()]
    row = trainer.train_epoch(0)
    assert math.isfinite(row["loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))
    state = trainer.state_dict()
    assert state["scaler"]["scale"] == trainer.scaler.get_scale() > 1
    again = Trainer(tiny_net(), scheme(), tiny_data(), amp="fp16")
    again.load_state_dict(state)
    assert again.scaler.get_scale() == trainer.scaler.get_scale()
    pairs = zip(again.model.parameters(), trainer.model.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_checkpoints_hold_the_plain_network():
    model = tiny_net()
    trainer = Trainer(model, scheme(), tiny_data())
    assert trainer.state_dict()["model"].keys() == model.state_dict().keys()
    assert isinstance(trainer.loss_module, LossModule) and trainer.step_module is trainer.loss_module


def test_a_group_of_one_trains_like_the_plain_trainer():
    rows = []
    for group in (None, Group(device=torch.device("cpu"))):
        trainer = Trainer(tiny_net(), scheme(), tiny_data(), group=group)
        rows.append([trainer.train_epoch(0), trainer.evaluate()])
        rows[-1][0].pop("seconds"), rows[-1][0].pop("examples_per_s")
    assert rows[0] == rows[1]
    assert 0 <= rows[0][1]["Ver Box"] <= rows[0][1]["Acc"] <= 100


def test_progress_reports_every_few_batches_with_the_running_loss():
    seen = []
    trainer = Trainer(tiny_net(), scheme(batch=4), tiny_data(), log_every=3)
    row = trainer.train_epoch(0, seen.append)
    assert [p.batch for p in seen] == [3, 6, 8] and seen[-1].examples == 32
    assert seen[-1].loss == pytest.approx(row["loss"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_training_step_never_waits_for_the_gpu(monkeypatch):
    """With a goal that samples nothing, no step reads from the device (progress is off)."""
    trainer = Trainer(tiny_net(), scheme(), tiny_data(), device="cuda", log_every=10**6)
    trainer.train_epoch(0)  # warm-up: the first steps allocate and choose kernels
    reduce = Group.sum

    def end_of_epoch(group, total):  # the epoch's one read of the device, after its last step
        torch.cuda.set_sync_debug_mode("default")
        return reduce(group, total)

    monkeypatch.setattr(Group, "sum", end_of_epoch)
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer.train_epoch(1, None)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_an_epoch_is_timed_until_its_loss_is_read(monkeypatch):
    """On a GPU the host queues steps ahead of the device; the epoch's seconds must include the wait for
    them, which reading the loss at the end (the reduction) is. A reduction that takes 1 s shows up (the
    epoch's four tiny steps take milliseconds)."""
    trainer = Trainer(tiny_net(), scheme(), tiny_data(), log_every=10**6)
    reduce = Group.sum

    def slow_reduce(group, total):
        time.sleep(1.0)
        return reduce(group, total)

    monkeypatch.setattr(Group, "sum", slow_reduce)
    row = trainer.train_epoch(0)
    assert row["seconds"] >= 1.0
    assert row["examples_per_s"] == pytest.approx(32 / row["seconds"])


def test_certification_refuses_a_negative_epsilon():
    from daic.runtime.certification.evaluate import evaluate

    data = tiny_data()
    with pytest.raises(ValueError, match=r"epsilon >= 0, got -0\.1"):
        evaluate(tiny_net(), [Verify(BoxBound())], data.test_x, data.test_y, -0.1, (0.0, 1.0))


def test_checkpoints_are_written_with_the_usual_permissions(tmp_path):
    import os

    from daic.runtime.checkpoint import save_atomic

    mask = os.umask(0o022)
    try:
        save_atomic({"epoch": 1}, tmp_path / "checkpoint.pt")
    finally:
        os.umask(mask)
    assert (tmp_path / "checkpoint.pt").stat().st_mode & 0o777 == 0o644
