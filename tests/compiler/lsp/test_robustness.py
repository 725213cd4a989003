"""Any text, however broken, and any position get an answer (or an empty one), never an error or a hang.

Two levels: the feature functions themselves, called in-process on many mutated documents (so that a bug
is found, not just swallowed by the server's handler guard); and the real server over stdio, fed random
edits and every kind of request, each of which must be answered in time and without an error."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import Future

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException

from daic.compiler.checking.check import check_source
from daic.compiler.checking.sources import Source
from daic.compiler.lsp import code_actions, completion, definition, formatting, hover, signature_help, symbols
from daic.compiler.lsp.documents import Analyses, document_for

from .conftest import DATA, DIGITS, QUICKSTART, ROOT

SEEDS = [
    (QUICKSTART, None),
    # A base from the library: its network is inherited, not re-checked on each edit.
    (
        DATA / "extends.dai",
        "import stdlib.schemes\nscheme Mine extends Baseline {\n  epochs = 3\n}\n",
    ),
    (DIGITS, None),
    (ROOT / "tests" / "data" / "listings" / "resnettiny_none.net", None),
    (ROOT / "tests" / "data" / "listings" / "skipnet18_combo.net", None),
    (
        DATA / "edits.dai",
        "import stdlib.goals as g\nlet e = 8/255\nlet x = Sample(e, g.Baseline, ",
    ),
    # Search spaces and a study of them.
    (
        DATA / "study.dai",
        "let lr = LogRange(1e-4, 1e-2)\nscheme S {\n  data = Digits\n  epsilon = Range(0.05, 0.2)\n"
        "  goal = Mix(Point, Box, Choice([0.3, 0.7]))\n  epochs = IntRange(2, 6, 2)\n"
        "  optimizer = Adam(lr=lr)\n}\nstudy T tunes S {\n  trials = 4\n  objectives = [Accuracy]\n"
        "  sampler = NSGAII(population=4)\n}\n",
    ),
]
# Pieces of the languages and of what breaks them: brackets, quotes, comments, indentation, keywords,
# characters outside the BMP and combining marks, the paper's printing errors.
SNIPPETS = [
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "study ",
    " tunes ",
    "Choice([",
    ",",
    "=",
    ".",
    '"',
    "#",
    "\n",
    "    ",
    "\t",
    "\r\n",
    "-",
    "/",
    "*",
    "let ",
    "import ",
    "scheme ",
    "extends ",
    "Mix(",
    "Box",
    "Lin(0, 1, ",
    "%s",
    "<function relu at 0x1>",
    "ParNet1\n",
    "    ReLU\n",
    "SkipCat dim=1",
    "input_shape=[",
    "🙂",
    "é",
    "\u0301",
    "𝔁",
    "\x00",
    "1e999",
]
text_pieces = st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=6))
# An edit: where (as fractions of the text) to cut, and what to put there.
edits = st.lists(
    st.tuples(st.floats(0, 1), st.floats(0, 0.2), st.lists(text_pieces, max_size=4).map("".join)),
    max_size=6,
)


def apply(text: str, changes) -> str:
    for where, length, insert in changes:
        start = int(where * len(text))
        end = min(len(text), start + int(length * len(text)))
        text = text[:start] + insert + text[end:]
    return text


# Shared, as in the server: a document's imports are checked once and reused while their files are unchanged.
ANALYSES = Analyses()


def seed_text(index: int) -> tuple[str, str]:
    path, text = SEEDS[index]
    return str(path), path.read_text() if text is None else text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, len(SEEDS) - 1),
    changes=edits,
    offsets=st.lists(st.floats(0, 1), min_size=1, max_size=4),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-32"]),
)
def test_features_answer_on_any_text(seed, changes, offsets, encoding):
    path, text = seed_text(seed)
    text = apply(text, changes)
    analysis = ANALYSES.get(document_for("file://" + path, text, path), encoding)
    # The server reports exactly what the compiler reports.
    assert (
        analysis.report.diagnostics
        == check_source(Source(path, analysis.document.language, text)).diagnostics
    )
    markdown = T.MarkupKind.Markdown
    for fraction in offsets:
        offset = int(fraction * len(text))
        position = analysis.positions.position(offset)
        # Between the `\r` and the `\n` of a line break is the end of the line.
        inside_break = 0 < offset < len(text) and text[offset - 1 : offset + 1] == "\r\n"
        assert analysis.positions.offset(position) == offset - inside_break
        hover.hover(analysis, offset, markdown)
        completion.complete(analysis, offset, markdown)
        signature_help.signature_help(analysis, offset, markdown)
        definition.definition(analysis, offset, lambda p: None)
        code_actions.code_actions(analysis, offset, len(text))
    symbols.document_symbols(analysis)
    formatting.format_document(analysis)


def position_of(editor, text: str, fraction: float) -> T.Position:
    return editor.position(text, int(fraction * len(text)))


def request(client, document: T.TextDocumentIdentifier, kind: str, position: T.Position):
    """The coroutine of one request of `kind` at `position`."""
    if kind == "hover":
        return client.text_document_hover_async(T.HoverParams(document, position))
    if kind == "completion":
        return client.text_document_completion_async(T.CompletionParams(document, position))
    if kind == "signature":
        return client.text_document_signature_help_async(T.SignatureHelpParams(document, position))
    if kind == "definition":
        return client.text_document_definition_async(T.DefinitionParams(document, position))
    if kind == "symbols":
        return client.text_document_document_symbol_async(T.DocumentSymbolParams(document))
    if kind == "format":
        options = T.FormattingOptions(tab_size=4, insert_spaces=True)
        return client.text_document_formatting_async(T.DocumentFormattingParams(document, options))
    whole = T.Range(T.Position(0, 0), position)
    return client.text_document_code_action_async(
        T.CodeActionParams(document, whole, T.CodeActionContext([]))
    )


requests = st.lists(
    st.tuples(
        st.sampled_from(["hover", "completion", "signature", "definition", "symbols", "format", "actions"]),
        st.floats(0, 1),
        # Positions past the end of a line or of the text must be clamped, as the protocol says.
        st.sampled_from([0, 0, 0, 1, 1000]),
    ),
    min_size=1,
    max_size=5,
)


@pytest.mark.asyncio(loop_scope="session")
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    seed=st.integers(0, len(SEEDS) - 1), steps=st.lists(st.tuples(edits, requests), min_size=1, max_size=3)
)
async def test_server_answers_random_edits_and_requests(editor, seed, steps):
    path, text = seed_text(seed)
    uri = await editor.open(DATA / ("fuzz" + path[-4:]), text)
    document = T.TextDocumentIdentifier(uri=uri)
    for changes, asks in steps:
        text = apply(text, changes)
        editor.send(uri, text)
        for kind, fraction, overshoot in asks:
            position = position_of(editor, text, fraction)
            position = T.Position(position.line + (overshoot == 1000), position.character + overshoot)
            await asyncio.wait_for(request(editor.client, document, kind, position), 10)
    # The last text's diagnostics arrive, and are the compiler's.
    got = await editor.diagnostics(uri)
    expected = check_source(Source(str(DATA / ("fuzz" + path[-4:])), path[-3:], text)).diagnostics
    assert [(d.code, d.range) for d in got] == [
        (d.code.id, editor.range(text, d.span.start, d.span.end)) for d in expected
    ]
    assert editor.client.error is None
    editor.close(uri)


INVALID = [
    ("textDocument/hover", {"position": {"line": -1, "character": 0}}),
    ("textDocument/hover", {"position": {"line": 0, "character": -5}}),
    ("textDocument/completion", {"position": {"line": 10**12, "character": 0}}),
    ("textDocument/definition", {"position": "the start"}),
    ("textDocument/hover", {"textDocument": "not an object"}),
    ("textDocument/signatureHelp", [1, 2]),
    ("textDocument/formatting", None),
    ("textDocument/codeAction", {"range": {"start": {"line": -3, "character": 0}, "end": {"line": 0}}}),
]


def raw_request(client, method: str, params) -> asyncio.Future:
    """A request sent as given, unchecked against the protocol's types, as a faulty client sends it."""
    msg_id = str(uuid.uuid4())
    answer: Future = Future()
    client.protocol._request_futures[msg_id] = answer
    client.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return asyncio.wrap_future(answer)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(("method", "params"), INVALID, ids=[f"{m}-{i}" for i, (m, _) in enumerate(INVALID)])
