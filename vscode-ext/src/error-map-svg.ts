// A failure's error map as SVG for the failure webview: the same picture as the HTML report's
// (cli/error_map_svg.cpp): cells over the output's last two dims coloured by log10 of the
// normalised error, cool up to the envelope and hot past it, magenta for NaN/Inf mismatches, and a
// colour bar with the envelope marked.
import type { ErrorMap } from "./protocol";

const FLOOR_LOG = -3;

function logOf(v: number): number {
  return v > 0 ? Math.max(FLOOR_LOG, Math.log10(v)) : FLOOR_LOG;
}

function mix(a: number[], b: number[], t: number): number[] {
  const u = Math.min(1, Math.max(0, t));
  return a.map((x, i) => x + (b[i] - x) * u);
}

function hex(c: number[]): string {
  return "#" + c.map((x) => Math.round(x).toString(16).padStart(2, "0")).join("");
}

export function errorColour(error: number | null, envelope: number, top: number): string {
  if (error === null || !Number.isFinite(error)) return "#d000d0";
  const le = logOf(envelope);
  const lt = Math.max(logOf(top), le + 1);
  const lv = logOf(error);
  if (error <= envelope) return hex(mix([238, 241, 245], [60, 110, 180], (lv - FLOOR_LOG) / (le - FLOOR_LOG)));
  const t = (lv - le) / (lt - le);
  return t < 0.5 ? hex(mix([255, 170, 40], [230, 60, 20], t * 2)) : hex(mix([230, 60, 20], [120, 0, 10], (t - 0.5) * 2));
}

function escape(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

export function errorMapSvg(map: ErrorMap): string {
  const [rows, cols] = map.size;
  if (rows < 1 || cols < 1 || map.cells.length !== rows * cols) return "";
  let top = map.envelope * 10;
  for (const c of map.cells) if (c !== null) top = Math.max(top, c);
  const cell = Math.max(2, Math.min(16, Math.floor(Math.min(640 / cols, 400 / rows))));
  const left = 8, topMargin = 8, frame = 2;
  const mapW = cols * cell, mapH = rows * cell;
  const barY = topMargin + mapH + 2 * frame + 34, barW = Math.max(mapW, 320), barH = 12;
  const width = left + Math.max(mapW + 2 * frame, barW) + 120, height = barY + barH + 40;
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" class="error-map" width="${width}" height="${height}" ` +
    `shape-rendering="crispEdges" font-family="sans-serif" font-size="11" fill="#888">`);
  out.push(`<rect x="${left}" y="${topMargin}" width="${mapW + 2 * frame}" height="${mapH + 2 * frame}" fill="#112233"/>`);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const v = map.cells[r * cols + c];
      out.push(`<rect class="cell" data-row="${r}" data-col="${c}" x="${left + frame + c * cell}" y="${topMargin + frame + r * cell}" ` +
        `width="${cell}" height="${cell}" fill="${errorColour(v, map.envelope, top)}"><title>${v === null ? "NaN/Inf" : v}</title></rect>`);
    }
  }
  const pooled = map.cell[0] > 1 || map.cell[1] > 1 ? `, each cell the max of ${map.cell[0]}x${map.cell[1]} elements` : "";
  const lead = map.shape.length > 2 ? `, max over the leading dims of [${map.shape.join(", ")}]` : "";
  out.push(`<text x="${left}" y="${topMargin + mapH + 2 * frame + 16}">${escape(`rows: dim -2 (${map.rows}), cols: dim -1 (${map.cols})${pooled}${lead}`)}</text>`);
  const lo = FLOOR_LOG, hi = Math.max(logOf(top), logOf(map.envelope) + 1);
  for (let i = 0; i < 64; i++) {
    const lv = lo + ((hi - lo) * (i + 0.5)) / 64;
    out.push(`<rect x="${left + Math.floor((i * barW) / 64)}" y="${barY}" width="${Math.floor(barW / 64) + 1}" height="${barH}" fill="${errorColour(10 ** lv, map.envelope, top)}"/>`);
  }
  const envX = left + Math.floor(((logOf(map.envelope) - lo) / (hi - lo)) * barW);
  out.push(`<line class="envelope" x1="${envX}" x2="${envX}" y1="${barY - 4}" y2="${barY + barH + 4}" stroke="#000" stroke-width="2"/>`);
  out.push(`<text x="${envX}" y="${barY - 6}" text-anchor="middle">envelope ${map.envelope}</text>`);
  out.push(`<text x="${left}" y="${barY + barH + 14}">1e-3</text>`);
  out.push(`<text x="${left + barW}" y="${barY + barH + 14}" text-anchor="end">${(10 ** hi).toPrecision(3)}</text>`);
  out.push(`<rect x="${left + barW + 12}" y="${barY}" width="${barH}" height="${barH}" fill="#d000d0"/>`);
  out.push(`<text x="${left + barW + 28}" y="${barY + barH - 2}">NaN/Inf</text>`);
  out.push("</svg>");
  return out.join("\n");
}
