// Every `require("vscode")` of the code under test gets the fake (VS Code itself cannot run here).
import Module = require("module");
import * as path from "path";

const fake = path.join(__dirname, "fake-vscode.js");
const original = (Module as any)._resolveFilename;
(Module as any)._resolveFilename = function (request: string, ...rest: unknown[]) {
  if (request === "vscode") return fake;
  return original.call(this, request, ...rest);
};
