"""The `daic` command line: `cli.py` declares the commands; each command that does more than call the
checker has its module here (`run/` and `tune/` their folders)."""
