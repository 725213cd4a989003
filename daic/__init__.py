"""daic: certified training of neural networks from `.net` and `.dai` sources.

The pipeline lives in sibling packages: ``daic.dsl`` (syntax) -> ``daic.compiler`` (meaning, CLI,
language server) -> ``daic.runtime`` (PyTorch). ``daic.stdlib`` holds the paper's networks and schemes.
"""

__version__ = "0.1.0"
