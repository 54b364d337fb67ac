// The wgc extension: starts `wgc lsp` (stdio) for .walk and placement YAML files, and shows the
// live placed plan (the `wgc/plan` request: `wgc show --format html`'s page) in a webview that
// follows saves (the server's `wgc/planChanged` notification).
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;
const panels = new Map(); // model uri -> webview panel

function serverOptions() {
  const command = vscode.workspace.getConfiguration("wgc").get("path") || "wgc";
  const run = { command, args: ["lsp", "--stdio"], transport: TransportKind.stdio };
  return { run, debug: run };
}

function clientOptions() {
  return {
    documentSelector: [
      { scheme: "file", language: "walk" },
      { scheme: "file", pattern: "**/placements/*.{yaml,yml}" },
    ],
  };
}

async function showPlan(uri) {
  const key = uri.toString();
  let panel = panels.get(key);
  if (!panel) {
    const title = `plan: ${uri.path.split("/").pop()}`;
    panel = vscode.window.createWebviewPanel("wgcPlan", title, vscode.ViewColumn.Beside, {
      enableScripts: true,
    });
    panels.set(key, panel);
    panel.onDidDispose(() => panels.delete(key));
  }
  const placement = vscode.workspace.getConfiguration("wgc").get("placement");
  const params = { uri: key };
  if (placement) {
    params.placement = vscode.Uri.joinPath(uri, "..", placement).toString();
  }
  const answer = await client.sendRequest("wgc/plan", params);
  panel.webview.html = answer.html || `<pre>${escapeHtml(answer.error || "no plan")}</pre>`;
}

function escapeHtml(text) {
  return text.replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);
}

async function activate(context) {
  client = new LanguageClient("wgc", "wgc", serverOptions(), clientOptions());
  await client.start();
  client.onNotification("wgc/planChanged", (params) => {
    if (panels.has(params.uri)) {
      showPlan(vscode.Uri.parse(params.uri));
    }
  });
  context.subscriptions.push(
    vscode.commands.registerCommand("wgc.showPlan", () => {
      const editor = vscode.window.activeTextEditor;
      if (!editor || editor.document.languageId !== "walk") {
        vscode.window.showInformationMessage("wgc: open a .walk file to see its plan");
        return;
      }
      return showPlan(editor.document.uri);
    }),
    vscode.commands.registerCommand("wgc.restartServer", () => client.restart()),
  );
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
