import * as assert from "assert";
import { errorColour, errorMapSvg } from "../src/error-map-svg";
import type { ErrorMap } from "../src/protocol";

function lastColumnMap(rows: number, cols: number): ErrorMap {
  const cells: (number | null)[] = [];
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) cells.push(c === cols - 1 ? 850 : 0.4);
  return { output: "out", shape: [rows, cols], rows, cols, cell: [1, 1], size: [rows, cols], envelope: 2, max_error: 850, over: rows, cells };
}

function fills(svg: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of svg.matchAll(/data-row="(\d+)" data-col="(\d+)"[^>]* fill="(#[0-9a-f]{6})"/g)) out.set(`${m[1]},${m[2]}`, m[3]);
  return out;
}

function rgb(hex: string): number[] {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

describe("error map", () => {
  it("colours cells within the envelope cool and past it hot, NaN/Inf magenta", () => {
    const [r1, g1, b1] = rgb(errorColour(0.4, 2, 1000));
    assert.ok(b1 > r1 && b1 >= g1, "cool is blue-ish");
    const [r2, g2, b2] = rgb(errorColour(850, 2, 1000));
    assert.ok(r2 > g2 + 60 && r2 > b2 + 60, "hot is red-ish");
    assert.strictEqual(errorColour(null, 2, 1000), "#d000d0");
    // Monotone on the log scale.
    assert.ok(rgb(errorColour(1e-3, 2, 1000))[0] > rgb(errorColour(1.5, 2, 1000))[0]);
  });

  it("draws one cell per map entry with the last column hot and marks the envelope", () => {
    const svg = errorMapSvg(lastColumnMap(3, 5));
    const f = fills(svg);
    assert.strictEqual(f.size, 15);
    for (let r = 0; r < 3; r++) {
      for (let c = 0; c < 5; c++) {
        const [red, green, blue] = rgb(f.get(`${r},${c}`)!);
        if (c === 4) assert.ok(red > green + 60, `(${r},${c}) hot`);
        else assert.ok(blue > red, `(${r},${c}) cool`);
      }
    }
    assert.match(svg, /class="envelope"/);
    assert.match(svg, /envelope 2</);
    assert.match(svg, /fill="#112233"/);
    assert.match(svg, /fill="#d000d0"\/>\s*<text[^>]*>NaN\/Inf</);
  });

  it("says when cells pool elements or leading dims are folded, and refuses a malformed map", () => {
    const m = lastColumnMap(2, 2);
    m.cell = [4, 3];
    m.shape = [8, 6, 6];
    const svg = errorMapSvg(m);
    assert.match(svg, /each cell the max of 4x3 elements/);
    assert.match(svg, /max over the leading dims of \[8, 6, 6\]/);
    m.cells = [1];
    assert.strictEqual(errorMapSvg(m), "");
  });
});
