"""`python -m daic.compiler.lsp [--tcp HOST:PORT]`: the language server, as `daic lsp` starts it."""

from __future__ import annotations

import argparse

from daic.compiler.lsp.server import main


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="daic lsp", description="The daic language server (stdio by default)."
    )
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP socket instead of stdin/stdout")
    main(parser.parse_args(argv).tcp)


if __name__ == "__main__":
    run()
