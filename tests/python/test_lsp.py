"""`gpuemu lsp` end to end: a real JSON-RPC client (lsp_client.py) against the real server binary,
which talks to a real daemon on a temporary GPUEMU_HOME. A failing kernel gets an error diagnostic
on its `def` line with the seed in the message; the code actions come back and work; didSave
re-validates the registered op; a kernel that passes again loses its diagnostics; gpuemu.toml is
served (diagnostics at their lines, completion, hover); bad input never takes the server down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daemon_harness import GPUEMU, daemon  # noqa: F401  (the shared daemon fixture)
from lsp_client import LspClient, uri

BAD = textwrap.dedent('''\
    import numpy as np


    def helper(x):
        return x


    def softmax_bad(inputs):
        # Buggy: the last column is never normalised.
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        out = e / e.sum(axis=-1, keepdims=True)
        out[..., -1] = e[..., -1]
        return out
''')
BAD_DEF_LINE = 7  # 0-based line of "def softmax_bad"

GOOD = textwrap.dedent('''\
    import numpy as np


    def helper(x):
        return x


    def softmax_bad(inputs):
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
''')

CONFIG = textwrap.dedent('''\
    [project]
    name = "editor"

    [defaults]
    iterations = 12
    seed = 7
    dtypes = ["float32"]

    [[op]]
    name = "softmax"
    script = "kernels/softmax.py:softmax_bad"
''')


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "kernels").mkdir(parents=True)
    (p / "kernels" / "softmax.py").write_text(BAD)
    (p / "gpuemu.toml").write_text(CONFIG)
    return p


@pytest.fixture()
def lsp(daemon, project):  # noqa: F811
    daemon.start()
    c = LspClient([GPUEMU, "lsp"], dict(daemon.env))
    c.initialize(project, home=str(daemon.home), pollIntervalMs=100, python=sys.executable)
    yield c
    rc = c.close()
    assert rc == 0, "".join(c.stderr_lines)


def stored(daemon):  # noqa: F811
    out = daemon.cli_json("failures", "list")
    return out["failures"] if isinstance(out, dict) else out


def test_script_kernel_failure_code_actions_and_revalidation_on_save(lsp, daemon, project):  # noqa: F811
    script = project / "kernels" / "softmax.py"
    ops = lsp.result("gpuemu/ops")
    assert [o["op"] for o in ops["ops"]] == ["softmax"] and ops["ops"][0]["status"] == "unknown"
    assert ops["ops"][0]["range"]["start"]["line"] == BAD_DEF_LINE
    run = lsp.result("gpuemu/runOps", {"ids": [ops["ops"][0]["id"]]})["results"]
    assert run[0]["status"] == "failed" and run[0]["failed"] > 0, run

    diags = lsp.wait_diagnostics(script, lambda d: len(d) > 0)
    assert len(diags) == 1
    d = diags[0]
    assert d["severity"] == 1 and d["source"] == "gpuemu"
    assert d["range"]["start"]["line"] == BAD_DEF_LINE
    assert d["range"]["start"]["character"] == 4 and d["range"]["end"]["character"] == 15
    fid = d["data"]["failure_id"]
    record = {f["id"]: f for f in stored(daemon)}[fid]
    msg = d["message"]
    assert f"seed {record['seed']}" in msg, msg
    assert "softmax float32" in msg and "max error" in msg and "> envelope" in msg
    assert "x=[" in msg and "diagnosis:" in msg, msg
    assert d["data"]["count"] == run[0]["failed"]

    actions = lsp.result("textDocument/codeAction", {
        "textDocument": {"uri": uri(script)}, "range": d["range"], "context": {"diagnostics": [d]}})
    titles = [a["title"] for a in actions]
    assert titles[0].startswith("Reproduce failure") and titles[1].startswith("Minimize test case"), titles
    assert actions[0]["command"]["arguments"] == [fid]

    rep = lsp.result("workspace/executeCommand", actions[0]["command"])
    assert rep["kind"] == "replay" and rep["passed"] is False and rep["still_fails"] is True
    assert rep["regenerated_identical"] is True and "still FAILS" in rep["summary"]
    assert any("still FAILS" in n["message"] for n in lsp.notes("window/showMessage"))

    mini = lsp.result("workspace/executeCommand", actions[1]["command"], timeout=300)
    assert mini["kind"] == "daemon" and mini["minimized_id"], mini
    assert "fails at" in mini["summary"] or "minimized" in mini["summary"], mini
    assert mini["minimized_id"] in {f["id"] for f in stored(daemon)}

    ops = lsp.result("gpuemu/ops")
    assert ops["ops"][0]["status"] == "failed" and ops["ops"][0]["current_failures"] > 0
    view = lsp.result("gpuemu/failures")["groups"]
    assert view and view[0]["uri"] == uri(script) and view[0]["range"]["start"]["line"] == BAD_DEF_LINE

    # The kernel is fixed and saved: the op is fuzzed again (quickly) and its squiggles go.
    script.write_text(GOOD)
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri(script), "languageId": "python",
                                                         "version": 1, "text": GOOD}})
    lsp.notify("textDocument/didSave", {"textDocument": {"uri": uri(script)}})
    validated = lsp.wait_note("gpuemu/validated", lambda p: p["uri"] == uri(script), timeout=120)
    assert validated["results"][0]["status"] == "passed", validated
    assert validated["results"][0]["total"] == 10  # the quick preset: 12 / 4, at least 10
    lsp.wait_diagnostics(script, lambda d: d == [])
    assert lsp.result("gpuemu/ops")["ops"][0]["status"] == "passed"
    # The store still holds the old failures: they are history, not current.
    assert len(stored(daemon)) >= run[0]["failed"]


CLIENT_KERNEL = textwrap.dedent('''\
    import numpy as np

    SCALE = 1.0


    # A kernel tested through the Python client: the diagnostic goes to this def.
    def my_softmax(x):
        x = x.astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        out = e / e.sum(axis=-1, keepdims=True)
        out[..., 0] *= SCALE
        return out
''')
CLIENT_DEF_LINE = 6

DRIVER = textwrap.dedent('''\
    import sys
    sys.path.insert(0, sys.argv[1])
    import kernels_client
    from gpuemu import Client
    r = Client().fuzz_op_client_side("softmax", run_op=lambda inputs: kernels_client.my_softmax(inputs["x"]),
                                     iterations=20, seed=int(sys.argv[2]), dtypes=["float32"])
    print(r.passed, r.total)
''')


def drive_client(project: Path, daemon, seed: int) -> str:  # noqa: F811
    driver = project / "driver.py"
    driver.write_text(DRIVER)
    r = subprocess.run([sys.executable, str(driver), str(project), str(seed)],
                       env=daemon.env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_client_kernel_diagnostic_on_its_def_and_standalone_repro(lsp, daemon, project):  # noqa: F811
    kernel = project / "kernels_client.py"
    # SCALE = 1.5 makes column 0 wrong.
    kernel.write_text(CLIENT_KERNEL.replace("SCALE = 1.0", "SCALE = 1.5"))
    out = drive_client(project, daemon, 11)
    assert int(out.split()[0]) < 20, out
    diags = lsp.wait_diagnostics(kernel, lambda d: len(d) == 1)
    d = diags[0]
    assert d["range"]["start"]["line"] == CLIENT_DEF_LINE, d
    rec = {f["id"]: f for f in stored(daemon)}[d["data"]["failure_id"]]
    assert rec["kernel"]["kind"] == "client" and rec["kernel"]["line"] == CLIENT_DEF_LINE + 1
    assert f"seed {rec['seed']}" in d["message"]

    # Reproduce: a client-side kernel gets a standalone script next to its file, which runs.
    rep = lsp.result("workspace/executeCommand", {"command": "gpuemu.reproduce",
                                                  "arguments": [rec["id"]]}, timeout=300)
    script = project / f"gpuemu_repro_{rec['id']}.py"
    assert rep["kind"] == "script" and rep["script"] == str(script) and script.exists(), rep
    assert rep["passed"] is False, rep
    assert any(n.get("uri") == uri(script) for n in lsp.notes("window/showDocument"))
    standalone = subprocess.run([sys.executable, str(script)], env=daemon.env, capture_output=True,
                                text=True, timeout=300)
    assert standalone.returncode == 0, standalone.stderr
    assert json.loads(standalone.stdout.splitlines()[-1])["passed"] is False

    # Minimize: the repro script's --minimize (the in-process minimizer re-runs the kernel here).
    mini = lsp.result("workspace/executeCommand", {"command": "gpuemu.minimize",
                                                   "arguments": [rec["id"]]}, timeout=300)
    assert mini["kind"] == "client" and mini["script"] == str(script), mini
    assert mini["summary"].startswith(rec["id"] + " minimized: fails at ") and mini.get("dims"), mini

    # The kernel fixed and fuzzed again (another session): its diagnostic goes.
    kernel.write_text(CLIENT_KERNEL)
    out = drive_client(project, daemon, 12)
    assert out.split() == ["20", "20"], out
    lsp.wait_diagnostics(kernel, lambda d: d == [])


def test_builtin_kernel_failures_sit_on_their_op_line_and_go_when_deleted(lsp, daemon, project):  # noqa: F811
    toml = project / "gpuemu.toml"
    config = CONFIG + '\n[[op]]\nname = "softmax"\nkernel = "tail_leak"\n'
    toml.write_text(config)
    op_line = config.splitlines().index('kernel = "tail_leak"') - 2  # its [[op]] header
    r = daemon.cli("fuzz", "softmax", "--kernel", "tail_leak", "--seed", "3", "--iterations", "3",
                   "--dims", "N=129", "--strategy", "regular", "--no-minimize")
    assert r.returncode == 1, r.stderr
    diags = lsp.wait_diagnostics(toml, lambda d: any(x["source"] == "gpuemu" and "data" in x for x in d))
    d = [x for x in diags if "data" in x][0]
    assert d["range"]["start"]["line"] == op_line, (d, op_line)
    assert d["data"]["kernel"] == {"kind": "builtin", "name": "tail_leak"} and "diagnosis: " in d["message"]
    # Removed from the store (gpuemu failures rm): the diagnostic goes at the next poll.
    ids = [f["id"] for f in stored(daemon)]
    assert ids
    rm = daemon.cli("failures", "rm", *ids)
    assert rm.returncode == 0, rm.stderr
    lsp.wait_diagnostics(toml, lambda d: not any("data" in x for x in d))


TOML_BAD = textwrap.dedent('''\
    [project]
    name = "editor"
    colour = "blue"

    [defaults]
    strategy = "wild"

    [[op]]
    name = "softmx"
    kernel = "tail_leak"
    dtypes = ["float32", "float99"]
''')


def test_gpuemu_toml_diagnostics_completion_and_hover(lsp, project):
    toml = project / "gpuemu.toml"
    lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri(toml), "languageId": "toml",
                                                         "version": 1, "text": TOML_BAD}})
    diags = lsp.wait_diagnostics(toml, lambda d: len(d) >= 4)
    by_line = {}
    for d in diags:
        by_line.setdefault(d["range"]["start"]["line"], []).append(d["message"])
    assert any("unknown key 'colour' in [project]" in m for m in by_line[2]), by_line
    assert any("'strategy' must be one of" in m for m in by_line[5]), by_line
    assert any("unknown op 'softmx'" in m for m in by_line[8]), by_line
    assert any("unknown dtype 'float99'" in m for m in by_line[10]), by_line

    fixed = TOML_BAD.replace('colour = "blue"\n', "").replace('"wild"', '"boundary"').replace(
        "softmx", "softmax").replace(', "float99"', "")
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri(toml), "version": 2},
                                          "contentChanges": [{"text": fixed}]})
    lsp.wait_diagnostics(toml, lambda d: d == [])

    text = fixed + "\n[[op]]\nname = \nkernel = \"\n"
    lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri(toml), "version": 3},
                                          "contentChanges": [{"text": text}]})
    lines = text.splitlines()
    name_line = len(lines) - 2
    ops = lsp.result("textDocument/completion", {"textDocument": {"uri": uri(toml)},
                                                 "position": {"line": name_line, "character": 7}})
    labels = [i["label"] for i in ops["items"]]
    assert "softmax" in labels and "flash_attention" in labels, labels
    keys = lsp.result("textDocument/completion", {"textDocument": {"uri": uri(toml)},
                                                  "position": {"line": 5, "character": 0}})
    assert "iterations" in [i["label"] for i in keys["items"]]
    hover = lsp.result("textDocument/hover", {"textDocument": {"uri": uri(toml)},
                                              "position": {"line": 4, "character": 2}})
    assert "regular | boundary | adversarial | special" in hover["contents"]["value"], hover


def test_bad_input_gets_errors_and_the_server_keeps_serving(lsp):
    lsp.send_raw(b"{not json")
    err = lsp.request("no/suchMethod", {})
    assert err["error"]["code"] == -32601
    bad = lsp.request("textDocument/hover", {"textDocument": {"uri": 5}, "position": {"line": 0, "character": 0}})
    assert bad["error"]["code"] == -32602 and "params.textDocument.uri: expected a string" in bad["error"]["message"]
    bad_cmd = lsp.request("workspace/executeCommand", {"command": "gpuemu.reproduce", "arguments": []})
    assert bad_cmd["error"]["code"] == -32602
    missing = lsp.request("workspace/executeCommand", {"command": "gpuemu.reproduce",
                                                       "arguments": ["f0000000000000000"]})
    assert missing["error"]["code"] == -32803 and "f0000000000000000" in missing["error"]["message"]
    assert lsp.result("gpuemu/ops")["ops"]


def test_server_starts_the_workspace_daemon_and_reports_its_status(daemon, project):  # noqa: F811
    from daemon_harness import alive
    c = LspClient([GPUEMU, "lsp", "--home", str(daemon.home)], dict(daemon.env))
    try:
        c.initialize(project, pollIntervalMs=100)  # no daemon runs yet: the server starts one
        up = c.wait_note("gpuemu/daemonStatus", lambda p: p["running"])
        assert up["pid"] == daemon.pid and up["home"] == str(daemon.home), up
        n = c.count("gpuemu/daemonStatus")
        stop = c.result("gpuemu/daemon", {"action": "stop"})
        assert stop["stopping"] is True
        c.wait_note("gpuemu/daemonStatus", lambda p: not p["running"], after=n)
        assert c.result("gpuemu/daemon", {"action": "status"})["running"] is False
        started = c.result("gpuemu/daemon", {"action": "start"})
        assert started["running"] is True and alive(started["pid"])
        c.wait_note("gpuemu/daemonStatus", lambda p: p["running"] and p["pid"] == started["pid"], after=n)
    finally:
        assert c.close() == 0, "".join(c.stderr_lines)
