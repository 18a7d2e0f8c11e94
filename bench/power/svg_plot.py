"""The power curves as one SVG (written here, no plotting library): a panel per op, the mutant's
worst normalised error against k on log-log axes, one line per dtype, the envelope as a dashed
line, the control's worst error as the line's first point (k = 1), and the smallest k caught in
>= 95% of runs as a filled dot."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Tuple

COLOURS = {"float32": "#1f77b4", "float16": "#d62728", "bfloat16": "#2ca02c", "float8_e4m3fn": "#9467bd"}
PANEL_W, PANEL_H = 230, 170
MARGIN_L, MARGIN_B, MARGIN_T, MARGIN_R = 40, 28, 20, 8
Y_MIN, Y_MAX = -3.0, 6.0  # log10 of the normalised error shown (below: clipped; inf: the top)


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(entries: List[Dict[str, Any]], title: str, columns: int = 6) -> str:
    ops: List[str] = []
    for e in entries:
        if e["op"] not in ops:
            ops.append(e["op"])
    max_log2 = max((int(round(math.log2(c["k"]))) for e in entries for c in e["curve"]), default=1) or 1
    rows = -(-len(ops) // columns)
    width, height = columns * PANEL_W, rows * PANEL_H + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="8" y="16" font-size="13">{_esc(title)}</text>']
    lx = 8
    for dt, col in COLOURS.items():
        if any(e["dtype"] == dt for e in entries):
            out.append(f'<line x1="{lx}" y1="30" x2="{lx + 18}" y2="30" stroke="{col}" stroke-width="2"/>'
                       f'<text x="{lx + 22}" y="33">{dt}</text>')
            lx += 100
    out.append(f'<line x1="{lx}" y1="30" x2="{lx + 18}" y2="30" stroke="#555" stroke-dasharray="4,3"/>'
               f'<text x="{lx + 22}" y="33">envelope</text>'
               f'<circle cx="{lx + 110}" cy="30" r="3.5" fill="#555"/>'
               f'<text x="{lx + 118}" y="33">smallest k caught in &#8805; 95% of runs</text>')
    for n, op in enumerate(ops):
        ox, oy = (n % columns) * PANEL_W, 45 + (n // columns) * PANEL_H
        out.extend(_panel(op, [e for e in entries if e["op"] == op], ox, oy, max_log2))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _panel(op: str, entries: List[Dict[str, Any]], ox: float, oy: float, max_log2: int) -> List[str]:
    x0, x1 = ox + MARGIN_L, ox + PANEL_W - MARGIN_R
    y0, y1 = oy + PANEL_H - MARGIN_B, oy + MARGIN_T

    def px(log2k: float) -> float:
        return x0 + (x1 - x0) * log2k / max_log2

    def py(err: float) -> float:
        v = Y_MAX if math.isinf(err) else (Y_MIN if err <= 0 else min(Y_MAX, max(Y_MIN, math.log10(err))))
        return y0 - (y0 - y1) * (v - Y_MIN) / (Y_MAX - Y_MIN)

    s = [f'<text x="{ox + MARGIN_L}" y="{oy + 13}" font-size="11" font-weight="bold">{_esc(op)}</text>',
         f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#999"/>']
    for d in range(int(Y_MIN), int(Y_MAX) + 1, 3):
        y = py(10.0 ** d)
        s.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eee"/>'
                 f'<text x="{x0 - 3}" y="{y + 3:.1f}" text-anchor="end">1e{d}</text>')
    for j in range(0, max_log2 + 1, 4):
        x = px(j)
        s.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="#eee"/>'
                 f'<text x="{x:.1f}" y="{y0 + 11}" text-anchor="middle">2^{j}</text>')
    s.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{y0 + 22}" text-anchor="middle" fill="#666">k</text>')
    env = next((e["envelope"] for e in entries if e.get("envelope")), None)
    if env:
        s.append(f'<line x1="{x0}" y1="{py(env):.1f}" x2="{x1}" y2="{py(env):.1f}" stroke="#555" '
                 f'stroke-dasharray="4,3"/>')
    for e in entries:
        col = COLOURS.get(e["dtype"], "#000")
        pts: List[Tuple[float, float]] = [(px(math.log2(c["k"])), py(c["worst"])) for c in e["curve"]
                                          if not math.isnan(c["worst"])]
        if pts:
            s.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
        if e.get("k_star") is not None:
            c = next(c for c in e["curve"] if c["k"] == e["k_star"])
            s.append(f'<circle cx="{px(math.log2(c["k"])):.1f}" cy="{py(c["worst"]):.1f}" r="3.5" fill="{col}"/>')
    return s
