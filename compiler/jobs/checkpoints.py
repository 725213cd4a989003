"""Checkpoints read and matched against a network: by `--resume`, a scheme's `weights`, `daic verify` and
`daic export` alike."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daic.errors import DaicError

if TYPE_CHECKING:
    from torch import nn


def read_checkpoint(path: str | Path, remedy: str) -> dict[str, Any]:
    """The checkpoint at `path`, checked whole; a file that is missing, unreadable or damaged is a
    DaicError (exit 2) that says which, followed by `remedy` (what the user can do about it)."""
    from daic.runtime.checkpoint import DamagedCheckpoint, load

    try:
        state = load(path)
    except FileNotFoundError:
        raise DaicError(f"{path} does not exist", exit_code=2) from None
    except OSError as exc:
        raise DaicError(f"cannot read {path}: {exc.strerror or exc}", exit_code=2) from None
    except DamagedCheckpoint as exc:
        raise DaicError(f"{path} is damaged ({exc}); {remedy}", exit_code=2) from None
    except Exception as exc:  # torch.load raises many kinds (pickle, runtime) for an archive it cannot use
        raise DaicError(
            f"{path} is not a checkpoint daic can read ({exc.__class__.__name__}: {_first_line(exc)}); "
            f"{remedy}",
            exit_code=2,
        ) from None
    if not isinstance(state, dict):
        message = f"{path} is not a checkpoint of `daic run` (it holds no state); {remedy}"
        raise DaicError(message, exit_code=2)
    return state


def weights_mismatch(model: nn.Module, saved: object) -> str | None:
    """Why `saved` (a state dict) cannot be loaded into `model`: the weights it lacks, the ones it has
    that the network does not, and those of another shape; None when it fits."""
    if not isinstance(saved, Mapping):
        return "it holds no network weights"
    own = model.state_dict()
    missing = [k for k in own if k not in saved]
    extra = [k for k in saved if k not in own]
    shapes = {k: list(getattr(saved[k], "shape", ())) for k in own if k in saved}
    reshaped = [
        f"{k} is {shape} in the checkpoint, {list(own[k].shape)} in the network"
        for k, shape in shapes.items()
        if shape != list(own[k].shape)
    ]
    problems = []
    if missing:
        problems.append(f"it lacks {_some(missing)}")
    if extra:
        problems.append(f"it has {_some(extra)}, which the network does not")
    if reshaped:
        problems.append(_some(reshaped))
    return "; ".join(problems) or None


def _some(items: list[str], shown: int = 3) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no details"