async def test_invalid_requests_are_answered_with_an_error(editor, tmp_path, method, params):
    uri = await editor.open(tmp_path / "a.dai", "let g = Mix(Point, Box, 0.5)\n")
    if isinstance(params, dict):
        params = {"textDocument": {"uri": uri}, **params}
    try:
        answer = raw_request(editor.client, method, params)
        with pytest.raises(JsonRpcException) as raised:
            await asyncio.wait_for(answer, 10)
        assert raised.value.code == -32602  # Invalid Params
        assert method in raised.value.message
        # The server goes on answering.
        hover = await editor.client.text_document_hover_async(
            T.HoverParams(T.TextDocumentIdentifier(uri=uri), T.Position(0, 9))
        )
        assert "Mix(g1: Goal" in hover.contents.value
    finally:
        editor.close(uri)


@pytest.mark.asyncio(loop_scope="session")
async def test_the_largest_positions_are_clamped(editor, tmp_path):
    uri = await editor.open(tmp_path / "b.dai", "let g = Mix(Point, Box, 0.5)\n")
    document = T.TextDocumentIdentifier(uri=uri)
    largest = 2**31 - 1
    for kind in ("hover", "completion", "signature", "definition", "actions"):
        await asyncio.wait_for(request(editor.client, document, kind, T.Position(largest, largest)), 10)
        await asyncio.wait_for(request(editor.client, document, kind, T.Position(0, largest)), 10)
    editor.close(uri)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_document_whose_path_the_system_refuses_costs_the_others_nothing(editor, tmp_path):
    # A NUL in the path: no file system looks it up, and the other documents still get their answers.
    odd = T.TextDocumentItem(
        uri="file:///tmp/odd%00name.dai", language_id="dai", version=1, text="let g = Boxx\n"
    )
    editor.versions[odd.uri] = 1
    editor.client.text_document_did_open(T.DidOpenTextDocumentParams(odd))
    assert [d.code for d in await editor.diagnostics(odd.uri)] == ["E101"]
    uri = await editor.open(tmp_path / "c.dai", "let g = Mix(Point, Box, 0.5)\n")
    hover = await editor.client.text_document_hover_async(
        T.HoverParams(T.TextDocumentIdentifier(uri=uri), T.Position(0, 9))
    )
    editor.close(uri)
    editor.close(odd.uri)
    assert "Mix(g1: Goal" in hover.contents.value
