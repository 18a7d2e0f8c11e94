"""Sanity checks of the corpus without gpuemu's judge.

    python -m bench.kernelbench.check_candidates [STEM ...]

For every problem: Model and each candidate are built the way KernelBench builds them (after
torch.manual_seed(42), the Model's parameters then copied into ModelNew where names and shapes
match, as gpuemu.kernelbench does). Each candidate must carry a docstring, EXPECT ("pass"/"fail"),
BUG (None for EXPECT = "pass") and, optionally, DTYPES. Every EXPECT = "pass" candidate is then
run on the problem's own get_inputs() in float32 and compared with the Model by
torch.allclose(rtol=1e-4, atol=1e-4) (integer outputs must be equal), and its inputs must come back
unchanged. Exit status 1 if anything is off.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent
SEED = 42


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _meta(path: Path):
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    got = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("EXPECT", "BUG", "DTYPES"):
                got[node.targets[0].id] = ast.literal_eval(node.value)
    return doc, got


def main(argv) -> int:
    warnings.filterwarnings("ignore")
    np.seterr(all="ignore")
    stems = argv or sorted(p.stem for p in (ROOT / "problems").glob("*.py"))
    bad = 0
    for stem in stems:
        prob = _module(ROOT / "problems" / f"{stem}.py", f"kb_problem_{stem}")
        torch.manual_seed(SEED)
        init = prob.get_init_inputs()
        torch.manual_seed(SEED)
        model = prob.Model(*init)
        torch.manual_seed(SEED)
        inputs = prob.get_inputs()
        with torch.no_grad():
            ref = model(*inputs)
        cands = sorted((ROOT / "candidates" / stem).glob("*.py"))
        if not cands:
            print(f"{stem}: no candidates")
            bad += 1
        for c in cands:
            doc, meta = _meta(c)
            problems = []
            if not doc or "\n" in doc.strip():
                problems.append("no one-line docstring")
            if meta.get("EXPECT") not in ("pass", "fail"):
                problems.append(f"EXPECT = {meta.get('EXPECT')!r}")
            if "BUG" not in meta or (meta.get("EXPECT") == "pass") != (meta.get("BUG") is None):
                problems.append(f"BUG = {meta.get('BUG')!r} with EXPECT = {meta.get('EXPECT')!r}")
            if "DTYPES" in meta and not set(meta["DTYPES"]) <= {"float32", "bfloat16"}:
                problems.append(f"DTYPES = {meta['DTYPES']!r}")
            cmod = _module(c, f"kb_cand_{stem}_{c.stem}")
            torch.manual_seed(SEED)
            new = cmod.ModelNew(*init)
            s, d = model.state_dict(), new.state_dict()
            new.load_state_dict({**d, **{k: v for k, v in s.items() if k in d and d[k].shape == v.shape}})
            if meta.get("EXPECT") == "pass":
                args = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
                with torch.no_grad():
                    out = new(*args)
                if any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(args, inputs)):
                    problems.append("wrote into its inputs")
                if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
                    problems.append(f"output {getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}, "
                                    f"reference {tuple(ref.shape)} {ref.dtype}")
                elif ref.is_floating_point():
                    if not torch.allclose(out, ref, rtol=1e-4, atol=1e-4):
                        err = (out.double() - ref.double()).abs().max().item()
                        problems.append(f"not allclose (max abs error {err:.3g})")
                elif not torch.equal(out, ref):
                    problems.append(f"{int((out != ref).sum())} integer outputs differ")
            status = "ok " if not problems else "BAD"
            bad += bool(problems)
            print(f"{status} {stem}/{c.stem} [{meta.get('EXPECT')}, {meta.get('BUG')}] {'; '.join(problems)}")
    print(f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
