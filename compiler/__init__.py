"""Meaning and front doors: checking, diagnostics rendering, the command line (and, later, lowering and
the language server). Nothing here imports torch at module level, so `daic check` starts fast."""
