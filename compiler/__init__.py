"""Meaning and front doors, in three folders: `checking/` (sources to checked structures and diagnostics),
`commands/` (the `daic` command line, `daic run` and `daic tune` among them) and `lsp/` (the language
server), around what all three read: the registry (`registry.py`, `constructors/`, `types.py`), lowering to
the runtime (`lower.py`), and documentation generated from the registry (`docs.py`). `exchange/` reads and
writes the field's formats (ONNX, VNN-LIB). Nothing here imports torch at module level, so `daic check`
starts fast."""
