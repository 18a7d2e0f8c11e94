// The wire types of `gpuemu lsp`'s own requests and notifications, declared once (docs/protocol.md,
// "The editor's requests"). test/protocol.test.ts fails when a name here is not in that document.

export const Requests = {
  ops: "gpuemu/ops",
  runOps: "gpuemu/runOps",
  failures: "gpuemu/failures",
  failure: "gpuemu/failure",
  daemon: "gpuemu/daemon",
} as const;

export const Notifications = {
  daemonStatus: "gpuemu/daemonStatus",
  failuresChanged: "gpuemu/failuresChanged",
  validated: "gpuemu/validated",
} as const;

export const ServerCommands = {
  reproduce: "gpuemu.reproduce",
  minimize: "gpuemu.minimize",
} as const;

export interface WireRange {
  start: { line: number; character: number };
  end: { line: number; character: number };
}

export interface RegisteredOp {
  id: string;
  op: string;
  kernel: string;
  kind: "script" | "builtin";
  uri: string;
  range: WireRange;
  config_uri: string;
  config_line: number;
  dtypes: string[];
  iterations: number;
  status: "passed" | "failed" | "unknown";
  last?: { run_id: string; started_ms: number; total: number; passed: number };
  current_failures: number;
}

export interface OpsResult {
  config: string;
  error?: string;
  ops: RegisteredOp[];
}

export interface RunResult {
  id: string;
  op: string;
  kernel: string;
  status: "passed" | "failed" | "error";
  total?: number;
  passed?: number;
  failed?: number;
  first_failure?: number;
  failure_ids?: string[];
  message: string;
}

export interface FailureItem {
  id: string;
  seed: string; // 64-bit: sent as text (a JavaScript number would lose digits)
  dtype: string;
  shapes: Record<string, number[]>;
  max_error: number | string | null;
  envelope: number | null;
  message: string;
  bug_class: string;
  summary: string | null;
  headline: string;
}

export interface FailureGroup {
  op: string;
  dtype: string;
  kernel: { kind?: string; name?: string; file?: string; function?: string; line?: number };
  uri?: string;
  range?: WireRange;
  failures: FailureItem[];
}

export interface ErrorMap {
  output: string;
  shape: number[];
  rows: number;
  cols: number;
  cell: [number, number];
  size: [number, number];
  envelope: number;
  max_error: number | null;
  over: number;
  cells: (number | null)[];
}

export interface FailureRecord {
  id: string;
  op: string;
  seed: string; // 64-bit: sent as text
  dtype: string;
  message?: string;
  error_map?: ErrorMap;
  diagnosis?: { bug_class?: string; summary?: string; evidence?: string[] };
  kernel?: FailureGroup["kernel"];
  shapes?: Record<string, number[]>;
}

export interface DaemonStatus {
  running: boolean;
  home: string;
  pid?: number;
  version?: string;
  current_failures?: number;
}

export interface ActionResult {
  id: string;
  kind: string;
  summary: string;
  uri?: string;
  passed?: boolean | null;
}

// What the features need of the language client (vscode-languageclient's LanguageClient has it);
// tests pass a fake.
export interface ServerLink {
  sendRequest<R>(method: string, params?: unknown): Promise<R>;
  onNotification(method: string, handler: (params: any) => void): { dispose(): void };
}
