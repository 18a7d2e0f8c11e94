import * as assert from "assert";
import { activateStatusBar, statusText } from "../src/status-bar";
import { FakeLink, fakeContext } from "./fake-link";
import { registry, resetRegistry } from "./fake-vscode";

describe("status bar", () => {
  beforeEach(resetRegistry);

  it("shows the daemon's state from gpuemu/daemonStatus", () => {
    const link = new FakeLink();
    const item = activateStatusBar(fakeContext() as any, link) as any;
    assert.ok(item.shown && item.command === "gpuemu.showFailures");
    link.emit("gpuemu/daemonStatus", { running: true, home: "/h", pid: 42, version: "0.1.0", current_failures: 3 });
    assert.strictEqual(item.text, "$(error) gpuemu: 3 failing");
    assert.match(item.tooltip, /pid 42/);
    link.emit("gpuemu/daemonStatus", { running: true, home: "/h", pid: 42, current_failures: 0 });
    assert.strictEqual(item.text, "$(pass) gpuemu");
    link.emit("gpuemu/daemonStatus", { running: false, home: "/h" });
    assert.strictEqual(item.text, "$(circle-slash) gpuemu: no daemon");
    assert.strictEqual(registry.statusItems.length, 1);
  });

  it("words a stopped daemon with its home", () => {
    assert.match(statusText({ running: false, home: "/tmp/h" }).tooltip, /\/tmp\/h/);
  });
});
