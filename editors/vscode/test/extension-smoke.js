// Runs extension.js against stand-ins for the `vscode` and `vscode-languageclient/node` modules:
// activation starts a client on `wgc lsp --stdio`, registers both commands, and "Show the placed
// plan" asks the server for `wgc/plan` and puts the page in a webview, again on `wgc/planChanged`.
// Prints "ok" (exit 0) or the failed check (exit 1). Usage: node extension-smoke.js
"use strict";

const assert = require("assert");
const Module = require("module");
const path = require("path");

const log = { commands: {}, requests: [], notifications: {}, panels: [], started: null };

const vscode = {
  ViewColumn: { Beside: 2 },
  Uri: {
    parse: (s) => ({ toString: () => s, path: s.replace("file://", "") }),
    joinPath: (u, ...parts) => ({ toString: () => [u.toString(), ...parts].join("/") }),
  },
  workspace: { getConfiguration: () => ({ get: () => undefined }) },
  window: {
    activeTextEditor: {
      document: {
        languageId: "walk",
        uri: { toString: () => "file:///m/orpheus.walk", path: "/m/orpheus.walk" },
      },
    },
    showInformationMessage: () => undefined,
    createWebviewPanel: (_id, title) => {
      const panel = { title, webview: { html: "" }, onDidDispose: () => undefined };
      log.panels.push(panel);
      return panel;
    },
  },
  commands: {
    registerCommand: (name, fn) => {
      log.commands[name] = fn;
      return { dispose() {} };
    },
  },
};

class LanguageClient {
  constructor(id, name, server) {
    log.started = server.run;
  }
  async start() {}
  async stop() {}
  async restart() {}
  onNotification(method, fn) {
    log.notifications[method] = fn;
  }
  async sendRequest(method, params) {
    log.requests.push([method, params]);
    return { html: `<!doctype html><p>plan ${log.requests.length}</p>` };
  }
}

const fakes = { vscode, "vscode-languageclient/node": { LanguageClient, TransportKind: { stdio: 0 } } };
const load = Module._load;
Module._load = function (request, parent, isMain) {
  return request in fakes ? fakes[request] : load.call(this, request, parent, isMain);
};

async function main() {
  const ext = require(path.join(__dirname, "..", "extension.js"));
  const context = { subscriptions: [] };
  await ext.activate(context);
  assert.deepStrictEqual(log.started.args, ["lsp", "--stdio"]);
  assert.strictEqual(log.started.command, "wgc");
  assert.deepStrictEqual(Object.keys(log.commands).sort(), ["wgc.restartServer", "wgc.showPlan"]);
  await log.commands["wgc.showPlan"]();
  assert.deepStrictEqual(log.requests[0], ["wgc/plan", { uri: "file:///m/orpheus.walk" }]);
  assert.strictEqual(log.panels.length, 1);
  assert.ok(log.panels[0].webview.html.includes("plan 1"));
  log.notifications["wgc/planChanged"]({ uri: "file:///m/orpheus.walk" });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.strictEqual(log.panels.length, 1, "the open view is reused");
  assert.ok(log.panels[0].webview.html.includes("plan 2"), "redrawn after a save");
  log.notifications["wgc/planChanged"]({ uri: "file:///m/other.walk" });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.strictEqual(log.requests.length, 2, "no view, no request");
  process.stdout.write("ok\n");
}

main().catch((err) => {
  process.stdout.write(`${err.message}\n`);
  process.exit(1);
});
