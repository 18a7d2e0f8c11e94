// The daemon in the status bar: running or not, its pid and the current failures, from the
// server's gpuemu/daemonStatus notifications. Clicking it shows the Failures view.
import * as vscode from "vscode";
import { DaemonStatus, Notifications, ServerLink } from "./protocol";

export function statusText(s: DaemonStatus): { text: string; tooltip: string } {
  if (!s.running) return { text: "$(circle-slash) gpuemu: no daemon", tooltip: `no daemon serves ${s.home || "GPUEMU_HOME"}` };
  const n = s.current_failures ?? 0;
  return {
    text: n > 0 ? `$(error) gpuemu: ${n} failing` : "$(pass) gpuemu",
    tooltip: `gpuemu-daemon ${s.version ?? ""} (pid ${s.pid ?? "?"}) serving ${s.home}`,
  };
}

export function activateStatusBar(context: vscode.ExtensionContext, link: ServerLink): vscode.StatusBarItem {
  const item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  item.text = "$(sync~spin) gpuemu";
  item.command = "gpuemu.showFailures";
  item.show();
  context.subscriptions.push(item);
  context.subscriptions.push(
    link.onNotification(Notifications.daemonStatus, (s: DaemonStatus) => {
      const t = statusText(s);
      item.text = t.text;
      item.tooltip = t.tooltip;
    }),
  );
  return item;
}
