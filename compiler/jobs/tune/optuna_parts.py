"""The runtime objects of a study's sampler and pruner: Optuna's, built from their declarations
(`compiler/constructors/search.py`). Each sampler is given the study's grid of finite spaces (only Grid
reads it) and its declared arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import optuna

# Every parameter's values, where all are finite; None where a space is continuous or conditional.
Grid = Mapping[str, Sequence[object]] | None


class GridError(Exception):
    """A Grid sampler over a space it cannot list."""


def tpe(grid: Grid, startup: int = 10, multivariate: bool = True, seed: int = 0):
    return optuna.samplers.TPESampler(n_startup_trials=startup, multivariate=multivariate, seed=seed)


def nsga2(grid: Grid, population: int = 20, seed: int = 0):
    return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)


def random(grid: Grid, seed: int = 0):
    return optuna.samplers.RandomSampler(seed=seed)


def grid(grid: Grid, seed: int = 0):
    if grid is None:
        raise GridError("Grid takes only Choice and IntRange spaces, none inside a Choice's option")
    return optuna.samplers.GridSampler(dict(grid), seed=seed)


def median(startup: int = 5, warmup: int = 0):
    return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=warmup)
