"""Tests run torch single-threaded: on a busy 2-core machine tiny ops get far slower with more threads."""

import torch

torch.set_num_threads(1)
