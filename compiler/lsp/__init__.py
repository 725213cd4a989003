"""The language server (`daic lsp`): diagnostics, hover, completion, signature help, definitions, symbols,
formatting and quick fixes for `.net` and `.dai` files, each answered by the compiler's own pieces.

One feature per module; `server` wires them to pygls and `main(tcp)` starts it.
"""
