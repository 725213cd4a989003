"""Layers of `.net` files: concrete layers, branch blocks and the abstract layers of Section 3."""

from __future__ import annotations

from daic.compiler.constructors import shapes
from daic.compiler.registry import Category, Constructor, LayerFacts, Param
from daic.compiler.types import ACTIVATION, BOOL, FLOAT, INT, LAYER, SCHEDULE, ListOf, OneOf

SIZE = OneOf(INT, ListOf(INT))  # a kernel size, stride or padding: `3` or `[3, 3]`
RT = "daic.runtime.layers:"
ACTIVATIONS = "daic.runtime.layers.activations:"

ONLY_TRAIN = Param(
    "only_train", BOOL, False, "True: applied while training and skipped at test time (verification)."
)
INPUT_SHAPE = Param(
    "input_shape",
    ListOf(INT),
    None,
    "The shape [H, W, C] (or [features]) entering this layer, as the paper's listings "
    "print it; checked against the inferred shape when given.",
    low=1,
    lowered=False,
)


PLAIN = LayerFacts()  # keeps its input's shape, has no trained parameters


def _layer(name, doc, target, *params, category=Category.LAYER, aliases=(), facts=PLAIN):
    return Constructor(
        name, category, LAYER, (*params, INPUT_SHAPE), doc, target and RT + target, aliases, layer=facts
    )


def _activation(name, doc, *params):
    """A member of the activation family (`runtime/layers/activations.py`): its outputs are neurons."""
    return Constructor(
        name,
        Category.LAYER,
        LAYER,
        (*params, INPUT_SHAPE),
        doc,
        ACTIVATIONS + name,
        layer=LayerFacts(neurons=True),
    )


def _abstract(name, doc, target, *params, aliases=(), facts=PLAIN):
    return _layer(
        name, doc, target, *params, ONLY_TRAIN, category=Category.ABSTRACT_LAYER, aliases=aliases, facts=facts
    )


def _affine(shape, count, inputs, resizes=True):
    return LayerFacts(shape, resizes, count, inputs, affine=True)


