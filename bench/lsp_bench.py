"""How long the language server takes to re-check a document after a keystroke.

    python bench/lsp_bench.py [--reps 31] [--file tests/data/listings/densenet100_none.net]
                              [--lets 2500,20000]

Three measurements, over `--reps` edits each (a digit changed, so that every repetition is a new text):

- re-check: in-process, what the server does per change: `check_source` through the document cache and
  the conversion of every diagnostic to the client's UTF-16 positions;
- round trip: over stdio with the real server (`python -m daic.compiler.lsp`): a didChange notification,
  then a hover request on the changed line, which has to wait for the new text's check. It adds the
  transport and the JSON to the re-check (not the diagnostics' debounce delay, which hover does not wait
  for);
- across the workspace: over stdio, with this repository as the workspace (its 49 modules and 70-odd
  networks): references to a let of stdlib/goals.dai, a rename of it (the edit computed, not applied),
  workspace symbols for a query of three letters, and the semantic tokens of the file above;
- large sources: a generated .dai file of `--lets` lets (goals built from Mix, Sub, Lin and Box, as in
  stdlib/goals.dai, each from the one before it in tens), opened (its first check, which parses every
  piece) and then re-checked after each edit at a random place, as the server does: unchanged pieces
  and lets are taken from the last check. The median and the slowest re-check are printed (the slowest
  includes Python's occasional full garbage collection).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from daic.compiler.lsp.diagnostics import lsp_diagnostics
from daic.compiler.lsp.documents import Analyses, document_for

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests" / "data" / "listings" / "densenet100_none.net"


def edits(text: str, reps: int) -> list[str]:
    """`reps` texts, each the file with one digit of its first `filters=` value changed."""
    marker = text.index("filters=") + len("filters=")
    return [text[:marker] + str(1 + i % 9) + text[marker + 1 :] for i in range(reps)]


def recheck(path: Path, reps: int) -> list[float]:
    text = path.read_text(encoding="utf-8")
    analyses = Analyses()
    uri = path.as_uri()
    analyses.get(document_for(uri, text, str(path)))  # imports, grammars and caches warmed once
    times = []
    for edited in edits(text, reps):
        start = time.perf_counter()
        analysis = analyses.get(document_for(uri, edited, str(path)))
        lsp_diagnostics(analysis)
        times.append(time.perf_counter() - start)
    return times


async def round_trip(path: Path, reps: int) -> list[float]:
    text = path.read_text(encoding="utf-8")
    client = LanguageClient("lsp-bench", "1")
    # Diagnostics still arrive (after the debounce delay); this benchmark times the hover, not them.
    client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
    await client.start_io(sys.executable, "-m", "daic.compiler.lsp")
    await client.initialize_async(T.InitializeParams(capabilities=T.ClientCapabilities()))
    client.initialized(T.InitializedParams())
    uri = path.as_uri()
    document = T.TextDocumentIdentifier(uri=uri)
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, "daic-net", 1, text)))
    line = text[: text.index("filters=")].count("\n")
    hover = T.HoverParams(document, T.Position(line, 1))
    await client.text_document_hover_async(hover)
    times = []
    for version, edited in enumerate(edits(text, reps), start=2):
        start = time.perf_counter()
        client.text_document_did_change(
            T.DidChangeTextDocumentParams(
                T.VersionedTextDocumentIdentifier(uri=uri, version=version),
                [T.TextDocumentContentChangeWholeDocument(text=edited)],
            )
        )
        await client.text_document_hover_async(hover)
        times.append(time.perf_counter() - start)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


def _requests(client: LanguageClient, goals: Path, text: str, path: Path) -> dict:
    """The requests across the workspace, each a call that sends one: at a let of stdlib/goals.dai, and
    for the semantic tokens of the network at `path`."""
    document = T.TextDocumentIdentifier(goals.as_uri())
    at = text[: text.index("let Baseline")].count("\n")
    position = T.Position(at, len("let B"))
    return {
        "references": lambda: client.text_document_references_async(
            T.ReferenceParams(context=T.ReferenceContext(True), text_document=document, position=position)
        ),
        "prepare rename": lambda: client.text_document_prepare_rename_async(
            T.PrepareRenameParams(document, position)
        ),
        "workspace symbols": lambda: client.workspace_symbol_async(T.WorkspaceSymbolParams(query="sab")),
        "semantic tokens": lambda: client.text_document_semantic_tokens_full_async(
            T.SemanticTokensParams(T.TextDocumentIdentifier(path.as_uri()))
        ),
    }


async def workspace_requests(path: Path, reps: int) -> dict[str, list[float]]:
    """Each request across the workspace `reps` times, timed round trip."""
    client = LanguageClient("lsp-bench", "1")
    client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: None)
    await client.start_io(sys.executable, "-m", "daic.compiler.lsp")
    await client.initialize_async(
        T.InitializeParams(capabilities=T.ClientCapabilities(), root_uri=ROOT.as_uri())
    )
    client.initialized(T.InitializedParams())
    goals = ROOT / "stdlib" / "goals.dai"
    text = goals.read_text(encoding="utf-8")
    open_ = T.DidOpenTextDocumentParams(T.TextDocumentItem(goals.as_uri(), "dai", 1, text))
    client.text_document_did_open(open_)
    net = T.DidOpenTextDocumentParams(T.TextDocumentItem(path.as_uri(), "daic-net", 1, path.read_text()))
    client.text_document_did_open(net)
    requests = _requests(client, goals, text, path)
    times: dict[str, list[float]] = {name: [] for name in requests}
    for name, request in requests.items():
        for _ in range(reps):
            start = time.perf_counter()
            # A refused prepareRename (the stdlib's lets are not the user's) is an answer as timely.
            with contextlib.suppress(JsonRpcException):
                await request()
            times[name].append(time.perf_counter() - start)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


def large_source(lets: int) -> str:
    """A .dai file of `lets` goals and a scheme that trains the last one."""
    lines = ["import stdlib.goals as g", ""]
    for i in range(lets):
        weight = "g.Baseline" if i % 10 == 0 else f"l{i - 1}"
        lines.append(f"let l{i} = Mix(Point, Sub(Lin(0, 1, 10, {i % 7}), {weight}), {i % 10}/10)")
    lines += ["", "scheme Large {", "    data = Digits", "    epsilon = 0.1", f"    goal = l{lets - 1}"]
    lines += ["    epochs = 1", "}", ""]
    return "\n".join(lines)


def keystrokes(lets: int, reps: int) -> tuple[float, list[float]]:
    """The first check of a large source, and each re-check after an edit at a random place."""
    text = large_source(lets)
    folder = tempfile.mkdtemp(prefix="daic-lsp-bench-")
    path = str(Path(folder) / "large.dai")
    uri = Path(path).as_uri()
    analyses = Analyses()
    start = time.perf_counter()
    lsp_diagnostics(analyses.get(document_for(uri, text, path)))
    opened = time.perf_counter() - start
    rng = random.Random(0)
    times = []
    for _ in range(reps):
        at = text.index("/10)", rng.randrange(len(text) // 2)) - 1  # a mixing weight's numerator
        text = text[:at] + str(rng.randrange(10)) + text[at + 1 :]
        start = time.perf_counter()
        lsp_diagnostics(analyses.get(document_for(uri, text, path)))
        times.append(time.perf_counter() - start)
    return opened, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=31)
    parser.add_argument("--file", type=Path, default=DEFAULT)
    parser.add_argument("--lets", default="2500,20000", help="sizes of the generated large sources")
    args = parser.parse_args()
    path = args.file.resolve()
    lines = path.read_text(encoding="utf-8").count("\n")
    ms = [t * 1000 for t in recheck(path, args.reps)]
    print(f"{path.name} ({lines} lines), {args.reps} edits")
    print(
        f"re-check (check_source + diagnostics to UTF-16): median {statistics.median(ms):.1f} ms, "
        f"min {min(ms):.1f}, max {max(ms):.1f}"
    )
    ms = [t * 1000 for t in asyncio.run(round_trip(path, args.reps))]
    print(
        f"round trip over stdio (didChange + hover):      median {statistics.median(ms):.1f} ms, "
        f"min {min(ms):.1f}, max {max(ms):.1f}"
    )
    for name, times in asyncio.run(workspace_requests(path, args.reps)).items():
        ms = [t * 1000 for t in times]
        print(f"{name + ':':<48}median {statistics.median(ms):.1f} ms, min {min(ms):.1f}, max {max(ms):.1f}")
    for lets in (int(n) for n in args.lets.split(",") if n):
        opened, times = keystrokes(lets, args.reps)
        print(
            f"{lets:,} lets: first check {opened:.2f} s; re-check after an edit: "
            f"median {statistics.median(times):.3f} s, max {max(times):.3f} s"
        )


if __name__ == "__main__":
    main()
