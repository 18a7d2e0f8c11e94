// The one allowed fake: the part of the `vscode` API the extension uses, recording what the
// extension did (commands registered and run, messages shown, tree providers, webviews, test runs).

export interface Disposable {
  dispose(): void;
}

export const registry = {
  commands: new Map<string, (...args: any[]) => any>(),
  executed: [] as unknown[][],
  messages: [] as { kind: string; text: string }[],
  treeProviders: new Map<string, any>(),
  panels: [] as { viewType: string; title: string; webview: { html: string }; options: any }[],
  statusItems: [] as any[],
  controllers: [] as FakeTestController[],
  config: {} as Record<string, unknown>,
  opened: [] as unknown[],
};

export function resetRegistry(): void {
  registry.commands.clear();
  registry.executed = [];
  registry.messages = [];
  registry.treeProviders.clear();
  registry.panels = [];
  registry.statusItems = [];
  registry.controllers = [];
  registry.config = {};
  registry.opened = [];
  window.activeTextEditor = undefined;
  workspace.workspaceFolders = undefined;
}

const disposable = (fn: () => void = () => undefined): Disposable => ({ dispose: fn });

export class EventEmitter<T> {
  private listeners: ((v: T) => void)[] = [];
  fired: T[] = [];
  event = (l: (v: T) => void): Disposable => {
    this.listeners.push(l);
    return disposable(() => (this.listeners = this.listeners.filter((x) => x !== l)));
  };
  fire(v: T): void {
    this.fired.push(v);
    for (const l of this.listeners) l(v);
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Position {
  constructor(public line: number, public character: number) {}
}

export class Range {
  start: Position;
  end: Position;
  constructor(sl: number, sc: number, el: number, ec: number) {
    this.start = new Position(sl, sc);
    this.end = new Position(el, ec);
  }
}

export class Uri {
  private constructor(private readonly text: string) {}
  static parse(s: string): Uri {
    return new Uri(s);
  }
  static file(p: string): Uri {
    return new Uri("file://" + p);
  }
  get fsPath(): string {
    return decodeURIComponent(this.text.replace(/^file:\/\//, ""));
  }
  toString(): string {
    return this.text;
  }
}

export enum TreeItemCollapsibleState {
  None = 0,
  Collapsed = 1,
  Expanded = 2,
}

export class TreeItem {
  description?: string;
  tooltip?: string;
  iconPath?: unknown;
  contextValue?: string;
  command?: { title: string; command: string; arguments?: unknown[] };
  constructor(public label: string, public collapsibleState?: TreeItemCollapsibleState) {}
}

export class ThemeIcon {
  constructor(public id: string) {}
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export enum ViewColumn {
  Beside = -2,
}

export enum TestRunProfileKind {
  Run = 1,
  Debug = 2,
  Coverage = 3,
}

export class TestMessage {
  constructor(public message: string) {}
}

export interface FakeTestItem {
  id: string;
  label: string;
  uri?: Uri;
  range?: Range;
  description?: string;
}

export class FakeTestRun {
  events: [string, string, string?][] = [];
  ended = false;
  constructor(public request: any) {}
  started(i: FakeTestItem) {
    this.events.push(["started", i.id]);
  }
  passed(i: FakeTestItem) {
    this.events.push(["passed", i.id]);
  }
  failed(i: FakeTestItem, m: TestMessage) {
    this.events.push(["failed", i.id, m.message]);
  }
  errored(i: FakeTestItem, m: TestMessage) {
    this.events.push(["errored", i.id, m.message]);
  }
  skipped(i: FakeTestItem) {
    this.events.push(["skipped", i.id]);
  }
  end() {
    this.ended = true;
  }
}

export class FakeTestController {
  private readonly map = new Map<string, FakeTestItem>();
  profiles: { label: string; kind: TestRunProfileKind; handler: (req: any, token: any) => any; isDefault: boolean }[] = [];
  runs: FakeTestRun[] = [];
  resolveHandler?: () => unknown;
  items = {
    replace: (items: FakeTestItem[]) => {
      this.map.clear();
      for (const i of items) this.map.set(i.id, i);
    },
    forEach: (fn: (i: FakeTestItem) => void) => this.map.forEach((i) => fn(i)),
    get: (id: string) => this.map.get(id),
    get size() {
      return 0;
    },
  };
  constructor(public id: string, public label: string) {}
  createTestItem(id: string, label: string, uri?: Uri): FakeTestItem {
    return { id, label, uri };
  }
  createRunProfile(label: string, kind: TestRunProfileKind, handler: (req: any, token: any) => any, isDefault = false) {
    this.profiles.push({ label, kind, handler, isDefault });
    return disposable();
  }
  createTestRun(request: any): FakeTestRun {
    const r = new FakeTestRun(request);
    this.runs.push(r);
    return r;
  }
  all(): FakeTestItem[] {
    return [...this.map.values()];
  }
  dispose() {}
}

export const window = {
  activeTextEditor: undefined as any,
  createStatusBarItem(alignment: StatusBarAlignment, priority: number) {
    const item = { alignment, priority, text: "", tooltip: "", command: "", shown: false, show() { this.shown = true; }, dispose() {} };
    registry.statusItems.push(item);
    return item;
  },
  showInformationMessage(text: string) {
    registry.messages.push({ kind: "info", text });
    return Promise.resolve(undefined);
  },
  showWarningMessage(text: string) {
    registry.messages.push({ kind: "warning", text });
    return Promise.resolve(undefined);
  },
  showErrorMessage(text: string) {
    registry.messages.push({ kind: "error", text });
    return Promise.resolve(undefined);
  },
  registerTreeDataProvider(id: string, provider: unknown) {
    registry.treeProviders.set(id, provider);
    return disposable(() => registry.treeProviders.delete(id));
  },
  createWebviewPanel(viewType: string, title: string, _column: ViewColumn, options: unknown) {
    const panel = { viewType, title, webview: { html: "" }, options, dispose() {} };
    registry.panels.push(panel);
    return panel;
  },
  showTextDocument(uri: Uri) {
    registry.opened.push(uri);
    return Promise.resolve(undefined);
  },
};

export const commands = {
  registerCommand(name: string, fn: (...args: any[]) => any): Disposable {
    if (registry.commands.has(name)) throw new Error(`command '${name}' already exists`);
    registry.commands.set(name, fn);
    return disposable(() => registry.commands.delete(name));
  },
  executeCommand(name: string, ...args: unknown[]): Promise<unknown> {
    registry.executed.push([name, ...args]);
    const fn = registry.commands.get(name);
    return Promise.resolve(fn ? fn(...args) : undefined);
  },
};

export const workspace = {
  workspaceFolders: undefined as { uri: Uri }[] | undefined,
  getConfiguration(section: string) {
    return { get: <T>(key: string) => registry.config[`${section}.${key}`] as T | undefined };
  },
};

export const tests = {
  createTestController(id: string, label: string) {
    const c = new FakeTestController(id, label);
    registry.controllers.push(c);
    return c;
  },
};
