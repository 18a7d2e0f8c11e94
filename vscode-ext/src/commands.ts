// The palette's commands: create gpuemu.toml, start and stop the daemon, fuzz the op of the
// current file, show the failures.
import * as vscode from "vscode";
import { execFile } from "child_process";
import * as path from "path";
import { OpsResult, Requests, RunResult, ServerLink } from "./protocol";
import { Settings, gpuemuEnv } from "./settings";

// The registered ops whose kernel is in the file at `uri` (a script) or registered at that line of
// gpuemu.toml (a built-in kernel).
export function opsOfFile(ops: OpsResult, uri: string, line?: number): string[] {
  return ops.ops
    .filter((o) => o.uri === uri && (o.kind === "script" || line === undefined || o.config_line === line))
    .map((o) => o.id);
}

export function runSummary(results: RunResult[]): string {
  return results
    .map((r) => `${r.op} (${r.kernel}): ${r.status}${r.total !== undefined ? ` ${r.passed}/${r.total}` : ""}`)
    .join("; ");
}

function runGpuemu(s: Settings, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(s.path, args, { cwd, env: gpuemuEnv(s) }, (err, stdout, stderr) =>
      err ? reject(new Error(stderr.trim() || err.message)) : resolve(stdout),
    ),
  );
}

export function activateCommands(context: vscode.ExtensionContext, link: ServerLink, settings: () => Settings): void {
  const reg = (name: string, fn: (...args: any[]) => unknown) => context.subscriptions.push(vscode.commands.registerCommand(name, fn));
  reg("gpuemu.init", async () => {
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) return vscode.window.showErrorMessage("gpuemu: open a folder first");
    try {
      await runGpuemu(settings(), ["init"], folder.uri.fsPath);
      await vscode.window.showTextDocument(vscode.Uri.file(path.join(folder.uri.fsPath, "gpuemu.toml")));
    } catch (e) {
      return vscode.window.showErrorMessage(`gpuemu init: ${(e as Error).message}`);
    }
  });
  reg("gpuemu.startDaemon", async () => {
    try {
      const r = await link.sendRequest<{ pid?: number }>(Requests.daemon, { action: "start" });
      vscode.window.showInformationMessage(`gpuemu: daemon running (pid ${r.pid})`);
    } catch (e) {
      vscode.window.showErrorMessage(`gpuemu: ${(e as Error).message}`);
    }
  });
  reg("gpuemu.stopDaemon", async () => {
    try {
      await link.sendRequest(Requests.daemon, { action: "stop" });
      vscode.window.showInformationMessage("gpuemu: daemon stopping");
    } catch (e) {
      vscode.window.showErrorMessage(`gpuemu: ${(e as Error).message}`);
    }
  });
  reg("gpuemu.fuzzCurrentOp", async () => {
    const editor = vscode.window.activeTextEditor;
    if (!editor) return vscode.window.showWarningMessage("gpuemu: no file is open");
    const ops = await link.sendRequest<OpsResult>(Requests.ops);
    const ids = opsOfFile(ops, editor.document.uri.toString(), editor.selection.active.line);
    if (ids.length === 0) return vscode.window.showWarningMessage("gpuemu: no [[op]] of gpuemu.toml runs this file");
    const r = await link.sendRequest<{ results: RunResult[] }>(Requests.runOps, { ids });
    const failed = r.results.some((x) => x.status !== "passed");
    (failed ? vscode.window.showErrorMessage : vscode.window.showInformationMessage)(`gpuemu: ${runSummary(r.results)}`);
    return r.results;
  });
  reg("gpuemu.showFailures", () => vscode.commands.executeCommand("gpuemu.failures.focus"));
}
