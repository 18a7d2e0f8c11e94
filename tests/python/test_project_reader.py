"""gpuemu.toml has one reader (project/project_config.cpp, docs/ci.md): `gpuemu ci` and Python's
Client.run_registered (through gpuemu._core) read the file with the same code, so they refuse the
same bad file with the same message and run the same entries. The real CLI binary, the real _core
and a real daemon."""

from __future__ import annotations

import textwrap

import pytest

import gpuemu
from gpuemu import Client, _core

from daemon_harness import daemon  # noqa: F401  (the shared daemon fixture)

SCHEMA = textwrap.dedent('''\
    {
      "name": "scaled_rowsum",
      "version": 1,
      "summary": "scale * sum(x, -1): one sum per row",
      "family": "custom",
      "dtypes": ["float32"],
      "dims": {
        "R": {"min": 1, "max": 8, "role": "batch"},
        "N": {"min": 1, "max": 300, "role": "reduction"}
      },
      "inputs": [{"name": "x", "shape": ["R", "N"], "dtype": "case", "domain": "real"}],
      "attrs": {"scale": {"type": "float", "default": 2.0}},
      "outputs": [{"name": "out", "shape": ["R"], "dtype": "case"}],
      "reduced_dims": ["N"],
      "reference": "script:ref.py:reference"
    }
''')

REF = textwrap.dedent('''
    import numpy as np

    def reference(inp):
        s = inp["scale"]
        return s * inp["x"].sum(axis=-1), abs(s) * np.abs(inp["x"]).sum(axis=-1)
''')

KERNELS = textwrap.dedent('''
    import numpy as np

    def rowsum(inp):
        x = inp["x"]
        return (np.float32(inp["scale"]) * x.astype(np.float32).sum(axis=-1)).astype(x.dtype)

    def softmax(inputs):
        x = inputs["x"].astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
''')

OP = '[[op]]\nname = "softmax"\nkernel = "fp32_online"\n'
CUSTOM = ('[custom_ops.scaled_rowsum]\nschema = "ops/scaled_rowsum.json"\nreference = "ops/ref.py:reference"\n\n'
          '[[op]]\nname = "scaled_rowsum"\nscript = "kernels.py:rowsum"\n')

# Each: a bad file, and what the message says after "FILE:" (the line where the CLI gives one).
BAD = [
    (OP + 'colour = 1\n', "4: unknown key 'colour' in [[op]]"),
    (OP + 'tolerance = 6.0\n', "4: 'tolerance' in [[op]] is not a key: override the envelope"),
    ('[defults]\n', "1: unknown key 'defults' in gpuemu.toml"),
    (OP + 'iterations = "many"\n', "4: 'iterations' must be a positive integer"),
    (OP + 'seed = -1\n', "4: 'seed' must be a non-negative integer"),
    (OP + 'strategy = "random"\n', "4: 'strategy' must be one of regular, boundary, adversarial, special, got 'random'"),
    (OP + 'framework = "jax"\n', "4: 'framework' must be one of numpy, torch, got 'jax'"),
    (OP + 'dtypes = ["float17"]\n', "4: unknown dtype 'float17'"),
    (OP + 'dims = { N = 64 }\n', "4: dims.N must be a non-empty array"),
    (OP + 'attrs = { dim = { x = 1 } }\n', "4: attr values must be booleans, numbers, strings or arrays of them"),
    (OP + 'with = ["w"]\nwithout = ["w"]\n', "input 'w' is in both 'with' and 'without'"),
    (OP + 'precision = "tf64"\n', "1: [[op]] 'softmax': precision 'softmax': unknown policy 'tf64'"),
    (OP + 'envelope = { float17 = 3.0 }\n', "4: envelope: unknown dtype 'float17'"),
    ('[[op]]\nname = "softmax"\n', "1: [[op]] 'softmax' needs exactly one of 'script' or 'kernel'"),
    ('[[op]]\nkernel = "fp32_online"\n', "1: [[op]] needs 'name' (a catalogue op)"),
    ('[[op]]\nname = "softmax"\nscript = "nope.py:f"\n', "3: 'script': no file"),
    ('[lint]\nmax_regs = 3\n', "2: unknown key 'max_regs'"),
    ('[ci]\npreset = "nightly"\n', " [ci].preset 'nightly' is not a known preset"),
    ('[[op]\n', "1:"),  # a TOML syntax error: the parser's words, with line and column
    # [custom_ops] (the Python reader before this one did not know the table)
    (CUSTOM + 'dtypes = ["float16"]\n', "5: custom op 'scaled_rowsum' does not allow dtype 'float16'"),
    (CUSTOM.replace('reference = "ops/ref.py:reference"', 'reference = "ops/nope.py:reference"'),
     "3: 'reference': no file"),
    (CUSTOM.replace("[custom_ops.scaled_rowsum]", "[custom_ops.rowsum]"), "defines op 'scaled_rowsum', not 'rowsum'"),
]


