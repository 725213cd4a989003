"""onnxruntime, the runtime that daic's ONNX import, export and `sat` witnesses are checked against: one way
to open a session on an ONNX file, for every check.

A file's IR version is the format's number, which onnx raises with each release; an onnxruntime older than
the onnx that wrote the file refuses it (onnx 1.23 writes IR version 14; onnxruntime 1.30 reads up to 13,
the pair the GPU machine had on 2026-11-29), though its graph may use nothing the older format lacks. Such a
file is opened again at the least IR version its operator sets need (onnx's own table,
`onnx.helper.find_min_ir_version_for`): the same graph, run by the runtime as it is; a graph that really
needs the newer format is refused by the runtime a second time, and the first refusal is raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def onnxruntime_session(path: str | Path, threads: int | None = None) -> Any | None:
    """An onnxruntime session on the CPU of the ONNX file at `path` (with `threads` threads within an
    operator, or onnxruntime's default), or None where onnxruntime is not installed. Raises what onnxruntime
    raises for a file it cannot run."""
    try:
        import onnxruntime
    except ImportError:
        return None
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    providers = ["CPUExecutionProvider"]
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=providers)
    except Exception as refused:  # onnxruntime raises kinds of its own, none of them exported by name
        older = _at_least_ir_version(path)
        if older is None:
            raise
        # Read from memory, the model would look for its external weights (if any) in no folder: its own.
        folder = str(Path(path).resolve().parent)
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", folder)
        try:
            return onnxruntime.InferenceSession(older, options, providers=providers)
        except Exception:
            raise refused from None


def refusal_reason(exc: Exception) -> str:
    """onnxruntime's reason, from its first line: its end, where onnxruntime puts the reason after the path
    and the C++ function that refused (`Load model from F failed:/src/model.cc:202 onnxruntime::Model::Model
    (...) Unsupported model IR version: 14, max supported IR version: 13`)."""
    line = (str(exc).splitlines() or [type(exc).__name__])[0]
    function = line.find("onnxruntime::")
    opened = line.find("(", function)
    if function >= 0 and opened >= 0:  # the words after the function's parenthesised parameters
        depth = 0
        for i in range(opened, len(line)):
            depth += {"(": 1, ")": -1}.get(line[i], 0)
            if depth == 0:
                line = line[i + 1 :].strip() or line
                break
    return line if len(line) <= 200 else "..." + line[-200:]


def _at_least_ir_version(path: str | Path) -> bytes | None:
    """The file's model with the least IR version its operator sets need, serialised; None where it already
    has it or onnx cannot read the file."""
    try:
        import onnx
        from onnx.helper import find_min_ir_version_for

        model = onnx.load(str(path), load_external_data=False)
        least = find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:  # onnx's reader and table raise kinds of their own; the runtime's refusal stands
        return None
    if least >= model.ir_version:
        return None
    model.ir_version = least
    return model.SerializeToString()
