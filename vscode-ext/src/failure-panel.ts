// A failure in a webview: what failed, the diagnosis, and the error map (error-map-svg.ts). No
// scripts run in it.
import * as vscode from "vscode";
import { FailureRecord, Requests, ServerLink } from "./protocol";
import { errorMapSvg } from "./error-map-svg";

function escape(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

export function failureHtml(f: FailureRecord): string {
  const shapes = Object.entries(f.shapes ?? {}).map(([k, v]) => `${k}=[${v.join(", ")}]`).join(" ");
  const d = f.diagnosis ?? {};
  const map = f.error_map ? errorMapSvg(f.error_map) : "";
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline';">
<style>body{font-family:var(--vscode-font-family);padding:1em}dt{font-weight:bold}</style></head><body>
<h2>${escape(f.op)} ${escape(f.dtype)} &mdash; ${escape(f.id)}</h2>
<dl><dt>seed</dt><dd>${escape(String(f.seed))}</dd><dt>shapes</dt><dd>${escape(shapes)}</dd>
<dt>verdict</dt><dd>${escape(f.message ?? "")}</dd>
<dt>diagnosis</dt><dd>${escape(d.bug_class ?? "")}${d.summary ? ": " + escape(d.summary) : ""}</dd></dl>
${map ? `<h3>Error map of output '${escape(f.error_map!.output)}'</h3>${map}` : "<p>No error map: the kernel raised, or its output had the wrong shape or dtype.</p>"}
</body></html>`;
}

export async function showFailurePanel(link: ServerLink, id: string): Promise<vscode.WebviewPanel> {
  const f = await link.sendRequest<FailureRecord>(Requests.failure, { id });
  const panel = vscode.window.createWebviewPanel("gpuemu.failure", `gpuemu ${id}`, vscode.ViewColumn.Beside, {
    enableScripts: false,
  });
  panel.webview.html = failureHtml(f);
  return panel;
}
