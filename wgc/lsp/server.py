"""The pygls server: protocol requests wired to the feature modules of `wgc.lsp`.

Every open `.walk` and placement file is analysed on open and on each change (`Workspace`);
the analysis is kept until the next change, and every request reads it. Editing a model
re-diagnoses its open placement files, since their checks run against it. Besides the standard
requests (the outline included) the server answers `wgc/plan` (`{"uri", "placement"?}` ->
`{"html"}` or `{"error"}`, see `wgc.lsp.plan`) and, on each save of a model, notifies
`wgc/planChanged` (`{"uri"}`) so an open plan view can ask again.
"""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from wgc.fmt import format_source
from wgc.lsp import complete, hover, rename, semantic
from wgc.lsp.convert import to_lsp, uri_of
from wgc.lsp.document import Document, EditorDriver, analyse_placement, analyse_walk
from wgc.lsp.impl import find_class
from wgc.lsp.names import Occurrence, Symbol
from wgc.lsp.outline import outline
from wgc.lsp.placement_refs import names_in
from wgc.lsp.plan import live_plan
from wgc.parse.parser import Parser

PLAN_REQUEST = "wgc/plan"
PLAN_CHANGED = "wgc/planChanged"
_IMPL = re.compile(r'\bimpl\s+"([^"]*)"')


class Workspace:
    """The analysed open files, by path, and the one driver that analyses them."""

    def __init__(self, server: LanguageServer) -> None:
        self.server = server
        self.driver = EditorDriver()
        self.docs: dict[str, Document] = {}
        self._fmt_parser: Parser | None = None

    def buffer(self, path: str) -> str | None:
        """The editor's text of ``path`` when it is open, else None."""
        uri = uri_of(path)
        if uri in self.server.workspace.text_documents:
            return self.server.workspace.get_text_document(uri).source
        return None

    def analyse(self, uri: str) -> Document:
        text_doc = self.server.workspace.get_text_document(uri)
        path = _path(uri)
        if path.endswith((".yaml", ".yml")):
            doc = analyse_placement(self.driver, path, text_doc.source, self.buffer)
        else:
            doc = analyse_walk(self.driver, path, text_doc.source)
            prev = self.docs.get(path)
            if doc.tree is None and prev is not None:
                doc.last_good = prev.names_source
        self.docs[path] = doc
        return doc

    def doc(self, uri: str) -> Document:
        path = _path(uri)
        return self.docs.get(path) or self.analyse(uri)

    def publish(self, doc: Document) -> None:
        uri = uri_of(doc.path)
        own = [d for d in doc.diagnostics if _same(d.span.file, doc.path)]
        diags = [to_lsp(d, doc.lines) for d in own]
        if doc.is_placement and doc.model_path is not None:
            # the model's own errors stop the placement rules: say so at the top of the file
            model_errors = [d for d in doc.diagnostics if not _same(d.span.file, doc.path)]
            diags += [_elsewhere(d) for d in model_errors]
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri, diags))

    def formatter(self) -> Parser:
        if self._fmt_parser is None:
            self._fmt_parser = Parser()
        return self._fmt_parser


def _path(uri: str) -> str:
    return to_fs_path(uri) or uri


def _same(a: str, b: str) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _elsewhere(d) -> lsp.Diagnostic:
    return lsp.Diagnostic(
        range=lsp.Range(lsp.Position(0, 0), lsp.Position(0, 0)),
        message=f"the model has errors, so the placement rules did not run: {d.span}: {d.message}",
        severity=lsp.DiagnosticSeverity.Information,
        code=d.code,
        source="wgc",
    )


