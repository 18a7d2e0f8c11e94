// The extension's settings (package.json "configuration"): the gpuemu binary, GPUEMU_HOME, and the
// Python that runs repro scripts of client-side kernels.
import * as vscode from "vscode";

export interface Settings {
  path: string;
  home: string;
  python: string;
}

export function readSettings(): Settings {
  const c = vscode.workspace.getConfiguration("gpuemu");
  return {
    path: c.get<string>("path") || "gpuemu",
    home: c.get<string>("home") || "",
    python: c.get<string>("python") || "python3",
  };
}

// The environment `gpuemu` runs with: GPUEMU_HOME from the setting when it is set.
export function gpuemuEnv(s: Settings, base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const env = { ...base };
  if (s.home) env.GPUEMU_HOME = s.home;
  return env;
}
