"""CTRAIN 0.6 (PyPI), the certified-training library a researcher would pick beside daic: its IBP trainer
(`ShiIBPModelWrapper`, Shi et al.'s IBP on auto_LiRPA) against daic's `Trainer` on the same network,
weights and batches, one epoch of each in turn.

Both train IBP as CTRAIN's defaults set it once the radius has reached its final value: the margins'
interval bounds with the specification folded into the last layer (daic's `Box(folded=True)`), no clean
loss (its kappa is 0), L1 1e-6 on the weights, gradients clipped to norm 10, Adam at 5e-4, BatchNorm's
statistics from the clean batch. CTRAIN's warm-up regulariser fails on auto_LiRPA 0.7.1 (KeyError
'/input-1'), so its epochs are timed past the warm-up and the ramp (both as short as it allows, never run).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import time
from collections.abc import Callable

import torch
from plain import plain_network
from torch import Tensor, nn

from daic.runtime.data.sets import Dataset
from daic.runtime.data.tensors import TensorData
from daic.runtime.training.goals import EpsBox
from daic.runtime.training.optim import Adam
from daic.runtime.training.scheme import Scheme
from daic.runtime.training.trainer import Trainer

LR, L1, CLIP = 5e-4, 1e-6, 10.0


def why_not() -> str | None:
    """Why CTRAIN's rows cannot be measured here, or None when they can."""
    if importlib.util.find_spec("CTRAIN") is None:
        return "not installed"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            import CTRAIN.model_wrappers  # noqa: F401
    except Exception as error:  # its import pulls a dozen packages; any failure means no rows
        return f"does not import ({type(error).__name__}: {error})"
    return None


def version() -> str:
    from importlib.metadata import version as installed

    return installed("ctrain")


class _Batches(list):
    """The batches as CTRAIN's loaders give them: iterable, sized, with the data's range and statistics."""


def epochs(model: nn.Module, x: Tensor, y: Tensor, eps: float, batch: int) -> dict[str, Callable[[], float]]:
    """One epoch over the batches of ``(x, y)`` by each trainer, each returning its seconds per batch;
    both start from `model`'s weights (daic's network, and its plain copy for CTRAIN)."""
    from CTRAIN.model_wrappers import ShiIBPModelWrapper

    device = x.device
    steps = len(x) // batch
    net, normalise = plain_network(model, tuple(x.shape[1:]))
    # CTRAIN's loaders hand it normalised data with the normalisation's statistics and range, and it
    # scales eps by them: the network's own normalisation moves into the batches.
    images = normalise(x)
    loader = _Batches(
        (images[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch]) for i in range(steps)
    )
    channels = x.shape[1]
    corners = torch.stack([torch.zeros(channels), torch.ones(channels)]).view(2, channels, 1, 1).to(x)
    loader.min, loader.max = (normalise(corners)[i : i + 1].cpu() for i in (0, 1))
    # normalise(v) = (v - mean) / std: min = -mean / std and max - min = 1 / std
    loader.std = (1 / (loader.max - loader.min)).flatten()
    loader.mean = -loader.min.flatten() * loader.std
    loader.normalised = True
    first = net.to(device)
    # No warm-up and the shortest ramp its scheduler takes (at least 5 batches): every epoch after the
    # ramp is at the final radius.
    ramp = -(-5 // steps)
    wrapper = ShiIBPModelWrapper(
        first, input_shape=tuple(x.shape[1:]), eps=eps, num_epochs=10**6, train_eps_factor=1,
        warm_up_epochs=0, ramp_up_epochs=ramp, lr=LR, gradient_clip=CLIP, l1_reg_weight=L1,
        start_kappa=0, end_kappa=0, checkpoint_save_path=None, device=device,
    )  # fmt: skip
    data = TensorData(x, y, x[:1], y[:1], 10)
    dataset = Dataset(image=tuple(x.shape[1:]), classes=10)
    scheme = Scheme(dataset, eps, EpsBox(folded=True), 1, batch=batch, optimizer=Adam(lr=LR), l1=L1,
                    grad_clip=CLIP)  # fmt: skip
    trainer = Trainer(model.to(device).train(), scheme, data, device=device, log_every=10**9)
    epoch = [ramp + 1]

    def daic() -> float:
        start = time.perf_counter()
        trainer.train_epoch(0)
        return (time.perf_counter() - start) / steps

    def ctrain() -> float:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            wrapper.train_model(loader, start_epoch=epoch[0], end_epoch=epoch[0] + 1)  # (its progress bar)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        epoch[0] += 1
        return (time.perf_counter() - start) / steps

    return {"daic Trainer": daic, "CTRAIN": ctrain}
