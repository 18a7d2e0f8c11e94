import * as assert from "assert";
import * as fs from "fs";
import * as path from "path";
import { activateCommands, opsOfFile, runSummary } from "../src/commands";
import { activateFailuresView } from "../src/failures-view";
import type { OpsResult } from "../src/protocol";
import { FakeLink, fakeContext } from "./fake-link";
import { Position, registry, resetRegistry, Uri, window } from "./fake-vscode";

const OPS: OpsResult = {
  config: "/p/gpuemu.toml",
  ops: [
    { id: "0:softmax:k.py:bad", op: "softmax", kernel: "k.py:bad", kind: "script", uri: "file:///p/k.py",
      range: { start: { line: 3, character: 4 }, end: { line: 3, character: 7 } }, config_uri: "file:///p/gpuemu.toml",
      config_line: 8, dtypes: [], iterations: 12, status: "unknown", current_failures: 0 },
    { id: "1:sum:builtin:lowp", op: "sum", kernel: "builtin:lowp", kind: "builtin", uri: "file:///p/gpuemu.toml",
      range: { start: { line: 12, character: 0 }, end: { line: 12, character: 5 } }, config_uri: "file:///p/gpuemu.toml",
      config_line: 12, dtypes: [], iterations: 12, status: "unknown", current_failures: 0 },
  ],
};

const settings = () => ({ path: "gpuemu", home: "", python: "python3" });

describe("commands", () => {
  beforeEach(resetRegistry);

  it("picks the ops of a script file, or of the gpuemu.toml line under the cursor", () => {
    assert.deepStrictEqual(opsOfFile(OPS, "file:///p/k.py", 0), ["0:softmax:k.py:bad"]);
    assert.deepStrictEqual(opsOfFile(OPS, "file:///p/gpuemu.toml", 12), ["1:sum:builtin:lowp"]);
    assert.deepStrictEqual(opsOfFile(OPS, "file:///p/other.py", 0), []);
    assert.strictEqual(runSummary([{ id: "x", op: "sum", kernel: "k", status: "failed", total: 4, passed: 1, message: "" }]),
      "sum (k): failed 1/4");
  });

  it("fuzzes the op of the current file and says how it went", async () => {
    const link = new FakeLink().on("gpuemu/ops", () => OPS).on("gpuemu/runOps", (p: { ids: string[] }) => ({
      results: p.ids.map((id) => ({ id, op: "softmax", kernel: "k.py:bad", status: "failed", total: 12, passed: 0, message: "m" })),
    }));
    activateCommands(fakeContext() as any, link, settings);
    window.activeTextEditor = { document: { uri: Uri.parse("file:///p/k.py") }, selection: { active: new Position(5, 0) } };
    await registry.commands.get("gpuemu.fuzzCurrentOp")!();
    assert.deepStrictEqual(link.requests.at(-1), ["gpuemu/runOps", { ids: ["0:softmax:k.py:bad"] }]);
    assert.deepStrictEqual(registry.messages.at(-1), { kind: "error", text: "gpuemu: softmax (k.py:bad): failed 0/12" });
    window.activeTextEditor = { document: { uri: Uri.parse("file:///p/elsewhere.py") }, selection: { active: new Position(0, 0) } };
    await registry.commands.get("gpuemu.fuzzCurrentOp")!();
    assert.match(registry.messages.at(-1)!.text, /no \[\[op\]\] of gpuemu.toml runs this file/);
  });

  it("starts and stops the daemon through the server, and reports a failure to", async () => {
    const link = new FakeLink().on("gpuemu/daemon", (p: { action: string }) => {
      if (p.action === "stop") throw new Error("no daemon answers");
      return { pid: 99, running: true };
    });
    activateCommands(fakeContext() as any, link, settings);
    await registry.commands.get("gpuemu.startDaemon")!();
    assert.deepStrictEqual(registry.messages.at(-1), { kind: "info", text: "gpuemu: daemon running (pid 99)" });
    await registry.commands.get("gpuemu.stopDaemon")!();
    assert.deepStrictEqual(registry.messages.at(-1), { kind: "error", text: "gpuemu: no daemon answers" });
  });

  it("registers every command package.json contributes, once", () => {
    const link = new FakeLink();
    activateCommands(fakeContext() as any, link, settings);
    activateFailuresView(fakeContext() as any, link);
    const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
    const contributed: string[] = pkg.contributes.commands.map((c: { command: string }) => c.command);
    for (const c of contributed) assert.ok(registry.commands.has(c), `${c} has no handler`);
    assert.deepStrictEqual([...registry.commands.keys()].sort(), [...contributed].sort());
  });

  it("init runs `gpuemu init` in the workspace folder and reports its error", async () => {
    const link = new FakeLink();
    activateCommands(fakeContext() as any, link, () => ({ path: "/nonexistent/gpuemu", home: "", python: "python3" }));
    await registry.commands.get("gpuemu.init")!();
    assert.match(registry.messages.at(-1)!.text, /open a folder first/);
    const { workspace } = require("./fake-vscode");
    workspace.workspaceFolders = [{ uri: Uri.file("/tmp") }];
    await registry.commands.get("gpuemu.init")!();
    assert.match(registry.messages.at(-1)!.text, /gpuemu init: .*ENOENT|gpuemu init: /);
  });
});
