"""daic: certified training of neural networks from `.net` and `.dai` sources.

The pipeline lives in sibling packages: ``daic.dsl`` (syntax) -> ``daic.compiler`` (meaning, CLI,
language server) -> ``daic.runtime`` (PyTorch). ``daic.stdlib`` holds the paper's networks and schemes.
"""

from daic.version import __version__

API = (
    "DaicError",
    "check",
    "check_reports",
    "check_text",
    "format_files",
    "format_text",
    "describe_network",
    "init",
    "load_scheme",
    "train",
    "load_study",
    "tune",
    "load_network",
    "load_data",
    "import_onnx",
    "write_import",
    "certify",
    "verify",
    "verify_vnnlib",
    "verify_properties",
    "export",
    "export_onnx",
)
"""The Python API (`daic.api`), loaded on first use so that `import daic` stays light (no torch)."""

__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name in API:
        from daic import api

        return getattr(api, name)
    raise AttributeError(f"module 'daic' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names and the API's, which load on first use."""
    return sorted({*globals(), *API})
