"""`python -m daic` (and `torchrun -m daic`) runs the command-line interface."""

from daic.compiler.commands.cli import main

if __name__ == "__main__":
    main()
