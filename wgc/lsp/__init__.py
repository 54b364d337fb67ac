"""`wgc lsp`: a language server for `.walk` files and their placement YAML (pygls, over stdio).

The server never re-implements a check: diagnostics are the compiler driver's (`wgc check`'s
codes, spans, help lines and labels), formatting is `wgc fmt`'s formatter, the live plan is `wgc
show --format html`'s page. What is new here is the editor's view of one file:

* `incremental`: a `Parser` that re-parses only the top-level declarations an edit touched;
* `document`: one analysed version of an open file (driver result, parse tree, name index);
* `names`: every name occurrence of the parse tree, resolved to the symbol it defines or uses;
* `placement_refs`: where a model's nodes, walks and params are named in its placement files;
* `convert`: spans and diagnostics in the protocol's terms, and the quick fix a "did you mean"
  help line proposes;
* `impl`: a node's `impl "pkg.mod:Class"` found as a Python file and class (nothing imported);
* `hover`, `complete`, `semantic`, `rename`, `plan`: one feature each;
* `server`: the pygls server wiring requests to those modules.

pygls and lsprotocol come with the `lsp` extra; nothing else in wgc imports this package.
"""
