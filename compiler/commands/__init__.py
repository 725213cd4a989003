"""The `daic` command line: `cli.py` declares the commands; they parse options, call `daic.api` (whose
work lives in `compiler/jobs/`), print and map failures to exit codes. Modules here hold what only the
command line does: rendering diagnostics, tables and live displays, choosing threads."""
