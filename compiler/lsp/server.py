"""`daic lsp`: the language server, a pygls adapter over the compiler.

Each handler converts the client's position to an offset, asks the document's `Analysis` (the compiler's
`check_source` result, cached per text) through one of the feature modules, and converts the answer
back. Handlers never raise: a failure is logged and answered with an empty result, so that no text, however
broken, costs the editor its server.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cattrs import ClassValidationError, transform_error
from lsprotocol import types as T
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.uris import from_fs_path, to_fs_path, uri_scheme

from daic.compiler.checking.program import path_key
from daic.compiler.lsp import (
    code_actions,
    completion,
    definition,
    formatting,
    hover,
    references,
    semantic_tokens,
    signature_help,
    symbols,
    workspace,
)
from daic.compiler.lsp.diagnostics import lsp_diagnostics
from daic.compiler.lsp.documents import Analyses, Analysis, document_for
from daic.compiler.lsp.markup import client_kind
from daic.compiler.lsp.positions import PositionMap
from daic.version import __version__

logger = logging.getLogger("daic.lsp")

# Re-check this long after the last keystroke: a 350-line file checks in tens of milliseconds, so the delay
# only keeps a fast typist from queueing checks whose results would be stale before they arrive.
DEBOUNCE_S = 0.15

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class _Unreadable:
    """A request whose params do not fit the protocol's types (a negative line, a string for an object):
    pygls would log it and never answer, and the client would wait for ever. It is answered with an
    error instead."""

    id: int | str | None
    method: str
    problems: tuple[str, ...]


class _Protocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" not in data or "method" not in data:
                raise  # a notification or a response: no one waits for an answer
            msg_id = data["id"] if isinstance(data["id"], int | str) else None
            return _Unreadable(msg_id, str(data["method"]), _problems(exc))

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _Unreadable):
            logger.warning("invalid params for %s: %s", message.method, "; ".join(message.problems))
            error = JsonRpcInvalidParams(
                message=f"invalid params for {message.method}: {'; '.join(message.problems)}"
            )
            self._send_response(message.id, error=error.to_response_error())
            return
        super().handle_message(message)

    def _send_handler_result(self, future: Any, *, msg_id: Any) -> None:
        # A refused rename is an answer, not a failure: the editor shows its reason, and no traceback is
        # logged (pygls logs one for every error a handler raises).
        refused = None if future.cancelled() else future.exception()
        if isinstance(refused, references.Refused):
            self._request_futures.pop(msg_id, None)
            logger.info("refused: %s", refused)
            error = JsonRpcException(str(refused), code=T.LSPErrorCodes.RequestFailed.value)
            self._send_response(msg_id, error=error.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)

    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: T.DidChangeTextDocumentParams):
        # pygls applies a change to a document it does not hold with a KeyError, which the editor shows the
        # user as a server error; a client that sends one (after a close, say) loses nothing if it is ignored.
        if params.text_document.uri not in self.workspace.text_documents:
            logger.warning("ignored a change to %s, which is not open", params.text_document.uri)
            return
        yield from super().lsp_text_document__did_change(params)


class DaicLanguageServer(LanguageServer):
    def __init__(self) -> None:
        # Full synchronisation: the client sends the whole text on each change. A 350-line file is some
        # 12 KB, nothing over a pipe, and the text then never depends on applying ranges, which pygls does
        # on lines split by str.splitlines (form feeds and U+2028 end lines there, not in the protocol).
        super().__init__(
            "daic", __version__, text_document_sync_kind=T.TextDocumentSyncKind.Full, protocol_cls=_Protocol
        )
        self.analyses = Analyses()
        self.workspace_modules = workspace.WorkspaceModules()
        self.pending: dict[str, asyncio.TimerHandle] = {}
        # What each document's last diagnostics came from: its analysis, and the version they were for.
        self.published: dict[str, tuple[Analysis, int | None]] = {}

    # --- documents ------------------------------------------------------------------------------------

    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or T.PositionEncodingKind.Utf16
        return str(getattr(encoding, "value", encoding))

    def analysis(self, uri: str) -> Analysis:
        doc = self.workspace.get_text_document(uri)
        fs_path = to_fs_path(uri) if uri_scheme(uri) == "file" else None
        document = document_for(uri, doc.source, fs_path, doc.language_id)
        return self.analyses.get(document, self.encoding, self.buffers(but=uri))

    def buffers(self, but: str | None = None) -> dict[str, str]:
        """The open files' texts by resolved path (the editor's, saved or not), except `but`'s."""
        found = {}
        for doc in list(self.workspace.text_documents.values()):
            if doc.uri != but and uri_scheme(doc.uri) == "file":
                found[path_key(Path(to_fs_path(doc.uri)))] = doc.source
        return found

    def roots(self) -> list[Path]:
        """The workspace's folders, its root among them (a client may name a root and add folders)."""
        uris = [folder.uri for folder in self.workspace.folders.values()]
        if self.workspace.root_uri and self.workspace.root_uri not in uris:
            uris.insert(0, self.workspace.root_uri)
        paths = [to_fs_path(uri) for uri in uris if uri_scheme(uri) == "file"]
        return [Path(p) for p in paths if p]

    def is_open(self, uri: str) -> bool:
        return uri in {d.uri for d in self.workspace.text_documents.values()}

    def publish(self, uri: str) -> None:
        self.pending.pop(uri, None)
        try:
            if not self.is_open(uri):
                return
            analysis = self.analysis(uri)
            version = self.workspace.get_text_document(uri).version
            last = self.published.get(uri)
            if last is not None and last[0] is analysis and last[1] == version:
                return  # re-checked after another document's edit, and nothing changed for this one
            self.published[uri] = (analysis, version)
            self.text_document_publish_diagnostics(
                T.PublishDiagnosticsParams(uri=uri, diagnostics=lsp_diagnostics(analysis), version=version)
            )
        except Exception:
            logger.exception("checking %s failed", uri)

    def schedule(self, uri: str, delay: float = DEBOUNCE_S) -> None:
        previous = self.pending.pop(uri, None)
        if previous is not None:
            previous.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.publish(uri)
            return
        self.pending[uri] = loop.call_later(delay, self.publish, uri)

    def markup(self, *path: str) -> T.MarkupKind:
        """The client's preferred documentation format at a path of its text document capabilities."""
        node: Any = self.client_capabilities.text_document
        for attribute in path:
            node = getattr(node, attribute, None) if node is not None else None
        return client_kind(node)


