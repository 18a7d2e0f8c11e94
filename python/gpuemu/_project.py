"""gpuemu.toml, read for :meth:`gpuemu.Client.run_registered` (the file is docs/ci.md's; the CLI's
reader is cli/project_config.cpp, whose rules this follows: [defaults] apply to every [[op]],
script paths are relative to the file, unknown keys are errors naming the file)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import NotFoundError, ValidationError

__all__ = ["ProjectEntry", "find_config", "load_project", "select_entry"]

_DEFAULT_KEYS = {"iterations", "strategy", "dtypes", "seed", "framework", "timeout_s"}
_OP_KEYS = {"name", "script", "kernel", "framework", "python", "timeout_s", "dtypes", "iterations", "strategy",
            "seed", "dims", "attrs", "vary_attrs", "layouts", "with", "without", "precision"}
_TOP_KEYS = {"project", "defaults", "op", "lint", "ci"}
_STRATEGIES = ("regular", "boundary", "adversarial", "special")


@dataclass
class ProjectEntry:
    """One ``[[op]]`` of gpuemu.toml with ``[defaults]`` applied."""

    op: str
    index: int  # its position among the file's [[op]] tables
    kernel: Dict[str, Any]  # the daemon's kernel spec (builtin or script)
    options: Dict[str, Any]  # fuzz options on the wire
    iterations: int = 100
    seed: Optional[int] = None
    dims: Dict[str, List[int]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.kernel["kind"] == "builtin":
            return "builtin:" + self.kernel["name"]
        return Path(self.kernel["script"]).name + ":" + self.kernel["function"]

    def repro_prefix(self, dtypes: Optional[Sequence[str]]) -> str:
        """The ``gpuemu fuzz`` command line that replays a case of this entry (with --seed/--case)."""
        k = self.kernel
        p = f"gpuemu fuzz {self.op}"
        if k["kind"] == "builtin":
            p += f" --kernel {k['name']}"
        else:
            p += f" --script {k['script']}:{k['function']}"
            if k.get("framework", "numpy") != "numpy":
                p += f" --framework {k['framework']}"
        o = self.options
        if o.get("distribution", "adversarial") != "adversarial":
            p += f" --strategy {o['distribution']}"
        for d in dtypes or []:
            p += f" --dtype {d}"
        for name, sizes in o.get("dims", {}).items():
            p += f" --dims {name}={','.join(str(s) for s in sizes)}"
        for name, value in o.get("attrs", {}).items():
            p += f" --attr {name}={_json(value)}"
        for v in o.get("vary_attrs", []):
            p += f" --vary-attr {v}"
        if not o.get("layouts", True):
            p += " --no-layouts"
        for name, on in sorted(o.get("present", {}).items()):
            p += f" --{'with' if on else 'without'} {name}"
        for key, policy in sorted(o.get("precision", {}).items()):
            p += f" --precision {key}={policy}"
        return p


def _json(v: Any) -> str:
    import json

    return json.dumps(v)


def find_config(start: Optional[Union[str, os.PathLike]] = None) -> Path:
    """The first gpuemu.toml from ``start`` (the current directory) up to the root."""
    d = Path(start or os.getcwd()).resolve()
    for cand in [d, *d.parents]:
        f = cand / "gpuemu.toml"
        if f.is_file():
            return f
    raise NotFoundError(f"no gpuemu.toml in {d} or above (gpuemu init writes one)")


def _load_toml(path: Path) -> Dict[str, Any]:
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ValidationError("reading gpuemu.toml needs Python >= 3.11 (tomllib) or the tomli "
                                  "package") from None
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"{path}: {exc}") from None


def _check(path: Path, table: Dict[str, Any], where: str, known: set) -> None:
    for key in table:
        if key not in known:
            raise ValidationError(f"{path}: unknown key '{key}' in {where} (known: {', '.join(sorted(known))})")


def load_project(config: Optional[Union[str, os.PathLike]] = None) -> Tuple[Path, List[ProjectEntry]]:
    """(the file read, its [[op]] entries)."""
    path = Path(config).resolve() if config is not None else find_config()
    if not path.is_file():
        raise NotFoundError(f"no project file {path}")
    doc = _load_toml(path)
    _check(path, doc, "gpuemu.toml", _TOP_KEYS)
    defaults = doc.get("defaults", {})
    _check(path, defaults, "[defaults]", _DEFAULT_KEYS)
    entries = []
    for i, t in enumerate(doc.get("op", [])):
        _check(path, t, "[[op]]", _OP_KEYS)
        if "tolerance" in t:
            raise ValidationError(f"{path}: 'tolerance' is not applied yet (docs/ci.md)")
        name = t.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError(f"{path}: [[op]] #{i + 1} needs 'name' (a catalogue op)")
        merged = {**{k: v for k, v in defaults.items()}, **t}
        if ("script" in t) == ("kernel" in t):
            raise ValidationError(f"{path}: [[op]] '{name}' needs exactly one of 'script' or 'kernel'")
        if "script" in t:
            m = re.fullmatch(r"(.+):([^:]+)", str(t["script"]))
            if not m:
                raise ValidationError(f"{path}: 'script' must be \"FILE.py:FUNC\", got '{t['script']}'")
            script = Path(m.group(1))
            if not script.is_absolute():
                script = path.parent / script
            script = Path(os.path.normpath(script))
            if not script.is_file():
                raise ValidationError(f"{path}: 'script': no file {script}")
            kernel: Dict[str, Any] = {"kind": "script", "script": str(script), "function": m.group(2),
                                      "framework": merged.get("framework", "numpy"),
                                      "timeout_s": float(merged.get("timeout_s", 60.0)), "name": m.group(2),
                                      "file": str(script)}
            if "python" in t:
                kernel["python"] = str(t["python"])
        else:
            kernel = {"kind": "builtin", "name": str(t["kernel"])}
        strategy = merged.get("strategy", "adversarial")
        if strategy not in _STRATEGIES:
            raise ValidationError(f"{path}: 'strategy' must be one of {', '.join(_STRATEGIES)}, got '{strategy}'")
        options: Dict[str, Any] = {"distribution": strategy, "layouts": bool(merged.get("layouts", True))}
        if merged.get("dtypes"):
            options["dtypes"] = list(merged["dtypes"])
        dims = {str(k): [int(x) for x in (v if isinstance(v, list) else [v])] for k, v in t.get("dims", {}).items()}
        if dims:
            options["dims"] = dims
        if t.get("attrs"):
            options["attrs"] = dict(t["attrs"])
        if t.get("vary_attrs"):
            options["vary_attrs"] = list(t["vary_attrs"])
        present: Dict[str, bool] = {}
        for key, on in (("with", True), ("without", False)):
            names = t.get(key, [])
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValidationError(f"{path}: [[op]] '{name}': '{key}' must be a list of input names")
            for n in names:
                if present.get(n, on) != on:
                    raise ValidationError(f"{path}: [[op]] '{name}': input '{n}' is in both 'with' and 'without'")
                present[n] = on
        if present:
            options["present"] = present
        if "precision" in t:
            p = t["precision"]
            precision = {name: p} if isinstance(p, str) else p
            if not isinstance(precision, dict) or not all(isinstance(v, str) for v in precision.values()):
                raise ValidationError(f"{path}: [[op]] '{name}': 'precision' must be a policy name or a table "
                                      "{{op or family = policy}}")
            options["precision"] = dict(precision)
        entries.append(ProjectEntry(op=name, index=i, kernel=kernel, options=options,
                                    iterations=int(merged.get("iterations", 100)), seed=merged.get("seed"),
                                    dims=dims))
    return path, entries


def select_entry(path: Path, entries: List[ProjectEntry], op: str, kernel: Optional[str]) -> ProjectEntry:
    """The [[op]] entry of ``op`` (and ``kernel``: a label, function or built-in name)."""
    mine = [e for e in entries if e.op == op]
    if not mine:
        known = sorted({e.op for e in entries})
        raise NotFoundError(f"{path}: no [[op]] registers '{op}' (registered: {', '.join(known) or 'none'})")
    if kernel is not None:
        mine = [e for e in mine if kernel in (e.label, e.kernel.get("function"), e.kernel.get("name"))]
        if not mine:
            raise NotFoundError(f"{path}: no [[op]] '{op}' with kernel '{kernel}'")
    if len(mine) > 1:
        labels = ", ".join(e.label for e in mine)
        raise ValidationError(f"{path}: '{op}' is registered {len(mine)} times ({labels}): pick one with kernel=")
    return mine[0]
