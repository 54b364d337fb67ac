"""A synchronous test client for `wgc lsp`: pygls' own `LanguageClient`, over stdio, on an event
loop in a background thread, so plain (non-async) tests can drive the server request by request.

Diagnostics the server publishes are kept per URI; `wait_diagnostics` waits for the ones that
follow an open or a change (each publish bumps a counter the caller waited past).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

TIMEOUT = 60.0


class Client:
    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.lc = LanguageClient("wgc-tests", "1")
        self.diagnostics: dict[str, list[lsp.Diagnostic]] = {}
        self.published: dict[str, int] = {}
        self.notes: list[tuple[str, object]] = []
        self.cond = threading.Condition()
        self.versions: dict[str, int] = {}

        def diagnostics(params: lsp.PublishDiagnosticsParams) -> None:
            with self.cond:
                self.diagnostics[params.uri] = list(params.diagnostics)
                self.published[params.uri] = self.published.get(params.uri, 0) + 1
                self.cond.notify_all()

        def plan_changed(params) -> None:
            with self.cond:
                self.notes.append(("wgc/planChanged", params))
                self.cond.notify_all()

        self.lc.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(diagnostics)
        self.lc.feature("wgc/planChanged")(plan_changed)

        self.run(self.lc.start_io(sys.executable, "-m", "wgc.cli", "lsp", "--stdio"))
        self.run(
            self.lc.initialize_async(
                lsp.InitializeParams(
                    capabilities=lsp.ClientCapabilities(),
                    root_uri=root.resolve().as_uri(),
                )
            )
        )
        self.lc.initialized(lsp.InitializedParams())

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(TIMEOUT)

    def close(self) -> None:
        try:
            self.run(self.lc.shutdown_async(None))
            self.lc.exit(None)
            self.run(self.lc.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)

    # -- documents -------------------------------------------------------------------------
    def open(self, path: Path, text: str | None = None) -> str:
        """Open ``path`` (with ``text``, else its contents) and return the diagnostics' URI."""
        uri = path.resolve().as_uri()
        text = path.read_text(encoding="utf-8") if text is None else text
        lang = "yaml" if path.suffix in (".yaml", ".yml") else "walk"
        seen = self.published.get(uri, 0)
        self.versions[uri] = 1
        item = lsp.TextDocumentItem(uri=uri, language_id=lang, version=1, text=text)
        self.lc.text_document_did_open(lsp.DidOpenTextDocumentParams(item))
        self.wait_diagnostics(uri, seen)
        return uri

    def change(self, uri: str, text: str) -> list[lsp.Diagnostic]:
        seen = self.published.get(uri, 0)
        self.versions[uri] += 1
        doc = lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri])
        change = lsp.TextDocumentContentChangeWholeDocument(text=text)
        self.lc.text_document_did_change(lsp.DidChangeTextDocumentParams(doc, [change]))
        return self.wait_diagnostics(uri, seen)

    def close_doc(self, uri: str) -> None:
        self.lc.text_document_did_close(
            lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri))
        )

    def wait_diagnostics(self, uri: str, seen: int) -> list[lsp.Diagnostic]:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.published.get(uri, 0) > seen, TIMEOUT)
        assert ok, f"no diagnostics published for {uri}"
        return self.diagnostics[uri]

    def wait_note(self, method: str) -> object:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(m == method for m, _ in self.notes), TIMEOUT)
        assert ok, f"no {method} notification"
        return next(p for m, p in self.notes if m == method)

    # -- requests --------------------------------------------------------------------------
    @staticmethod
    def pos(uri: str, line: int, col: int) -> dict:
        return {
            "text_document": lsp.TextDocumentIdentifier(uri),
            "position": lsp.Position(line, col),
        }

    def hover(self, uri: str, line: int, col: int) -> lsp.Hover | None:
        return self.run(
            self.lc.text_document_hover_async(lsp.HoverParams(**self.pos(uri, line, col)))
        )

    def definition(self, uri: str, line: int, col: int):
        params = lsp.DefinitionParams(**self.pos(uri, line, col))
        return self.run(self.lc.text_document_definition_async(params))

    def references(self, uri: str, line: int, col: int) -> list[lsp.Location]:
        params = lsp.ReferenceParams(
            **self.pos(uri, line, col), context=lsp.ReferenceContext(include_declaration=True)
        )
        return list(self.run(self.lc.text_document_references_async(params)) or [])

    def rename(self, uri: str, line: int, col: int, new: str) -> lsp.WorkspaceEdit | None:
        params = lsp.RenameParams(**self.pos(uri, line, col), new_name=new)
        return self.run(self.lc.text_document_rename_async(params))

    def completion(self, uri: str, line: int, col: int) -> list[str]:
        params = lsp.CompletionParams(**self.pos(uri, line, col))
        result = self.run(self.lc.text_document_completion_async(params))
        items = result.items if isinstance(result, lsp.CompletionList) else (result or [])
        return [i.label for i in items]

    def formatting(self, uri: str) -> list[lsp.TextEdit] | None:
        params = lsp.DocumentFormattingParams(
            lsp.TextDocumentIdentifier(uri), lsp.FormattingOptions(tab_size=2, insert_spaces=True)
        )
        edits = self.run(self.lc.text_document_formatting_async(params))
        return None if edits is None else list(edits)

    def semantic_tokens(self, uri: str) -> list[int]:
        params = lsp.SemanticTokensParams(lsp.TextDocumentIdentifier(uri))
        result = self.run(self.lc.text_document_semantic_tokens_full_async(params))
        return list(result.data) if result is not None else []

    def code_actions(self, uri: str, diags: list[lsp.Diagnostic]) -> list[lsp.CodeAction]:
        rng = diags[0].range if diags else lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0))
        params = lsp.CodeActionParams(
            lsp.TextDocumentIdentifier(uri), rng, lsp.CodeActionContext(diagnostics=diags)
        )
        actions = self.run(self.lc.text_document_code_action_async(params)) or []
        return [a for a in actions if isinstance(a, lsp.CodeAction)]

    def outline(self, uri: str) -> list[lsp.DocumentSymbol]:
        params = lsp.DocumentSymbolParams(lsp.TextDocumentIdentifier(uri))
        symbols = self.run(self.lc.text_document_document_symbol_async(params)) or []
        return [s for s in symbols if isinstance(s, lsp.DocumentSymbol)]

    def save(self, uri: str) -> None:
        self.lc.text_document_did_save(
            lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri))
        )

    def plan(self, uri: str, placement: str | None = None):
        params = {"uri": uri, **({"placement": placement} if placement else {})}

        async def request():
            return await self.lc.protocol.send_request_async("wgc/plan", params)

        return self.run(request())
