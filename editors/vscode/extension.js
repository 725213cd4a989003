// The daic extension: languages and grammars are declared in package.json; this starts `daic lsp` as the
// language server of both, over stdin/stdout, and restarts it when its settings change.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function serverOptions() {
  const config = vscode.workspace.getConfiguration("daic.server");
  return {
    command: config.get("command", "daic"),
    args: config.get("args", ["lsp"]),
    transport: TransportKind.stdio,
  };
}

async function start() {
  client = new LanguageClient("daic", "daic language server", serverOptions(), {
    documentSelector: [
      { scheme: "file", language: "dai" },
      { scheme: "file", language: "daic-net" },
      { scheme: "untitled", language: "dai" },
      { scheme: "untitled", language: "daic-net" },
    ],
  });
  await client.start();
}

async function activate(context) {
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("daic.server")) {
        await deactivate();
        await start();
      }
    }),
  );
  await start();
}

async function deactivate() {
  if (client) {
    const running = client;
    client = undefined;
    await running.stop();
  }
}

module.exports = { activate, deactivate };
