"""Tuning: search spaces (values a study chooses), samplers and pruners (Optuna's), and a study's fields.

A search space stands wherever a value of its element type may; the checker types it by what it ranges
over and holds both ends of a range (every option of a Choice) to the range of the parameter it stands for.
`daic run` refuses a scheme that still holds one; `daic tune` runs a study that picks its values.
"""

from __future__ import annotations

from daic.compiler.registry import Category, Constructor, Param, SpaceFacts
from daic.compiler.types import ANY, BOOL, FLOAT, INT, PRUNER, SAMPLER, STUDY, TEST, ListOf

TUNE = "daic.compiler.jobs.tune.optuna_parts:"

SPACES = [
    Constructor(
        "Range",
        Category.SPACE,
        FLOAT,
        (
            Param("low", FLOAT, doc="The smallest value."),
            Param("high", FLOAT, doc="The largest value (greater than `low`)."),
        ),
        "A search space: a number in [low, high], every part of it as likely (Optuna's "
        "suggest_float). Stands wherever a Float may (`Adam(lr=Range(1e-4, 1e-2))`).",
        None,
        space=SpaceFacts(),
    ),
    Constructor(
        "LogRange",
        Category.SPACE,
        FLOAT,
        (
            Param("low", FLOAT, doc="The smallest value (> 0).", low=0, low_open=True),
            Param("high", FLOAT, doc="The largest value (greater than `low`).", low=0, low_open=True),
        ),
        "A search space: a number in [low, high] whose logarithm is uniform, for scales such as a "
        "learning rate (Optuna's suggest_float with log=True).",
        None,
        space=SpaceFacts(log=True),
    ),
    Constructor(
        "IntRange",
        Category.SPACE,
        INT,
        (
            Param("low", INT, doc="The smallest value."),
            Param("high", INT, doc="The largest value; `high - low` a multiple of `step`."),
            Param("step", INT, 1, "The spacing of the values.", low=1),
        ),
        "A search space: one of the integers low, low + step, ..., high (Optuna's suggest_int). Stands "
        "wherever an Int or a Float may (`epochs = IntRange(10, 40, 10)`).",
        None,
        space=SpaceFacts(),
    ),
    Constructor(
        "Choice",
        Category.SPACE,
        ANY,
        (Param("options", ListOf(ANY), doc="The values to choose from, all of one type."),),
        "A search space: one of the listed values, of any one type: numbers, goals, optimizers, network "
        'files (`goal = Choice([Box, SmallBox(0.4, PGD(8, 0.5))])`, `net = Choice(["a.net", "b.net"])`). '
        "An option may itself hold search spaces, which a trial draws only when it chooses that option "
        "(Optuna's suggest_categorical; each option is named by its text).",
        None,
        space=SpaceFacts(choice=True),
    ),
]

_SEED = Param("seed", INT, 0, "The seed of the sampler's random choices.", low=0)

SAMPLERS = [
    Constructor(
        "TPE",
        Category.SAMPLER,
        SAMPLER,
        (
            Param("startup", INT, 10, "Trials drawn at random before the model is used.", low=0),
            Param("multivariate", BOOL, True, "Model the parameters jointly rather than one by one."),
            _SEED,
        ),
        "Optuna's tree-structured Parzen estimator (TPESampler): one objective or several.",
        TUNE + "tpe",
    ),
    Constructor(
        "NSGAII",
        Category.SAMPLER,
        SAMPLER,
        (Param("population", INT, 20, "Trials per generation.", low=2), _SEED),
        "Optuna's NSGA-II, the genetic algorithm for Pareto fronts of several objectives (NSGAIISampler).",
        TUNE + "nsga2",
    ),
    Constructor(
        "Random",
        Category.SAMPLER,
        SAMPLER,
        (_SEED,),
        "Every trial drawn independently at random (Optuna's RandomSampler): the baseline of samplers.",
        TUNE + "random",
    ),
    Constructor(
        "Grid",
        Category.SAMPLER,
        SAMPLER,
        (_SEED,),
        "Every combination of the spaces' values once, in random order (Optuna's GridSampler); takes only "
        "Choice and IntRange spaces, none inside a Choice's option. A study of `trials` fewer than the "
        "grid's points runs that many of them.",
        TUNE + "grid",
    ),
]

PRUNERS = [
    Constructor(
        "Median",
        Category.PRUNER,
        PRUNER,
        (
            Param("startup", INT, 5, "Trials that finish before any is pruned.", low=0),
            Param("warmup", INT, 0, "Epochs of a trial before it may be pruned.", low=0),
        ),
        "Stops a trial whose objective, at an evaluation (every `test_every` epochs of its scheme), is "
        "below the median of the earlier trials' at the same epoch (Optuna's MedianPruner). One objective "
        "only: Optuna prunes no multi-objective study.",
        TUNE + "median",
    ),
]

STUDY_DECL = Constructor(
    "study",
    Category.STUDY,
    STUDY,
    (
        Param("trials", INT, 20, "How many trials end with a result (complete or pruned).", low=1),
        Param(
            "objectives",
            ListOf(TEST),
            doc="What is maximised: one or more of the scheme's tests (`[Accuracy, Verify([Box, CROWN])]`), "
            "each measured on the validation split after the trial's last epoch. Several give a Pareto "
            "front.",
        ),
        Param("sampler", SAMPLER, "TPE", "How trials choose their values (TPE, NSGAII, Random, Grid)."),
        Param(
            "pruner",
            PRUNER,
            None,
            "Stops hopeless trials early from the evaluations every `test_every` epochs (Median); none by "
            "default.",
        ),
        Param(
            "validation",
            FLOAT,
            0.2,
            "The share of the training set held out as each trial's test set, so that tuning never reads "
            "the test set; the chosen trials are evaluated on the test set once, at the end.",
            low=0,
            high=0.9,
            low_open=True,
        ),
    ),
    "A study: runs trials of a scheme whose search spaces take values chosen by the sampler, and keeps the "
    "best (or the Pareto front of several objectives). `daic tune FILE.dai` runs it.",
    None,
)

DECLARATIONS = [*SPACES, *SAMPLERS, *PRUNERS, STUDY_DECL]
