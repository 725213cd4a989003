"""Every declaration of the language, gathered into the one registry."""

from __future__ import annotations

from ..registry import Registry
from . import data, layers, objectives, scheme, search, training
from .scheme import SCHEME_DECL
from .search import STUDY_DECL

REGISTRY = Registry(
    [
        *layers.DECLARATIONS,
        *objectives.DECLARATIONS,
        *data.DECLARATIONS,
        *training.DECLARATIONS,
        *scheme.DECLARATIONS,
        *search.DECLARATIONS,
    ]
)

__all__ = ["REGISTRY", "SCHEME_DECL", "STUDY_DECL"]
