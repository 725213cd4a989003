"""Signature help inside a call (every declaration of the callee, the argument's parameter active) and on a
.net layer line (the layer's parameters, the one whose value is being typed active)."""

from __future__ import annotations

from lsprotocol import types as T

from daic.compiler.lsp.cursor import context
from daic.compiler.lsp.documents import Analysis
from daic.compiler.lsp.expected import call_slots, layer_decl
from daic.compiler.lsp.markup import Doc, constructor_doc
from daic.compiler.registry import Constructor

TRIGGERS = ["(", ",", "="]
RETRIGGERS = [" "]


def signature_help(analysis: Analysis, offset: int, markup: T.MarkupKind) -> T.SignatureHelp | None:
    ctx = context(analysis.text, offset, analysis.document.language)
    if ctx.where in ("comment", "string"):
        return None
    frame = ctx.call()
    if frame is not None:
        slots = call_slots(frame)
        if not slots:
            return None
        signatures = [_signature(s.decl, s.index, markup) for s in slots]
        active = next((i for i, s in enumerate(slots) if s.index is not None), 0)
        return T.SignatureHelp(signatures, active_signature=active, active_parameter=slots[active].index)
    if analysis.document.language == "net" and not ctx.frames and ctx.where in ("param", "value"):
        decl = layer_decl(ctx.layer)
        if decl is None:
            return None
        param = decl.param(ctx.key) if ctx.key and ctx.where == "value" else None
        index = decl.params.index(param) if param is not None else None
        return T.SignatureHelp([_signature(decl, index, markup)], active_signature=0, active_parameter=index)
    return None


def _signature(decl: Constructor, active: int | None, markup: T.MarkupKind) -> T.SignatureInformation:
    doc = constructor_doc(decl)
    # The signature itself is the label; the documentation is the prose and the parameter list.
    doc.parts = doc.parts[1:]
    return T.SignatureInformation(
        label=decl.signature(),
        documentation=doc.content(markup),
        parameters=[
            T.ParameterInformation(label=p.signature_text(), documentation=Doc().text(p.doc).content(markup))
            for p in decl.params
        ],
        active_parameter=active,
    )