def _problems(exc: JsonRpcException) -> tuple[str, ...]:
    """What did not fit, as cattrs says it (`invalid value @ $.params.position`)."""
    cause = exc.__cause__
    if isinstance(cause, ClassValidationError):
        return tuple(transform_error(cause))
    return (str(cause or exc),)


def safe(default: Callable[[], Any]) -> Callable[[F], F]:
    """Answer with `default()` instead of an error when a handler fails (and log why)."""

    def decorate(handler: F) -> F:
        @functools.wraps(handler)
        def wrapped(ls: DaicLanguageServer, params: Any) -> Any:
            try:
                return handler(ls, params)
            except references.Refused:
                raise  # answered with its reason
            except Exception:
                logger.exception("%s failed", handler.__name__)
                return default()

        return wrapped  # type: ignore[return-value]

    return decorate


def _offset(ls: DaicLanguageServer, uri: str, position: T.Position) -> tuple[Analysis, int]:
    analysis = ls.analysis(uri)
    return analysis, analysis.positions.offset(position)


def _texts(ls: DaicLanguageServer) -> Callable[[str], str | None]:
    """A file's text as the editor holds it, or as saved where no buffer holds it (None: unreadable)."""
    buffers = ls.buffers()

    def text_of(path: str) -> str | None:
        found = buffers.get(path_key(Path(path)))
        return found if found is not None else _read(path)

    return text_of


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def create_server() -> DaicLanguageServer:
    server = DaicLanguageServer()
    _follow_documents(server)
    _answer_queries(server)
    _offer_edits(server)
    _look_across(server)
    return server


