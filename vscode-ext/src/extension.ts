// The gpuemu extension: a thin client of `gpuemu lsp`. This file only wires the features; each
// lives in its own file.
import * as vscode from "vscode";
import { LanguageClient } from "vscode-languageclient/node";
import { activateCommands } from "./commands";
import { activateFailuresView } from "./failures-view";
import { startLanguageClient } from "./language-client";
import { readSettings } from "./settings";
import { activateStatusBar } from "./status-bar";
import { activateTestController } from "./test-controller";

let client: LanguageClient | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  client = await startLanguageClient(context, readSettings());
  activateStatusBar(context, client);
  activateFailuresView(context, client);
  activateTestController(context, client);
  activateCommands(context, client, readSettings);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