DECLARATIONS = [
    _layer(
        "Normalize",
        "Per-channel (x - mean) / std, a fixed layer the paper puts first so that epsilons compare across "
        "systems (Section 5).",
        "Normalize",
        Param("mean", ListOf(FLOAT), doc="One mean per input channel."),
        Param("std", ListOf(FLOAT), doc="One standard deviation per input channel.", low=0, low_open=True),
        facts=LayerFacts(shapes.normalize),
    ),
    _layer(
        "Conv2D",
        "2D convolution with bias. Output size floor((H + 2*padding - kernel) / stride) + 1.",
        "Conv2D",
        Param("filters", INT, doc="Output channels.", low=1),
        Param("kernel_size", SIZE, doc="Kernel height and width.", low=1),
        Param("stride", SIZE, 1, "Stride.", low=1),
        Param("padding", SIZE, 0, "Zero padding on each side.", low=0),
        Param("bias", BOOL, True, "Whether the layer adds a bias."),
        facts=_affine(shapes.conv2d, shapes.conv2d_params, shapes.conv2d_inputs),
    ),
    _layer(
        "Linear",
        "Fully connected layer with bias; flattens its input first.",
        "Linear",
        Param("out", INT, doc="Output width.", low=1),
        Param("bias", BOOL, True, "Whether the layer adds a bias."),
        facts=_affine(shapes.linear, shapes.linear_params, shapes.linear_inputs),
    ),
    _layer(
        "BatchNorm",
        "Batch normalisation, (x - mean) / sqrt(var + eps) * weight + bias, per channel of an image (per "
        "feature of a vector), as torch's BatchNorm2d/BatchNorm1d. At test time, verification and export it "
        "is the affine map of the running statistics; in a training step, of the statistics of one batch "
        "fixed for the whole step (the scheme's `bn_stats`), which every domain bounds exactly.",
        "BatchNorm",
        Param("eps", FLOAT, 1e-5, "Added to the variance before its square root.", low=0, low_open=True),
        Param(
            "momentum",
            FLOAT,
            0.1,
            "The weight of each step's statistics in the running ones.",
            low=0,
            high=1,
            low_open=True,
        ),
        facts=LayerFacts(count_params=shapes.batch_norm_params, inputs=shapes.batch_norm_inputs, affine=True),
    ),
    _layer(
        "ReLU",
        "max(x, 0). Its abstract transformer is chosen per run (hybrid or DeepZ).",
        "ReLU",
        facts=LayerFacts(neurons=True),
    ),
    _activation(
        "LeakyReLU",
        "x for x >= 0, negative_slope * x below. Piecewise linear: branch and bound splits it at zero and "
        "decides its leaves exactly; alpha-CROWN optimises its lower slopes in [negative_slope, 1].",
        Param("negative_slope", FLOAT, 0.01, "The slope below zero.", low=0, high=1, high_open=True),
    ),
    _activation(
        "Abs",
        "|x|. Piecewise linear: branch and bound splits it at zero and decides its leaves exactly; "
        "alpha-CROWN optimises its lower slopes in [-1, 1].",
    ),
    _activation(
        "HardTanh",
        "x clipped to [-1, 1]. Bounded in every domain by its lines; branch and bound does not split it: "
        "it cuts the input boxes of its subdomains instead, until each is decided (in the limit).",
    ),
    _activation(
        "Sigmoid",
        "1 / (1 + exp(-x)). Relaxed by chords and tangents (CROWN's) on either side of zero and by "
        "parallel lines across it; branch and bound splits it at zero, and cuts the input boxes of its "
        "subdomains (its leaves, and where halving a box bounds better than a split) until each is decided "
        "(in the limit).",
    ),
    _activation(
        "Tanh",
        "tanh(x). Relaxed as Sigmoid is; branch and bound splits it at zero and cuts its subdomains' input "
        "boxes, as for Sigmoid.",
    ),
    _layer(
        "AvgPool2D",
        "Average pooling (zero padding counts in the average, which keeps it linear). The paper's "
        "DenseNet-100 used kernel 2 with padding 1 in its transitions.",
        "AvgPool2D",
        Param("kernel_size", SIZE, doc="Window height and width.", low=1),
        Param("stride", OneOf(INT, ListOf(INT)), None, "Stride; the kernel size when not given.", low=1),
        Param("padding", SIZE, 0, "Zero padding on each side.", low=0),
        facts=LayerFacts(shapes.pool2d, resizes=True),
    ),
    _layer(
        "MaxPool2D",
        "Max pooling; abstractly, the interval of each window's maximum.",
        "MaxPool2D",
        Param("kernel_size", SIZE, doc="Window height and width.", low=1),
        Param("stride", OneOf(INT, ListOf(INT)), None, "Stride; the kernel size when not given.", low=1),
        Param("padding", SIZE, 0, "Padding on each side.", low=0),
        facts=LayerFacts(shapes.pool2d, resizes=True),
    ),
    _layer(
        "Flatten",
        "Flattens channels, height and width into one dimension.",
        "Flatten",
        facts=LayerFacts(shapes.flatten, resizes=True),
    ),
    _layer(
        "Regroup",
        "Puts the values in another order or shape, exactly in every domain (a vector into an image, an "
        "image's channels last, and back; what ONNX's Reshape and Transpose do): the input's values, in "
        "daic's order (channels, rows, columns), are read as an array of the dimensions `view`, its axes "
        "are put in the order `axes`, and the result is read as `shape`.",
        "Regroup",
        Param("shape", ListOf(INT), doc="The output: [H, W, C] or [features].", low=1),
        Param(
            "view",
            ListOf(INT),
            None,
            "The dimensions the input's values are read as (default: its own).",
            low=1,
        ),
        Param("axes", ListOf(INT), None, "The order of `view`'s axes (default: as they are).", low=0),
        facts=LayerFacts(
            shapes.regroup, resizes=True, inputs=lambda shape, _first: {"in_shape": tuple(shape)}
        ),
    ),
    # Blocks: the paper's residual (ParNet1/ParNet2/ParSum) and concatenating (SkipNet1/SkipNet2/SkipCat)
    # branches. The lowering builds Residual and Concat from a whole block; the heads themselves lower to
    # nothing, hence no target.
    _layer(
        "ParNet1",
        "First branch of a residual block: the indented lines under it (none: identity).",
        None,
        category=Category.BLOCK,
    ),
    _layer(
        "ParNet2",
        "Second branch of a residual block: the indented lines under it (none: identity).",
        None,
        category=Category.BLOCK,
    ),
    _layer(
        "ParSum",
        "Ends a residual block: the sum of the ParNet1 and ParNet2 branches.",
        None,
        category=Category.BLOCK,
    ),
    _layer(
        "SkipNet1",
        "First branch of a concatenating block: the indented lines under it (none: identity).",
        None,
        category=Category.BLOCK,
    ),
    _layer(
        "SkipNet2",
        "Second branch of a concatenating block: the indented lines under it.",
        None,
        category=Category.BLOCK,
    ),
    _layer(
        "SkipCat",
        "Ends a concatenating block: the SkipNet1 and SkipNet2 outputs joined along the channels.",
        None,
        Param(
            "dim",
            INT,
            1,
            "The dimension to join along; 1 is channels (the only one supported).",
            low=1,
            high=1,
        ),
        category=Category.BLOCK,
    ),
    # Abstract layers (Section 3): they change only the abstract element, never the concrete output.
    _abstract(
        "CorrelateAll",
        "Turns every uncorrelated error coefficient into a new correlated one: P = {i | 0 <= i < p} "
        "(Section 3.1). The paper puts it before the last linear layer of every network.",
        "CorrelateAll",
    ),
    _abstract(
        "CorrFix",
        "CorrelateFixed_k: correlates k dimensions spread evenly, P = {floor(i*p/k) | 0 <= i < k} "
        "(Section 3.1).",
        "CorrelateFixed",
        Param("k", INT, doc="How many dimensions to correlate.", low=0, subscript=True),
        aliases=("CorrelateFixed",),
        facts=LayerFacts(correlates="k"),
    ),
    _abstract(
        "CorrMaxK",
        "CorrelateMax_k: correlates the k dimensions with the largest interval upper bounds, per example "
        "(Section 3.1).",
        "CorrelateMax",
        Param(
            "num_correlate",
            INT,
            doc="k: how many dimensions to correlate.",
            low=0,
            subscript=True,
            lower_as="k",
        ),
        aliases=("CorrelateMax",),
        facts=LayerFacts(correlates="num_correlate"),
    ),
    _abstract(
        "CorrMaxPool2D",
        "CorrelateMaxPool_{w,h,s}: correlates the dimensions that are the maximum of their pooling window, "
        "on h_C before the first layer and on h_B after it (Section 3.1).",
        "CorrelateMaxPool",
        Param("kernel_size", SIZE, doc="Window [w, h].", low=1),
        Param("stride", OneOf(INT, ListOf(INT)), None, "Stride s; the kernel size when not given.", low=1),
        facts=LayerFacts(shapes.corr_max_pool, inputs=shapes.first_layer_input),
    ),
    _abstract(
        "CorrMaxPool3D",
        "CorrelateMaxPool_{c,w,h,s}: as CorrMaxPool2D with a window spanning c channels too (Section 3.1).",
        "CorrelateMaxPool",
        Param("kernel_size", ListOf(INT), doc="Window [c, w, h].", low=1),
        Param("stride", OneOf(INT, ListOf(INT)), None, "Stride s; the kernel size when not given.", low=1),
        facts=LayerFacts(shapes.corr_max_pool, inputs=shapes.first_layer_input),
    ),
    _abstract(
        "Concretize",
        "DecorrelateAll: removes every correlated coefficient, adding its absolute value to the uncorrelated "
        "one, h'_B = h_B + sum_j |h_E,j| (Section 3.2).",
        "DecorrelateAll",
        aliases=("DecorrAll", "DecorrelateAll"),
    ),
    _abstract(
        "DecorrMin",
        "DecorrelateMin_k: removes the correlated coefficients with the smallest absolute sums over all "
        "dimensions, keeping the order of the rest (Section 3.2).",
        "DecorrelateMin",
        Param(
            "k",
            INT,
            doc="With num_to_keep: how many correlated terms remain; else how many go.",
            low=0,
            subscript=True,
        ),
        Param("num_to_keep", BOOL, True, "True: k terms are kept (the paper's DecorrelateMin_k)."),
        aliases=("DecorrelateMin",),
    ),
    _abstract(
        "DeepLoss",
        "Adds bw * L_deep,f to the training loss: for each dimension the worst overlap of its interval with "
        "the others' (Section 3.3), computed with a sort in O(n log n).",
        "DeepLoss",
        Param(
            "bw", SCHEDULE, doc="The loss weight, a schedule of the training time.", low=0, lower_as="weight"
        ),
        Param("act", ACTIVATION, "relu", "The positive activation f."),
    ),
    # TAPS's only_train defaults to True, unlike the other abstract layers': its margins are estimates, so
    # it may only shape training (the checker refuses only_train=False, E210).
    _layer(
        "TAPS",
        "The split of TAPS (Mao et al., NeurIPS 2023): the layers before it, the feature extractor, are "
        "trained with the goal's interval bounds (a Box goal's boxes, or hybrid zonotopes, propagate up to "
        "it); the layers after it, the classifier, with a latent-space attack. For each class j != t, PGD "
        "finds the point of the latent box [l, u] with the largest y_j - y_t; a gradient connector links "
        "the points back to l and u; the loss is the product of the cross-entropies of these TAPS margins "
        "(its gradient expanded by grad_scale) and of the IBP margins of the same box. Only while training: "
        "at test time, for points and for CROWN-IBP's linear relaxation it is the identity. One per network, "
        "on the main path (not inside a branch).",
        "TAPS",
        Param("steps", INT, 20, "PGD steps of the latent attack.", low=1),
        Param(
            "restarts",
            INT,
            1,
            "Random restarts of the latent attack; the best point per class is kept.",
            low=1,
        ),
        Param(
            "grad_scale",
            FLOAT,
            5.0,
            "TAPS's alpha: the gradient of the TAPS factor of the loss is multiplied by it.",
            low=0,
            low_open=True,
        ),
        Param(
            "soft",
            FLOAT,
            0.5,
            "The gradient connector's c: a point within c * (u - l) of a face of the box moves with it.",
            low=0,
            high=1,
            low_open=True,
        ),
        Param(
            "start",
            FLOAT,
            0.0,
            "The training time (fractional epoch) from which TAPS acts; before it the layer passes its "
            "input on, so the whole network trains with plain IBP (as TAPS does while epsilon ramps up).",
            low=0,
        ),
        Param(
            "only_train",
            BOOL,
            True,
            "Must be True: TAPS acts while training and is skipped at test time (verification).",
        ),
        category=Category.ABSTRACT_LAYER,
    ),
]
