"""The HTML report in a real browser: headless Chromium (Debian's) takes a screenshot and the test
reads the error map's pixels. A kernel whose last column is wrong must show hot cells in the map's
last column and cool cells elsewhere; the envelope is marked; pass rates and cases-to-first-failure
are on the page. Not only "the file has a DOCTYPE"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import PIL.Image  # python3-pil, installed by scripts/install-deps.sh (missing: this suite fails)

from daemon_harness import daemon  # noqa: F401  (the shared daemon fixture)
CHROMIUM = os.environ.get("GPUEMU_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FRAME = (0x11, 0x22, 0x33)  # cli/error_map_svg.hpp frames the map in #112233

KERNEL = textwrap.dedent('''\
    import numpy as np

    def softmax_last_column(inputs):
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        out = e / e.sum(axis=-1, keepdims=True)
        out[..., -1] = e[..., -1]  # the last column is never normalised
        return out
''')


def screenshot(html: Path, png: Path, profile: Path) -> None:
    assert Path(CHROMIUM).exists(), "chromium is missing: scripts/install-deps.sh installs it"
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                        f"--user-data-dir={profile}", "--hide-scrollbars", "--force-device-scale-factor=1",
                        "--window-size=1200,3000", f"--screenshot={png}", html.resolve().as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]


def is_hot(px) -> bool:  # orange to dark red (past the envelope)
    r, g, b = px[:3]
    return r > 100 and r > g + 60 and r > b + 60


def is_cool(px) -> bool:  # pale grey to steel blue (within the envelope)
    r, g, b = px[:3]
    return b >= r and b >= g - 10 and b > 150


def test_html_report_renders_the_error_map_in_chromium(daemon, tmp_path):  # noqa: F811
    daemon.start()
    k = tmp_path / "k.py"
    k.write_text(KERNEL)
    fuzz = daemon.cli("fuzz", "softmax", "--script", f"{k}:softmax_last_column", "--seed", "5", "--iterations", "4",
                      "--dtype", "float32", "--dims", "N=40", "--dims", "R=12", "--no-layouts", "--strategy", "regular", "--json")
    assert fuzz.returncode == 1, fuzz.stderr
    rep = daemon.cli("report", "--format", "json", "--limit", "1", "--runs", "all")
    assert rep.stdout.strip(), rep.stderr
    doc = json.loads(rep.stdout)
    f = doc["results"][0]["failure"]
    emap = f["error_map"]
    assert emap["size"] == [12, 40] and emap["cell"] == [1, 1], emap
    assert emap["over"] == 12  # one hot cell per row: the last column
    assert doc["pass_rates"] == [{"op": "softmax", "dtype": "float32", "runs": 1, "cases": 4, "passed": 0,
                                  "rate": 0.0}]
    assert doc["first_failures"][0]["cases_to_first_failure"] == 1

    html = tmp_path / "report.html"
    r = daemon.cli("report", "--format", "html", "--limit", "1", "--runs", "all", "-o", str(html))
    assert r.returncode in (0, 1), r.stderr
    text = html.read_text()
    assert "<script" not in text and 'class="envelope"' in text and "envelope 2" in text
    assert "Pass rates per op and dtype" in text and "Cases to the first failure" in text

    png = tmp_path / "report.png"
    screenshot(html, png, tmp_path / "chromium-profile")
    img = PIL.Image.open(png).convert("RGB")
    w, h = img.size
    pix = img.load()
    frame = [(x, y) for y in range(h) for x in range(w) if pix[x, y] == FRAME]
    assert frame, "no error map on the screenshot (its #112233 frame is missing)"
    x0, x1 = min(p[0] for p in frame), max(p[0] for p in frame)
    y0, y1 = min(p[1] for p in frame), max(p[1] for p in frame)
    rows, cols = emap["size"]
    cw, ch = (x1 - x0 + 1 - 4) / cols, (y1 - y0 + 1 - 4) / rows  # a 2 px frame around the cells
    assert cw >= 2 and abs(cw - ch) < 0.5, (cw, ch)
    for r_ in range(rows):
        y = int(y0 + 2 + (r_ + 0.5) * ch)
        for c in range(cols):
            px = pix[int(x0 + 2 + (c + 0.5) * cw), y]
            if c == cols - 1:
                assert is_hot(px), f"cell ({r_}, {c}) is {px}, expected hot (over the envelope)"
            else:
                assert is_cool(px), f"cell ({r_}, {c}) is {px}, expected cool (within the envelope)"
    # The colour bar under the map has the envelope's black line.
    below = [(x, y) for y in range(y1 + 1, min(h, y1 + 80)) for x in range(x0, min(w, x0 + 700))
             if pix[x, y] == (0, 0, 0)]
    assert below, "no envelope marker under the map"
