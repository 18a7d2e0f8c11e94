// Launches `gpuemu lsp` through vscode-languageclient: Python files and gpuemu.toml are its
// documents; its diagnostics land in the Problems panel, its code actions in the light bulb.
import * as vscode from "vscode";
import { LanguageClient, LanguageClientOptions, ServerOptions } from "vscode-languageclient/node";
import { Settings, gpuemuEnv } from "./settings";

export function serverOptions(s: Settings): ServerOptions {
  return { command: s.path, args: ["lsp"], options: { env: gpuemuEnv(s) } };
}

export function clientOptions(s: Settings): LanguageClientOptions {
  return {
    documentSelector: [
      { scheme: "file", language: "python" },
      { scheme: "file", pattern: "**/gpuemu.toml" },
    ],
    initializationOptions: { home: s.home, python: s.python },
    outputChannelName: "gpuemu",
  };
}

export async function startLanguageClient(context: vscode.ExtensionContext, s: Settings): Promise<LanguageClient> {
  const client = new LanguageClient("gpuemu", "gpuemu", serverOptions(s), clientOptions(s));
  context.subscriptions.push(client);
  await client.start();
  return client;
}