def _follow_documents(server: DaicLanguageServer) -> None:
    """Opened, changed, saved and closed documents: each checked again, and its diagnostics published."""

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    @safe(lambda: None)
    def did_open(ls: DaicLanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        ls.publish(params.text_document.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    @safe(lambda: None)
    def did_change(ls: DaicLanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        # The other open documents may import this one or name it as their net; those whose imports read
        # the same are answered from their cached analysis.
        for doc in list(ls.workspace.text_documents.values()):
            ls.schedule(doc.uri)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    @safe(lambda: None)
    def did_save(ls: DaicLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        # A saved file may be imported by (or be the net of) another open document: check them all again.
        ls.analyses.clear()
        for doc in list(ls.workspace.text_documents.values()):
            ls.schedule(doc.uri, 0)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    @safe(lambda: None)
    def did_close(ls: DaicLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        pending = ls.pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        ls.analyses.forget(uri)
        ls.published.pop(uri, None)
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _answer_queries(server: DaicLanguageServer) -> None:
    """What is at a position: hover, completion, signature help and the definition of a name."""

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    @safe(lambda: None)
    def on_hover(ls: DaicLanguageServer, params: T.HoverParams) -> T.Hover | None:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        return hover.hover(analysis, offset, ls.markup("hover", "content_format"))

    @server.feature(
        T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=[".", "(", "[", ",", "="])
    )
    @safe(lambda: T.CompletionList(is_incomplete=False, items=[]))
    def on_completion(ls: DaicLanguageServer, params: T.CompletionParams) -> T.CompletionList:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        markup = ls.markup("completion", "completion_item", "documentation_format")
        return T.CompletionList(is_incomplete=False, items=completion.complete(analysis, offset, markup))

    @server.feature(
        T.TEXT_DOCUMENT_SIGNATURE_HELP,
        T.SignatureHelpOptions(
            trigger_characters=signature_help.TRIGGERS, retrigger_characters=signature_help.RETRIGGERS
        ),
    )
    @safe(lambda: None)
    def on_signature_help(ls: DaicLanguageServer, params: T.SignatureHelpParams) -> T.SignatureHelp | None:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        markup = ls.markup("signature_help", "signature_information", "documentation_format")
        return signature_help.signature_help(analysis, offset, markup)

    @server.feature(T.TEXT_DOCUMENT_DEFINITION)
    @safe(list)
    def on_definition(ls: DaicLanguageServer, params: T.DefinitionParams) -> list[T.Location]:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        return definition.definition(analysis, offset, _texts(ls))


def _offer_edits(server: DaicLanguageServer) -> None:
    """A document as a whole: its outline, its formatting and the quick fixes of its diagnostics."""

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @safe(list)
    def on_document_symbol(ls: DaicLanguageServer, params: T.DocumentSymbolParams) -> list:
        uri = params.text_document.uri
        found = symbols.document_symbols(ls.analysis(uri))
        hierarchical = ls.client_capabilities.text_document
        hierarchical = hierarchical and hierarchical.document_symbol
        if hierarchical and hierarchical.hierarchical_document_symbol_support:
            return found
        return symbols.flat_symbols(found, uri)

    @server.feature(T.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, semantic_tokens.LEGEND)
    @safe(lambda: T.SemanticTokens(data=[]))
    def on_semantic_tokens(ls: DaicLanguageServer, params: T.SemanticTokensParams) -> T.SemanticTokens:
        return semantic_tokens.semantic_tokens(ls.analysis(params.text_document.uri))

    @server.feature(T.TEXT_DOCUMENT_FORMATTING)
    @safe(list)
    def on_formatting(ls: DaicLanguageServer, params: T.DocumentFormattingParams) -> list[T.TextEdit]:
        return formatting.format_document(ls.analysis(params.text_document.uri))

    @server.feature(
        T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix])
    )
    @safe(list)
    def on_code_action(ls: DaicLanguageServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        analysis = ls.analysis(params.text_document.uri)
        start = analysis.positions.offset(params.range.start)
        end = analysis.positions.offset(params.range.end)
        return code_actions.code_actions(analysis, start, end)


def _look_across(server: DaicLanguageServer) -> None:
    """What reads the whole workspace: references, rename (`_rename`) and workspace symbols."""
    _rename(server)

    @server.feature(T.TEXT_DOCUMENT_REFERENCES)
    @safe(list)
    def on_references(ls: DaicLanguageServer, params: T.ReferenceParams) -> list[T.Location]:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        found = references.named_at(analysis, offset)
        if found is None:
            return []
        modules = ls.workspace_modules.get(ls.roots(), ls.buffers())
        places = references.places(found[0], modules, params.context.include_declaration)
        return [T.Location(uri, r) for uri, r in _ranges(ls, places)]

    @server.feature(T.WORKSPACE_SYMBOL)
    @safe(list)
    def on_workspace_symbol(ls: DaicLanguageServer, params: T.WorkspaceSymbolParams) -> list:
        return symbols.workspace_symbols(params.query, workspace.texts(ls.roots(), ls.buffers()), ls.encoding)


def _rename(server: DaicLanguageServer) -> None:
    """Renaming a let or a scheme in every file that names it, or the reason it cannot be."""

    @server.feature(T.TEXT_DOCUMENT_PREPARE_RENAME)
    @safe(lambda: None)
    def on_prepare_rename(ls: DaicLanguageServer, params: T.PrepareRenameParams) -> Any:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        found = references.named_at(analysis, offset)
        if found is None:
            return None
        named, (start, end) = found
        references.check_renamable(named)
        return T.PrepareRenamePlaceholder(analysis.positions.range(start, end), named.name)

    @server.feature(T.TEXT_DOCUMENT_RENAME, T.RenameOptions(prepare_provider=True))
    @safe(lambda: None)
    def on_rename(ls: DaicLanguageServer, params: T.RenameParams) -> T.WorkspaceEdit | None:
        analysis, offset = _offset(ls, params.text_document.uri, params.position)
        found = references.named_at(analysis, offset)
        if found is None:
            return None
        modules = ls.workspace_modules.get(ls.roots(), ls.buffers())
        changes: dict[str, list[T.TextEdit]] = {}
        for uri, where in _ranges(ls, references.rename(found[0], params.new_name, modules)):
            changes.setdefault(uri, []).append(T.TextEdit(where, params.new_name))
        return T.WorkspaceEdit(changes=changes)


def _ranges(ls: DaicLanguageServer, places: list[references.Place]) -> list[tuple[str, T.Range]]:
    """Each place as a document's URI and a range in the client's encoding (of the editor's text of the
    file where it holds one, else the file's)."""
    text_of = _texts(ls)
    maps: dict[str, PositionMap] = {}
    found = []
    for place in places:
        if place.path not in maps:
            maps[place.path] = PositionMap.of_text(text_of(place.path) or "", ls.encoding)
        uri = from_fs_path(place.path) or place.path
        found.append((uri, maps[place.path].range(place.start, place.end)))
    return found


def main(tcp: str | None = None) -> None:
    """Serve on stdin/stdout, or on `tcp` ("HOST:PORT") when given."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="daic lsp: %(levelname)s %(message)s"
    )
    server = create_server()
    if tcp:
        host, _, port = tcp.rpartition(":")
        server.start_tcp(host or "127.0.0.1", int(port))
    else:
        server.start_io()