@pytest.fixture()
def project(tmp_path):
    p = tmp_path / "proj"
    (p / "ops").mkdir(parents=True)
    (p / "ops" / "scaled_rowsum.json").write_text(SCHEMA)
    (p / "ops" / "ref.py").write_text(REF)
    (p / "kernels.py").write_text(KERNELS)
    return p


@pytest.mark.parametrize("body,needle", BAD)
def test_python_and_gpuemu_ci_refuse_a_bad_file_with_the_same_message(daemon, project, body, needle):
    cfg = project / "gpuemu.toml"
    cfg.write_text(body)
    r = daemon.cli("ci", "--config", str(cfg))
    assert r.returncode == 2 and r.stderr.startswith("gpuemu: error: "), (r.stdout, r.stderr)
    cli_message = r.stderr[len("gpuemu: error: "):].strip()
    assert cli_message.startswith(f"{cfg}:") and needle in cli_message, cli_message
    with pytest.raises(gpuemu.ValidationError) as run:
        Client().run_registered("softmax", config=cfg)
    assert str(run.value) == cli_message
    with pytest.raises(gpuemu.ValidationError) as parsed:
        _core.parse_project_config(body, str(cfg))
    assert str(parsed.value) == cli_message


def test_no_file_is_not_found_alike(daemon, tmp_path):
    missing = tmp_path / "none.toml"
    r = daemon.cli("ci", "--config", str(missing))
    assert r.returncode != 0 and f"no config file {missing}" in r.stderr
    with pytest.raises(gpuemu.NotFoundError, match=f"no config file {missing}"):
        Client().run_registered("softmax", config=missing)


def test_the_structure_python_reads_is_the_clis(project):
    (project / "gpuemu.toml").write_text(textwrap.dedent('''
        [project]
        name = "p"

        [defaults]
        iterations = 9
        seed = 3
        strategy = "boundary"

        [[op]]
        name = "softmax"
        script = "kernels.py:softmax"
        dims = { N = [65, 7] }
        attrs = { dim = -1 }
        with = ["x"]
        envelope = { float32 = 5.0 }
        precision = "tf32"

        [ci]
        preset = "quick"
    ''') + "\n" + CUSTOM)
    cfg = _core.load_project_config(str(project / "gpuemu.toml"))
    assert cfg.name == "p" and cfg.ci_preset == "quick" and cfg.presets["quick"].scale == 0.25
    sm, rs = cfg.ops
    assert (sm.op, sm.iterations, sm.seed, sm.strategy, sm.line) == ("softmax", 9, 3, "boundary", 10)
    assert sm.script == str(project / "kernels.py") and sm.function == "softmax" and sm.label == "kernels.py:softmax"
    assert sm.dims == {"N": [65, 7]} and sm.attrs == {"dim": -1} and sm.present == {"x": True}
    assert sm.envelope == {"float32": 5.0} and sm.precision == {"softmax": "tf32"}
    assert sm.fuzz_options("float32")["dtypes"] == ["float32"]
    assert sm.fuzz_options()["distribution"] == "boundary"
    assert sm.repro_prefix(["float32"]) == (
        f"gpuemu fuzz softmax --script {project / 'kernels.py'}:softmax --strategy boundary --dtype float32 "
        "--dims N=65,7 --attr dim=-1 --with x --precision softmax=tf32")
    assert sm.kernel_spec()["kind"] == "script" and cfg.custom_op("softmax") is None
    custom = cfg.custom_op("scaled_rowsum")
    assert custom is not None and custom.dtypes == ["float32"] and not custom.is_torch_op
    assert custom.spec()["reference"]["function"] == "reference" and rs.op == "scaled_rowsum"


def test_run_registered_runs_a_custom_op_as_gpuemu_ci_does(daemon, project):
    (project / "gpuemu.toml").write_text('[defaults]\niterations = 8\nseed = 4\n\n' + CUSTOM)
    res = Client().run_registered("scaled_rowsum", config=project / "gpuemu.toml")
    assert res.total == 8 and res.passed == 8, res.summary()
    doc = daemon.cli_json("ci", "--config", str(project / "gpuemu.toml"))
    assert [r["status"] for r in doc["results"]] == ["passed"] and doc["results"][0]["cases"] == 8
