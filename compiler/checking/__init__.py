"""Checking: source files read and parsed, names resolved, networks given a shape on every layer, and
expressions elaborated against the registry into checked values; problems come out as diagnostics."""
