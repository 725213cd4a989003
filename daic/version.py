"""daic's version, in a module of its own: what records and the language server name, read without loading
the package's API."""

__version__ = "0.1.0"
