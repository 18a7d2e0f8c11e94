// The extension's mirror of the server's own requests (src/protocol.ts) must match what
// docs/protocol.md documents, as rust-analyzer checks its extension against its server.
import * as assert from "assert";
import * as fs from "fs";
import * as path from "path";
import { Notifications, Requests, ServerCommands } from "../src/protocol";

describe("protocol mirror", () => {
  const doc = fs.readFileSync(path.join(__dirname, "..", "..", "..", "docs", "protocol.md"), "utf8");
  const editor = doc.slice(doc.indexOf("## The editor's requests"));

  it("documents every request, notification and command the extension uses", () => {
    assert.ok(editor.length > 100, "docs/protocol.md has no section \"The editor's requests\"");
    for (const name of [...Object.values(Requests), ...Object.values(Notifications), ...Object.values(ServerCommands)])
      assert.ok(editor.includes("`" + name + "`"), `${name} is not in docs/protocol.md`);
  });
});
