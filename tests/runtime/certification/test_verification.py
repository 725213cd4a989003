"""How HBox certification sizes its batches: its float64 terms within a memory budget, 2 GiB on the CPU and a
share of the free memory on a GPU (where 2 GiB meant 2 ResNet-Tiny images a batch on an H200)."""

from __future__ import annotations

import pytest
import torch

from daic.runtime import Conv2D, Flatten, Linear, ReLU, Sequential
from daic.runtime.certification.certify import memory_budget
from daic.runtime.certification.verification import HBoxBound

torch.set_num_threads(1)
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
GiB = 2**30


def conv_net() -> Sequential:
    """Its widest activation is the convolution's 8 x 16 x 16 = 2,048 values per image."""
    return Sequential(Conv2D(3, 8, 3, padding=1), ReLU(), Flatten(), Linear(8 * 16 * 16, 10)).double()


# Each image of 3 x 16 x 16 carries 768 input terms and 2 more through 2,048 float64 values: 12.6 MB.
PER_IMAGE = (3 * 16 * 16 + 2) * 2048 * 8


def test_on_the_cpu_the_batches_fit_two_gib():
    assert memory_budget(torch.device("cpu"), HBoxBound.budget_bytes) == 2 * GiB
    assert HBoxBound().batch_size(conv_net(), (3, 16, 16), 10_000) == 2 * GiB // PER_IMAGE == 170
    assert HBoxBound().batch_size(conv_net(), (3, 16, 16), 50) == 50  # never more than the batch asked


def test_on_a_gpu_they_fit_a_quarter_of_its_free_memory_within_two_and_sixteen_gib(monkeypatch):
    free = {"bytes": 40 * GiB}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free["bytes"], 141 * GiB))
    assert memory_budget(torch.device("cuda", 0), HBoxBound.budget_bytes) == 10 * GiB  # 851 images a batch
    free["bytes"] = 130 * GiB  # a large card, nearly free: at most 16 GiB
    assert memory_budget(torch.device("cuda", 0), HBoxBound.budget_bytes) == 16 * GiB
    free["bytes"] = 4 * GiB  # a card mostly taken by others: the CPU's budget still
    assert memory_budget(torch.device("cuda", 0), HBoxBound.budget_bytes) == 2 * GiB


@CUDA
def test_on_cuda_the_batches_fit_a_share_of_what_the_card_has_free():
    model = conv_net().cuda()
    free, _ = torch.cuda.mem_get_info()
    expected = min(16 * GiB, max(2 * GiB, free // 4)) // PER_IMAGE
    assert abs(HBoxBound().batch_size(model, (3, 16, 16), 100_000) - expected) <= expected // 10
