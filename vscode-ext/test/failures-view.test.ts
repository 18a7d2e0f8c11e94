import * as assert from "assert";
import { activateFailuresView, FailureNode } from "../src/failures-view";
import type { FailureGroup } from "../src/protocol";
import { FakeLink, fakeContext } from "./fake-link";
import { registry, resetRegistry } from "./fake-vscode";

const GROUP: FailureGroup = {
  op: "softmax",
  dtype: "bfloat16",
  kernel: { kind: "client", name: "my_softmax", file: "/p/k.py", line: 7 },
  uri: "file:///p/k.py",
  range: { start: { line: 6, character: 4 }, end: { line: 6, character: 14 } },
  failures: [
    { id: "f1", seed: "924307454882074172", dtype: "bfloat16", shapes: { x: [191, 30] }, max_error: 85.6, envelope: 2,
      message: "2310 of 5730 elements over the envelope", bug_class: "tail_mask", summary: "fails when N is not a multiple of 128",
      headline: "softmax bfloat16 seed 924307454882074172 x=[191, 30]: max error 85.6 > envelope 2" },
  ],
};

describe("failures view", () => {
  beforeEach(resetRegistry);

  it("lists op groups, then failures with seed, dtype and shapes; opening one goes to the kernel line", async () => {
    const link = new FakeLink().on("gpuemu/failures", () => ({ groups: [GROUP] }));
    activateFailuresView(fakeContext() as any, link);
    const provider = registry.treeProviders.get("gpuemu.failures");
    const roots: FailureNode[] = await provider.getChildren();
    assert.strictEqual(roots.length, 1);
    const group = provider.getTreeItem(roots[0]);
    assert.strictEqual(group.label, "softmax bfloat16: my_softmax");
    assert.strictEqual(group.description, "1 failing case");
    const kids: FailureNode[] = await provider.getChildren(roots[0]);
    const item = provider.getTreeItem(kids[0]);
    assert.strictEqual(item.label, "seed 924307454882074172");
    assert.strictEqual(item.description, "bfloat16 x=[191, 30]");
    assert.strictEqual(item.contextValue, "failure");
    assert.strictEqual(item.command.command, "vscode.open");
    assert.strictEqual(item.command.arguments[0].toString(), "file:///p/k.py");
    assert.strictEqual(item.command.arguments[1].selection.start.line, 6);
  });

  it("reproduces and minimizes through the server's commands, and refreshes on failuresChanged", async () => {
    const link = new FakeLink().on("gpuemu/failures", () => ({ groups: [GROUP] }));
    const provider = activateFailuresView(fakeContext() as any, link);
    const seen: unknown[] = [];
    registry.commands.set("gpuemu.reproduce", (id: string) => (seen.push(["reproduce", id]), { summary: "ok" }));
    registry.commands.set("gpuemu.minimize", (id: string) => (seen.push(["minimize", id]), { summary: "ok" }));
    const node = { kind: "failure", group: GROUP, failure: GROUP.failures[0] };
    await registry.commands.get("gpuemu.failures.reproduce")!(node);
    await registry.commands.get("gpuemu.failures.minimize")!(node);
    assert.deepStrictEqual(seen, [["reproduce", "f1"], ["minimize", "f1"]]);
    // A group node has no failure id: nothing runs.
    assert.strictEqual(await registry.commands.get("gpuemu.failures.reproduce")!({ kind: "group", group: GROUP }), undefined);
    let refreshed = 0;
    provider.onDidChangeTreeData(() => refreshed++);
    link.emit("gpuemu/failuresChanged", {});
    assert.strictEqual(refreshed, 1);
  });

  it("shows a failure's error map in a webview without scripts", async () => {
    const link = new FakeLink()
      .on("gpuemu/failures", () => ({ groups: [GROUP] }))
      .on("gpuemu/failure", (p: { id: string }) => ({
        id: p.id, op: "softmax", seed: "5", dtype: "float32", message: "1 of 4 elements over the envelope",
        shapes: { x: [2, 2] }, diagnosis: { bug_class: "no_pattern", summary: "" },
        error_map: { output: "out", shape: [2, 2], rows: 2, cols: 2, cell: [1, 1], size: [2, 2], envelope: 2, max_error: 50, over: 1, cells: [0.1, 0.2, 0.3, 50] },
      }));
    activateFailuresView(fakeContext() as any, link);
    await registry.commands.get("gpuemu.failures.showErrorMap")!({ kind: "failure", group: GROUP, failure: GROUP.failures[0] });
    assert.strictEqual(registry.panels.length, 1);
    const p = registry.panels[0];
    assert.strictEqual(p.options.enableScripts, false);
    assert.match(p.webview.html, /class="error-map"/);
    assert.match(p.webview.html, /Error map of output 'out'/);
    assert.doesNotMatch(p.webview.html, /<script/);
  });
});
