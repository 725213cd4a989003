"""Fixtures for the language server's tests: the real server over stdio, driven by pytest-lsp with the
captured capabilities of two editors. VS Code speaks UTF-16 positions; the latest Neovim offers UTF-8
first, so every test runs under two position encodings.

One server per editor serves the whole session (each test closes the documents it opens): starting a
server costs about as much as all the requests of a test module."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from tests.paths import ROOT

DATA = Path(__file__).parent / "data"  # a scheme and its network, frozen for these tests
QUICKSTART = DATA / "quickstart.dai"
DIGITS = DATA / "digits_conv.net"
SERVER = [sys.executable, "-m", "daic.compiler.lsp"]
EDITORS = ["visual-studio-code", "neovim"]
TIMEOUT_S = 10


def _record_diagnostics(client: LanguageClient, params: T.PublishDiagnosticsParams) -> None:
    client.diagnostics[params.uri] = params.diagnostics
    client.published[params.uri] = params.version
    client.publications.append((params.uri, params.version))


def make_client() -> LanguageClient:
    """pytest-lsp's test client, also recording the document version each set of diagnostics is for."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = {}
    client.publications = []
    register_lsp_features(
        client, {**DEFAULT_CLIENT_FEATURES, T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS: _record_diagnostics}
    )
    return client


class Editor:
    """A test client with the few moves the tests make: open and edit documents, and name positions by a
    marker in the text rather than by line and character."""

    def __init__(self, client: LanguageClient, encoding: str) -> None:
        self.client = client
        self.encoding = encoding
        self.versions: dict[str, int | None] = {}

    # --- positions, computed independently of the server's own conversion -------------------------------

    def units(self, text: str) -> int:
        if self.encoding == "utf-8":
            return len(text.encode("utf-8"))
        if self.encoding == "utf-16":
            return len(text.encode("utf-16-le")) // 2
        return len(text)

    def position(self, text: str, offset: int) -> T.Position:
        # Lines end at `\r\n`, `\r` or `\n`, as the protocol says.
        breaks = list(re.finditer(r"\r\n|\r|\n", text[:offset]))
        start = breaks[-1].end() if breaks else 0
        return T.Position(len(breaks), self.units(text[start:offset]))

    def offset(self, text: str, position: T.Position) -> int:
        """The code-point offset of a position, as a client finds it: its line, then units into it."""
        starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
        if position.line >= len(starts):
            return len(text)
        offset = starts[position.line]
        while offset < len(text) and text[offset] not in "\r\n":
            if self.units(text[starts[position.line] : offset + 1]) > position.character:
                break
            offset += 1
        return offset

    def apply(self, text: str, edits: list[T.TextEdit]) -> str:
        """The text after the edits, applied as a client applies them (the last one first)."""
        spans = [(self.offset(text, e.range.start), self.offset(text, e.range.end), e) for e in edits]
        for start, end, edit in sorted(spans, key=lambda s: s[:2], reverse=True):
            text = text[:start] + edit.new_text + text[end:]
        return text

    def at(self, text: str, marker: str, shift: int = 0) -> T.Position:
        """The position of the first `marker` in `text`, moved `shift` code points right."""
        return self.position(text, text.index(marker) + shift)

    def range(self, text: str, start: int, end: int) -> T.Range:
        return T.Range(self.position(text, start), self.position(text, end))

    # --- documents -------------------------------------------------------------------------------------

    async def open(self, path: Path, text: str | None = None) -> str:
        """Open `path` (with `text`, or its contents) and wait for its diagnostics."""
        uri = path.as_uri()
        text = path.read_text() if text is None else text
        self.versions[uri] = 1
        language = "daic-net" if path.suffix == ".net" else "dai"
        self.client.text_document_did_open(
            T.DidOpenTextDocumentParams(
                T.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)
            )
        )
        await self.diagnostics(uri)
        return uri

    def send(self, uri: str, text: str) -> None:
        """Send the new text (the server asks for full synchronisation) without waiting."""
        self.versions[uri] += 1
        self.client.text_document_did_change(
            T.DidChangeTextDocumentParams(
                T.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
                [T.TextDocumentContentChangeWholeDocument(text=text)],
            )
        )

    async def change(self, uri: str, text: str) -> list[T.Diagnostic]:
        """Send the new text and wait for its diagnostics."""
        self.send(uri, text)
        return await self.diagnostics(uri)

    def folders(self, added: list[Path] = (), removed: list[Path] = ()) -> None:
        """Add and remove workspace folders (the server's requests across the workspace read them)."""
        change = T.WorkspaceFoldersChangeEvent(
            added=[T.WorkspaceFolder(p.as_uri(), p.name) for p in added],
            removed=[T.WorkspaceFolder(p.as_uri(), p.name) for p in removed],
        )
        self.client.workspace_did_change_workspace_folders(T.DidChangeWorkspaceFoldersParams(change))

    def close(self, uri: str) -> None:
        # The diagnostics that clear a closed document come without a version.
        self.versions[uri] = None
        self.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri=uri)))

    async def wait_until(self, uri: str, holds) -> list[T.Diagnostic]:
        """The diagnostics of `uri` once they satisfy `holds` (they come after another document's edit)."""

        async def arrived() -> None:
            while not holds(list(self.client.diagnostics.get(uri, []))):
                await asyncio.sleep(0.005)

        await asyncio.wait_for(arrived(), TIMEOUT_S)
        return list(self.client.diagnostics[uri])

    async def diagnostics(self, uri: str) -> list[T.Diagnostic]:
        """The diagnostics of the document's current version, once they arrive."""
        missing = object()

        async def arrived() -> None:
            while self.client.published.get(uri, missing) != self.versions[uri]:
                await asyncio.sleep(0.005)

        await asyncio.wait_for(arrived(), TIMEOUT_S)
        return list(self.client.diagnostics[uri])


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=SERVER, client_factory=make_client),
    params=EDITORS,
    scope="session",
)
async def client(lsp_client: LanguageClient, request: pytest.FixtureRequest):
    params = T.InitializeParams(capabilities=client_capabilities(request.param), root_uri=ROOT.as_uri())
    result = await lsp_client.initialize_session(params)
    encoding = result.capabilities.position_encoding or "utf-16"
    lsp_client.encoding = str(getattr(encoding, "value", encoding))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture(scope="session")
def editor(client: LanguageClient) -> Editor:
    return Editor(client, client.encoding)
