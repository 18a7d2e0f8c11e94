import * as assert from "assert";
import { activateTestController } from "../src/test-controller";
import type { OpsResult } from "../src/protocol";
import { FakeLink, fakeContext } from "./fake-link";
import { FakeTestController, registry, resetRegistry } from "./fake-vscode";

const OPS: OpsResult = {
  config: "/p/gpuemu.toml",
  ops: [
    { id: "0:softmax:k.py:good", op: "softmax", kernel: "k.py:good", kind: "script", uri: "file:///p/k.py",
      range: { start: { line: 3, character: 4 }, end: { line: 3, character: 8 } }, config_uri: "file:///p/gpuemu.toml",
      config_line: 8, dtypes: ["float32"], iterations: 12, status: "unknown", current_failures: 0 },
    { id: "1:softmax:builtin:tail_leak", op: "softmax", kernel: "builtin:tail_leak", kind: "builtin",
      uri: "file:///p/gpuemu.toml", range: { start: { line: 12, character: 0 }, end: { line: 12, character: 5 } },
      config_uri: "file:///p/gpuemu.toml", config_line: 12, dtypes: [], iterations: 12, status: "failed", current_failures: 4 },
  ],
};

async function settle(): Promise<void> {
  await new Promise((r) => setImmediate(r));
}

describe("test controller", () => {
  beforeEach(resetRegistry);

  it("lists the registered ops at their kernels", async () => {
    const link = new FakeLink().on("gpuemu/ops", () => OPS);
    activateTestController(fakeContext() as any, link);
    await settle();
    const c: FakeTestController = registry.controllers[0];
    const items = c.all();
    assert.deepStrictEqual(items.map((i) => i.label), ["softmax (k.py:good)", "softmax (builtin:tail_leak)"]);
    assert.strictEqual(items[0].uri!.toString(), "file:///p/k.py");
    assert.strictEqual(items[0].range!.start.line, 3);
    assert.strictEqual(items[1].description, "last: failed");
    assert.strictEqual(c.profiles.length, 1);
    assert.ok(c.profiles[0].isDefault);
  });

  it("runs one op or all of them through gpuemu/runOps and reports each result", async () => {
    const link = new FakeLink()
      .on("gpuemu/ops", () => OPS)
      .on("gpuemu/runOps", (p: { ids: string[] }) => ({
        results: p.ids.map((id) =>
          id.startsWith("0:")
            ? { id, op: "softmax", kernel: "k.py:good", status: "passed", total: 12, passed: 12, message: "12/12 cases passed" }
            : { id, op: "softmax", kernel: "builtin:tail_leak", status: "failed", total: 12, passed: 3, failed: 9, first_failure: 0, message: "tail" },
        ),
      }));
    activateTestController(fakeContext() as any, link);
    await settle();
    const c: FakeTestController = registry.controllers[0];
    const one = c.all()[0];
    await c.profiles[0].handler({ include: [one] }, { isCancellationRequested: false });
    assert.deepStrictEqual(link.requests.filter((r) => r[0] === "gpuemu/runOps")[0][1], { ids: [one.id] });
    assert.deepStrictEqual(c.runs[0].events, [["started", one.id], ["passed", one.id]]);
    assert.ok(c.runs[0].ended);
    await c.profiles[0].handler({}, { isCancellationRequested: false });
    const all = c.runs[1].events.filter((e) => e[0] !== "started");
    assert.deepStrictEqual(all.map((e) => e[0]), ["passed", "failed"]);
    assert.match(all[1][2]!, /9 of 12 cases failed \(first at case 0\): tail/);
  });

  it("marks every op errored when the server cannot run them", async () => {
    const link = new FakeLink().on("gpuemu/ops", () => OPS).on("gpuemu/runOps", () => {
      throw new Error("no daemon");
    });
    activateTestController(fakeContext() as any, link);
    await settle();
    const c: FakeTestController = registry.controllers[0];
    await c.profiles[0].handler({}, undefined);
    assert.deepStrictEqual(c.runs[0].events.filter((e) => e[0] === "errored").length, 2);
    assert.ok(c.runs[0].ended);
  });
});
