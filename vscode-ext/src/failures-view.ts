// The Failures view: op -> failures (seed, dtype, shapes), from the server's gpuemu/failures.
// Opening a failure goes to its kernel's line; its context menu reproduces, minimizes or shows
// its error map. Refreshed when the server says failures changed.
import * as vscode from "vscode";
import { FailureGroup, FailureItem, Notifications, Requests, ServerCommands, ServerLink } from "./protocol";
import { showFailurePanel } from "./failure-panel";

export type FailureNode =
  | { kind: "group"; group: FailureGroup }
  | { kind: "failure"; group: FailureGroup; failure: FailureItem };

function shapesText(shapes: Record<string, number[]>): string {
  return Object.entries(shapes).map(([k, v]) => `${k}=[${v.join(", ")}]`).join(" ");
}

export class FailuresProvider implements vscode.TreeDataProvider<FailureNode> {
  private readonly changed = new vscode.EventEmitter<FailureNode | undefined>();
  readonly onDidChangeTreeData = this.changed.event;

  constructor(private readonly link: ServerLink) {}

  refresh(): void {
    this.changed.fire(undefined);
  }

  async getChildren(node?: FailureNode): Promise<FailureNode[]> {
    if (!node) {
      const r = await this.link.sendRequest<{ groups: FailureGroup[] }>(Requests.failures);
      return r.groups.map((group) => ({ kind: "group", group }));
    }
    if (node.kind === "group") return node.group.failures.map((failure) => ({ kind: "failure", group: node.group, failure }));
    return [];
  }

  getTreeItem(node: FailureNode): vscode.TreeItem {
    if (node.kind === "group") {
      const g = node.group;
      const name = g.kernel.function ?? g.kernel.name ?? "kernel";
      const item = new vscode.TreeItem(`${g.op} ${g.dtype}: ${name}`, vscode.TreeItemCollapsibleState.Expanded);
      item.description = `${g.failures.length} failing case${g.failures.length === 1 ? "" : "s"}`;
      item.iconPath = new vscode.ThemeIcon("error");
      item.contextValue = "group";
      return item;
    }
    const f = node.failure;
    const item = new vscode.TreeItem(`seed ${f.seed}`, vscode.TreeItemCollapsibleState.None);
    item.description = `${f.dtype} ${shapesText(f.shapes)}`;
    item.tooltip = `${f.headline}\n${f.bug_class}${f.summary ? ": " + f.summary : ""}\n${f.id}`;
    item.contextValue = "failure";
    const g = node.group;
    if (g.uri) {
      const r = g.range;
      const selection = r ? new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character) : undefined;
      item.command = { title: "Go to the kernel", command: "vscode.open", arguments: [vscode.Uri.parse(g.uri), { selection }] };
    }
    return item;
  }
}

export function failureIdOf(node: FailureNode | undefined): string | undefined {
  return node && node.kind === "failure" ? node.failure.id : undefined;
}

export function activateFailuresView(context: vscode.ExtensionContext, link: ServerLink): FailuresProvider {
  const provider = new FailuresProvider(link);
  context.subscriptions.push(
    vscode.window.registerTreeDataProvider("gpuemu.failures", provider),
    link.onNotification(Notifications.failuresChanged, () => provider.refresh()),
    vscode.commands.registerCommand("gpuemu.failures.refresh", () => provider.refresh()),
    // The server's commands (registered by the language client) do the work and report it.
    vscode.commands.registerCommand("gpuemu.failures.reproduce", (node?: FailureNode) => {
      const id = failureIdOf(node);
      return id ? vscode.commands.executeCommand(ServerCommands.reproduce, id) : undefined;
    }),
    vscode.commands.registerCommand("gpuemu.failures.minimize", (node?: FailureNode) => {
      const id = failureIdOf(node);
      return id ? vscode.commands.executeCommand(ServerCommands.minimize, id) : undefined;
    }),
    vscode.commands.registerCommand("gpuemu.failures.showErrorMap", (node?: FailureNode) => {
      const id = failureIdOf(node);
      return id ? showFailurePanel(link, id) : undefined;
    }),
  );
  return provider;
}
