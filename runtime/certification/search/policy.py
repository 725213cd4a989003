"""What every complete search shares: the images of a batch searched together within one `Budget`."""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from daic.runtime.certification.certify import Batch, Step, exact_float
from daic.runtime.certification.search.budget import Budget


class Search(Step):
    """A complete step: it searches the images it is given, `together` at a time, until each is decided or
    their time is spent (`timeout` seconds an image: images searched together share their time, and an
    image decided early leaves its time to the others), leaving the rest unknown; subclasses say how
    (`_search`)."""

    complete = True
    times_each = True
    timeout = 60.0
    together: int | None = None
    """Images searched at once (their subdomains bounded in one batch a round). None: every image of a
    batch on a GPU, where a batch of subdomains costs little more than one; one at a time on a CPU, where
    a lone image's rounds already fill large batches, so a joint search gains little (MNIST ConvSmall,
    one thread, eight images: 159.7 subdomains a second alone, 173.9 together; bench/README.md), and each
    image's verdict comes when its own time is spent rather than the group's."""

    def decide(self, model: nn.Module, batch: Batch, pending: Tensor) -> None:
        size = self.together or (len(pending) if batch.lower.device.type == "cuda" else 1)
        for start in range(0, len(pending), size):
            self._decide_together(model, batch, pending[start : start + size])

    def _decide_together(self, model: nn.Module, batch: Batch, pending: Tensor) -> None:
        budget = Budget.of(self.timeout * len(pending), self.until)
        if budget.over():  # the steps before used the time: the images stay unknown
            for i in pending.tolist():
                batch.outcomes[i].timed_out = True
            return
        began = time.perf_counter()
        with torch.no_grad(), exact_float():
            seconds = self._search(model, batch, pending, budget)
        # Each image's share of the search's time, and the rest (the bookkeeping) spread evenly.
        rest = (time.perf_counter() - began - sum(seconds)) / len(pending)
        for i, own in zip(pending.tolist(), seconds, strict=True):
            batch.outcomes[i].seconds += own + max(rest, 0.0)

    def _search(self, model: nn.Module, batch: Batch, pending: Tensor, budget: Budget) -> list[float]:
        """Decides what it can of the images `pending` (indices into the batch) in their outcomes before
        the budget's deadline; returns the seconds it charges each."""
        raise NotImplementedError