def make_server() -> LanguageServer:
    """A server with every feature registered (one per `wgc lsp` process, or per test)."""
    from wgc.cli import _version

    server = LanguageServer(
        "wgc", _version(), text_document_sync_kind=lsp.TextDocumentSyncKind.Full
    )
    ws = Workspace(server)

    def refresh(uri: str) -> None:
        doc = ws.analyse(uri)
        ws.publish(doc)
        if not doc.is_placement:
            for other in list(ws.docs.values()):
                if other.is_placement and other.model_path and _same(other.model_path, doc.path):
                    ws.publish(ws.analyse(uri_of(other.path)))

    def did_open(params: lsp.DidOpenTextDocumentParams) -> None:
        refresh(params.text_document.uri)

    def did_change(params: lsp.DidChangeTextDocumentParams) -> None:
        refresh(params.text_document.uri)

    def did_save(params: lsp.DidSaveTextDocumentParams) -> None:
        if not _path(params.text_document.uri).endswith((".yaml", ".yml")):
            server.protocol.notify(PLAN_CHANGED, {"uri": params.text_document.uri})

    def did_close(params: lsp.DidCloseTextDocumentParams) -> None:
        ws.docs.pop(_path(params.text_document.uri), None)
        server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(params.text_document.uri, [])
        )

    def at(params) -> tuple[Document, list[Occurrence]]:
        doc = ws.doc(params.text_document.uri)
        pos = params.position
        return doc, doc.at(pos.line, pos.character)

    def on_hover(params: lsp.HoverParams) -> lsp.Hover | None:
        doc, hits = at(params)
        if doc.is_placement:
            return _placement_hover(doc, params.position)
        for occ in hits:
            text = hover.hover_text(doc, occ)
            if text is not None:
                rng = lsp.Range(lsp.Position(occ.line, occ.start), lsp.Position(occ.line, occ.end))
                return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), rng)
        return None

    def on_definition(params: lsp.DefinitionParams) -> list[lsp.Location] | None:
        doc, hits = at(params)
        if doc.is_placement:
            return _placement_definition(ws, doc, params.position)
        impl = _impl_target(doc, params.position)
        if impl is not None:
            return [impl]
        out = []
        for occ in hits:
            decl = doc.definition(occ.symbol)
            if decl is not None:
                out.append(_location(doc.path, decl))
        return out or None

    def on_references(params: lsp.ReferenceParams) -> list[lsp.Location] | None:
        doc, hits = at(params)
        out: list[lsp.Location] = []
        for occ in hits:
            out += rename.references(doc, occ.symbol, ws.buffer, params.context.include_declaration)
        return out or None

    def on_prepare_rename(params: lsp.PrepareRenameParams) -> lsp.Range | None:
        _, hits = at(params)
        if not hits or hits[0].symbol.kind == "model":
            return None
        o = hits[0]
        return lsp.Range(lsp.Position(o.line, o.start), lsp.Position(o.line, o.end))

    def on_rename(params: lsp.RenameParams) -> lsp.WorkspaceEdit | None:
        doc, hits = at(params)
        if not hits:
            return None
        # a binding written as one name: rename the channel (what the cursor usually means)
        occ = next((o for o in hits if o.symbol.kind == "channel"), hits[0])
        return rename.rename_edits(doc, occ.symbol, params.new_name, ws.buffer)

    def on_completion(params: lsp.CompletionParams) -> lsp.CompletionList:
        doc = ws.doc(params.text_document.uri)
        line, col = params.position.line, params.position.character
        if doc.is_placement:
            items = complete.complete_placement(doc, line, col)
        else:
            items = complete.complete_walk(doc, line, col)
        return lsp.CompletionList(is_incomplete=False, items=items)

    def on_formatting(params: lsp.DocumentFormattingParams) -> list[lsp.TextEdit] | None:
        doc = ws.doc(params.text_document.uri)
        if doc.is_placement:
            return None
        result = format_source(doc.text, doc.path, ws.formatter())
        if result.text is None or result.text == doc.text:
            return [] if result.text is not None else None
        end = lsp.Position(len(doc.text.split("\n")), 0)
        return [lsp.TextEdit(lsp.Range(lsp.Position(0, 0), end), result.text)]

    def on_outline(params: lsp.DocumentSymbolParams) -> list[lsp.DocumentSymbol] | None:
        doc = ws.doc(params.text_document.uri)
        return outline(doc.model) if doc.model is not None and not doc.is_placement else None

    def on_semantic_tokens(params: lsp.SemanticTokensParams) -> lsp.SemanticTokens:
        doc = ws.doc(params.text_document.uri)
        return lsp.SemanticTokens(data=semantic.semantic_tokens(doc))

    def on_code_action(params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
        uri = params.text_document.uri
        actions = []
        for d in params.context.diagnostics:
            fix = d.data.get("fix") if isinstance(d.data, dict) else None
            if not fix:
                continue
            start, end = (
                lsp.Position(fix["line"], fix["start"]),
                lsp.Position(fix["line"], fix["end"]),
            )
            edit = lsp.TextEdit(lsp.Range(start, end), fix["new"])
            actions.append(
                lsp.CodeAction(
                    title=f"{d.code}: change to `{fix['new']}`",
                    kind=lsp.CodeActionKind.QuickFix,
                    diagnostics=[d],
                    edit=lsp.WorkspaceEdit(changes={uri: [edit]}),
                    is_preferred=True,
                )
            )
        return actions or None

    def on_plan(params) -> dict:
        uri = _get(params, "uri")
        placement = _get(params, "placement")
        if not uri:
            return {"error": "`wgc/plan` needs the model's `uri`"}
        return live_plan(_path(uri), _path(placement) if placement else None)

    # what the server answers: (method, its options, the handler)
    for method, options, handler in (
        (lsp.TEXT_DOCUMENT_DID_OPEN, None, did_open),
        (lsp.TEXT_DOCUMENT_DID_CHANGE, None, did_change),
        (lsp.TEXT_DOCUMENT_DID_SAVE, None, did_save),
        (lsp.TEXT_DOCUMENT_DID_CLOSE, None, did_close),
        (lsp.TEXT_DOCUMENT_HOVER, None, on_hover),
        (lsp.TEXT_DOCUMENT_DEFINITION, None, on_definition),
        (lsp.TEXT_DOCUMENT_REFERENCES, None, on_references),
        (lsp.TEXT_DOCUMENT_PREPARE_RENAME, None, on_prepare_rename),
        (lsp.TEXT_DOCUMENT_RENAME, None, on_rename),
        (
            lsp.TEXT_DOCUMENT_COMPLETION,
            lsp.CompletionOptions(trigger_characters=[".", "["]),
            on_completion,
        ),
        (lsp.TEXT_DOCUMENT_FORMATTING, None, on_formatting),
        (lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL, None, on_outline),
        (lsp.TEXT_DOCUMENT_SEMANTIC_TOKENS_FULL, semantic.LEGEND, on_semantic_tokens),
        (
            lsp.TEXT_DOCUMENT_CODE_ACTION,
            lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix]),
            on_code_action,
        ),
        (PLAN_REQUEST, None, on_plan),
    ):
        server.feature(method, options)(handler)
    return server


