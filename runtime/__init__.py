"""daic.runtime: a plain PyTorch library that runs networks concretely and abstractly (Box, hybrid zonotope).

It imports nothing else of daic. A network is built from the layer classes (ordinary ``nn.Module``s, so the
concrete network trains and exports like any PyTorch model); ``net.abstract(value, ctx)`` runs it on a
`Box` or `HybridZonotope` under an `AbstractContext`, and ``trace(net, value, ctx)`` also keeps what reached
each layer.
"""

from daic.runtime.context import AbstractContext
from daic.runtime.domains import Box, HybridZonotope, Value, add_values, cat_values, lower_upper
from daic.runtime.layers import (
    TAPS,
    AbstractLayer,
    AbstractMixin,
    AvgPool2D,
    BatchNorm,
    Concat,
    Concretize,
    Conv2D,
    CorrelateAll,
    CorrelateFixed,
    CorrelateMax,
    CorrelateMaxPool,
    DecorrelateAll,
    DecorrelateMin,
    DeepLoss,
    Flatten,
    Linear,
    MaxPool2D,
    Normalize,
    Pass,
    Regroup,
    ReLU,
    Residual,
    Sequential,
    deep_loss,
    trace,
)
from daic.runtime.training.init import ibp_init_
from daic.runtime.training.schedules import Const, Lin, Schedule, Until, as_schedule

__all__ = [
    "TAPS",
    "AbstractContext",
    "AbstractLayer",
    "AbstractMixin",
    "AvgPool2D",
    "BatchNorm",
    "Box",
    "Concat",
    "Concretize",
    "Const",
    "Conv2D",
    "CorrelateAll",
    "CorrelateFixed",
    "CorrelateMax",
    "CorrelateMaxPool",
    "DecorrelateAll",
    "DecorrelateMin",
    "DeepLoss",
    "Flatten",
    "HybridZonotope",
    "Lin",
    "Linear",
    "MaxPool2D",
    "Normalize",
    "Pass",
    "ReLU",
    "Regroup",
    "Residual",
    "Schedule",
    "Sequential",
    "Until",
    "Value",
    "add_values",
    "as_schedule",
    "cat_values",
    "deep_loss",
    "ibp_init_",
    "lower_upper",
    "trace",
]
