"""Syntax of the .net and .dai languages: grammars, parser, AST with spans, formatter."""