def _get(params, key: str):
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)


def _location(path: str, o: Occurrence) -> lsp.Location:
    rng = lsp.Range(lsp.Position(o.line, o.start), lsp.Position(o.line, o.end))
    return lsp.Location(uri_of(path), rng)


def _impl_target(doc: Document, pos: lsp.Position) -> lsp.Location | None:
    """The Python class of an `impl "pkg.mod:Class"` string under the cursor."""
    if pos.line >= len(doc.lines):
        return None
    m = _IMPL.search(doc.lines[pos.line])
    if m is None or not (m.start(1) - 1 <= pos.character <= m.end(1) + 1):
        return None
    cls = find_class(m.group(1), doc.path)
    if cls is None:
        return None
    here = lsp.Position(cls.line, cls.col)
    return lsp.Location(uri_of(cls.file), lsp.Range(here, here))


def _placement_hover(doc: Document, pos: lsp.Position) -> lsp.Hover | None:
    """A node, walk or param named in a placement file: what the model declares."""
    if doc.model is None:
        return None
    for n in names_in(doc.text):
        if n.line == pos.line and n.start <= pos.character <= n.end:
            head = hover.signature(doc.model, Symbol(n.kind, "", n.name))
            if head is None:
                return None
            rng = lsp.Range(lsp.Position(n.line, n.start), lsp.Position(n.line, n.end))
            value = f"```walk\n{head}\n```"
            return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, value), rng)
    return None


def _placement_definition(ws: Workspace, doc: Document, pos: lsp.Position):
    """A node, walk or param named in a placement file: its declaration in the model."""
    if doc.model_path is None:
        return None
    for n in names_in(doc.text):
        if n.line == pos.line and n.start <= pos.character <= n.end:
            model_doc = ws.docs.get(doc.model_path)
            if model_doc is None:
                text = ws.buffer(doc.model_path) or Path(doc.model_path).read_text(encoding="utf-8")
                model_doc = analyse_walk(ws.driver, doc.model_path, text)
            for o in model_doc.occurrences:
                if o.is_def and o.symbol.kind == n.kind and o.symbol.name == n.name:
                    return [_location(model_doc.path, o)]
    return None
