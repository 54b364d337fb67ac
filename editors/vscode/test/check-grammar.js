// Tokenizes files with the extension's TextMate grammar (vscode-textmate + vscode-oniguruma, the
// engine VS Code itself uses) and prints, as JSON, every token that got no scope beyond
// `source.walk` or an `invalid` one: `{"tokens": N, "unscoped": [[file, line, col, text], ...]}`.
// Usage: node check-grammar.js GRAMMAR.json FILE... (run where the two packages are installed)
"use strict";

const fs = require("fs");
const path = require("path");
const tm = require("vscode-textmate");
const onig = require("vscode-oniguruma");

async function main() {
  const [grammarPath, ...files] = process.argv.slice(2);
  const wasm = fs.readFileSync(path.join(path.dirname(require.resolve("vscode-oniguruma")), "onig.wasm"));
  await onig.loadWASM(wasm.buffer);
  const registry = new tm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new onig.OnigScanner(sources),
      createOnigString: (s) => new onig.OnigString(s),
    }),
    loadGrammar: async () => tm.parseRawGrammar(fs.readFileSync(grammarPath, "utf8"), grammarPath),
  });
  const grammar = await registry.loadGrammar("source.walk");
  let count = 0;
  const unscoped = [];
  for (const file of files) {
    let state = tm.INITIAL;
    fs.readFileSync(file, "utf8").split("\n").forEach((line, i) => {
      const result = grammar.tokenizeLine(line, state);
      for (const t of result.tokens) {
        const text = line.slice(t.startIndex, t.endIndex);
        if (!text.trim()) continue;
        count += 1;
        if (t.scopes.length < 2 || t.scopes.some((s) => s.startsWith("invalid"))) {
          unscoped.push([file, i + 1, t.startIndex + 1, text, t.scopes]);
        }
      }
      state = result.ruleStack;
    });
  }
  process.stdout.write(JSON.stringify({ tokens: count, unscoped }) + "\n");
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
