"""The server itself: it answers over TCP as over stdio, a handler that fails answers with an empty
result instead of an error, and a client with no capabilities at all gets answers it can read."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from contextlib import asynccontextmanager

import pytest
from lsprotocol import types as T
from pygls.lsp.client import LanguageClient

from daic.compiler.lsp.server import DaicLanguageServer, safe

from .conftest import QUICKSTART, SERVER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def connect(port: int) -> LanguageClient:
    client = LanguageClient("tcp-test", "1")
    client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
    for _ in range(200):  # the server needs a moment to import and listen
        try:
            await client.start_tcp("127.0.0.1", port)
            return client
        except OSError:
            await asyncio.sleep(0.05)
    raise TimeoutError("the server never listened")


@pytest.mark.asyncio
async def test_tcp_transport():
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "daic.compiler.lsp", "--tcp", f"127.0.0.1:{port}"])
    try:
        client = await connect(port)
        result = await client.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities()))
        assert result.server_info.name == "daic"
        assert result.capabilities.hover_provider
        client.initialized(T.InitializedParams())
        path = QUICKSTART
        uri, text = path.as_uri(), path.read_text()
        client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "dai", 1, text)))
        line = next(i for i, line in enumerate(text.splitlines()) if "goal = Mix(" in line)
        position = T.Position(line, text.splitlines()[line].index("Mix") + 1)
        hover = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), position))
        assert "Mix(g1: Goal, g2: Goal, weight: Schedule) -> Goal" in hover.contents.value
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
    finally:
        server.terminate()
        server.wait(10)


def test_a_failing_handler_answers_empty():
    @safe(list)
    def broken(ls: DaicLanguageServer, params: object) -> list:
        raise RecursionError("deep")

    assert broken(None, None) == []


@asynccontextmanager
async def plain_client(name: str):
    """A client that declares no capabilities (so gets document symbols as a flat list), started and
    initialised; stopped after the block, also after a failed assertion (stop() waits for the server)."""
    client = LanguageClient(name, "1")
    client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
    await client.start_io(*SERVER)
    try:
        await client.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities()))
        client.initialized(T.InitializedParams())
        yield client
    finally:
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()


async def symbols_of(client, uri: str, text: str):
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "dai", 1, text)))
    return await client.text_document_document_symbol_async(
        T.DocumentSymbolParams(T.TextDocumentIdentifier(uri=uri))
    )


@pytest.mark.asyncio
async def test_clients_without_nested_symbols_get_a_flat_list():
    async with plain_client("flat-symbols") as client:
        uri, text = QUICKSTART.as_uri(), QUICKSTART.read_text()
        found = await symbols_of(client, uri, text)
        assert all(isinstance(s, T.SymbolInformation) for s in found)
        assert [(s.name, s.container_name) for s in found][:4] == [
            ("stdlib.goals", None),
            ("Quickstart", None),
            ("net", "Quickstart"),
            ("data", "Quickstart"),
        ]
        scheme = found[1]
        assert scheme.location.uri == uri
        assert scheme.location.range.start == T.Position(text[: text.index("scheme Q")].count("\n"), 0)


@pytest.mark.asyncio
async def test_a_study_is_a_symbol_with_its_fields(tmp_path):
    async with plain_client("study-symbols") as client:
        text = "scheme S {\n    data = Digits\n}\n\nstudy T tunes S {\n    trials = 4\n}\n"
        found = await symbols_of(client, (tmp_path / "study.dai").as_uri(), text)
        assert [(s.name, s.container_name) for s in found] == [
            ("S", None),
            ("data", "S"),
            ("T", None),
            ("trials", "T"),
        ]
