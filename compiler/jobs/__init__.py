"""The work behind daic's commands, for the library (`daic.api`) and the command line alike: a run
(`run/`), a study (`tune/`), a test set's or VNN-LIB properties' certification, checkpoints and export.
Nothing here prints to a terminal or reads the command line: a caller hands in its display."""
