"""Runtime tests run single-threaded so that their timing is stable on small CI machines."""

import torch

torch.set_num_threads(1)
