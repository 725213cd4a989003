"""Every declaration of the language, gathered into the one registry."""

from __future__ import annotations

from daic.compiler.constructors import data, layers, objectives, scheme, search, training
from daic.compiler.constructors.scheme import SCHEME_DECL
from daic.compiler.constructors.search import STUDY_DECL
from daic.compiler.registry import Registry

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
