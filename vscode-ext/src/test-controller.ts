// The Test Explorer: one test per [[op]] of gpuemu.toml (the server's gpuemu/ops), run one or all
// through gpuemu/runOps; results come from the daemon's fuzz runs.
import * as vscode from "vscode";
import { Notifications, OpsResult, Requests, RunResult, ServerLink } from "./protocol";

export function opLabel(op: { op: string; kernel: string }): string {
  return `${op.op} (${op.kernel})`;
}

export class OpsTests {
  readonly controller: vscode.TestController;

  constructor(private readonly link: ServerLink) {
    this.controller = vscode.tests.createTestController("gpuemu", "gpuemu ops");
    this.controller.resolveHandler = () => this.load();
    this.controller.createRunProfile("Fuzz", vscode.TestRunProfileKind.Run, async (request, token) => {
      await this.run(request, token);
    }, true);
  }

  async load(): Promise<void> {
    const r = await this.link.sendRequest<OpsResult>(Requests.ops);
    const items: vscode.TestItem[] = [];
    for (const op of r.ops) {
      const item = this.controller.createTestItem(op.id, opLabel(op), vscode.Uri.parse(op.uri));
      item.range = new vscode.Range(op.range.start.line, op.range.start.character, op.range.end.line, op.range.end.character);
      item.description = op.status === "unknown" ? op.dtypes.join(", ") : `last: ${op.status}`;
      items.push(item);
    }
    this.controller.items.replace(items);
  }

  async run(request: vscode.TestRunRequest, token?: vscode.CancellationToken): Promise<RunResult[]> {
    const run = this.controller.createTestRun(request);
    const chosen: vscode.TestItem[] = [];
    if (request.include) chosen.push(...request.include);
    else this.controller.items.forEach((item) => chosen.push(item));
    const excluded = new Set((request.exclude ?? []).map((i) => i.id));
    const todo = chosen.filter((i) => !excluded.has(i.id));
    for (const item of todo) run.started(item);
    let results: RunResult[] = [];
    try {
      if (!token?.isCancellationRequested) {
        const r = await this.link.sendRequest<{ results: RunResult[] }>(Requests.runOps, { ids: todo.map((i) => i.id) });
        results = r.results;
      }
      for (const item of todo) {
        const res = results.find((x) => x.id === item.id);
        if (!res) run.skipped(item);
        else if (res.status === "passed") run.passed(item);
        else if (res.status === "failed")
          run.failed(item, new vscode.TestMessage(`${res.failed} of ${res.total} cases failed (first at case ${res.first_failure}): ${res.message}`));
        else run.errored(item, new vscode.TestMessage(res.message));
      }
    } catch (e) {
      for (const item of todo) run.errored(item, new vscode.TestMessage(String(e)));
    } finally {
      run.end();
    }
    return results;
  }
}

export function activateTestController(context: vscode.ExtensionContext, link: ServerLink): OpsTests {
  const tests = new OpsTests(link);
  context.subscriptions.push(tests.controller, link.onNotification(Notifications.failuresChanged, () => void tests.load()));
  void tests.load();
  return tests;
}
