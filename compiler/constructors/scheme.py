"""The fields of a `scheme { ... }`: declared like a constructor's parameters, so that unknown, repeated and
missing fields, types and ranges are checked by the same code as a call's arguments."""

from __future__ import annotations

from daic.compiler.registry import Category, Constructor, Param
from daic.compiler.types import (
    BOOL,
    DATASET,
    FLOAT,
    GOAL,
    INT,
    LR_SCHEDULE,
    OPTIMIZER,
    SCHEDULE,
    SCHEME,
    STR,
    TEST,
    ListOf,
)

SCHEME_DECL = Constructor(
    "scheme",
    Category.SCHEME,
    SCHEME,
    (
        Param("net", STR, None, "The network file, relative to this file (the CLI's --net overrides it)."),
        Param(
            "weights",
            STR,
            None,
            "A checkpoint (of `daic run`, or `daic import`'s of an ONNX network) whose network weights "
            "training starts from, relative to this file: fine-tuning. Not given: a fresh initialisation.",
        ),
        Param("data", DATASET, doc="The data set.", fixed="every trial of a study learns from the same data"),
        Param(
            "epsilon",
            SCHEDULE,
            doc="The L-infinity radius trained and certified; may be a schedule.",
            low=0,
            low_open=True,
        ),
        Param("goal", GOAL, doc="The training goal (Table 2)."),
        Param("epochs", INT, doc="Training epochs.", low=1),
        Param("batch", INT, 50, "Examples per batch.", low=1),
        Param("optimizer", OPTIMIZER, "Adam", "The optimizer; Adam(lr=0.001) when not given."),
        Param("lr", LR_SCHEDULE, None, "Learning-rate steps, e.g. Steps(at=[10, 20, 250, 300])."),
        Param(
            "test",
            ListOf(TEST),
            ("Accuracy", "Verify"),
            "What to measure on the test set.",
            fixed="a study's objectives are the scheme's tests, the same in every trial",
        ),
        Param(
            "validation",
            FLOAT,
            0,
            "Hold out this share of the training set (the same images on every run: its last share after "
            "a shuffle with seed 0), train on the rest and test on it instead of the test set. `daic tune` "
            "sets it from its study's `validation`, so that tuning never reads the test set.",
            low=0,
            high=0.9,
            fixed="a study sets it from its own `validation`",
        ),
        Param(
            "test_every",
            INT,
            None,
            "Also evaluate every N epochs; by default only after the last (each evaluation attacks and "
            "certifies the whole test set, which takes minutes on the paper's networks).",
            low=1,
        ),
        Param(
            "relu",
            STR,
            "hybrid",
            'The hybrid zonotope ReLU: the reference\'s "hybrid" or the tighter "deepz".',
            choices=("hybrid", "deepz"),
        ),
        Param(
            "bn_stats",
            STR,
            "clean",
            "Where a training step's BatchNorm statistics come from, fixed for the whole step: "
            '"clean", the clean batch (as CTBench); "centres", for each abstract part of the goal, '
            "the centres of its boxes (for SABR, the adversarial points, as De Palma et al.).",
            choices=("clean", "centres"),
        ),
        Param(
            "precise_bn",
            BOOL,
            False,
            "Precise-BN: after every epoch, BatchNorm's population statistics are measured again over the "
            "training set (an equal-weight average over its batches) instead of the momentum average.",
        ),
        Param(
            "warmup_reg",
            FLOAT,
            0,
            "lambda of the warm-up regularisers of Shi et al. (NeurIPS 2021): while epsilon is below its "
            "final value, lambda * (1 - eps / final eps) * (L_tightness + L_relu) is added to the loss, "
            "from the interval bounds of every ReLU's input over the step's epsilon-box (tau = 0.5). "
            "Those bounds are read off the goal's own pass when the goal has that box as a part (Box, "
            "Mix(Point, Box, w)), else an extra interval pass computes them. "
            "Their setting: 0.5 (0.2 on TinyImageNet).",
            low=0,
        ),
        Param(
            "l1",
            FLOAT,
            0,
            "Adds l1 * sum |w| over the Conv2D and Linear weights to the loss (biases and BatchNorm are "
            "not counted, as in CTBench).",
            low=0,
        ),
        Param(
            "grad_clip",
            FLOAT,
            None,
            "Clips the gradient's norm over all parameters to this value before each step (CTBench: 10).",
            low=0,
            low_open=True,
        ),
        Param("seed", INT, 0, "Seed of every random number generator.", low=0),
    ),
    "A training scheme: what to train, on what, how long, and what to measure.",
    "daic.runtime.training.scheme:Scheme",
)

DECLARATIONS = [SCHEME_DECL]
