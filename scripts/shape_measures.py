#!/usr/bin/env python3
"""The measures of the repository's shape that docs/architecture.md records (issue 46).

    python3 scripts/shape_measures.py            # a Markdown table
    python3 scripts/shape_measures.py --json     # the same numbers, one JSON object
    python3 scripts/shape_measures.py --longest 15
    git archive REV | tar -x -C /tmp/rev && python3 scripts/shape_measures.py --root /tmp/rev

What each number counts, so that a later run counts the same thing:
- docs: bytes and files under docs/, and its data files (anything not .md);
- reply lookups: string-keyed reads of JSON, `x["key"]`, `.at("key")`, `.value("key", ...)`,
  `.contains("key")` in the CLI's C++ (cli/), and `x["key"]` or `.get("key")` in the Python
  client's modules (client.py and _client_*.py). Both also count dictionaries the code builds, so
  the count is an upper bound on reads of replies;
- untyped wire fields: struct members declared `Json` in the wire's headers (a `wire/` folder
  under an include root), against all members declared there;
- CLI statics: `static` declarations inside a function body in cli/ (not `static constexpr` or
  `static const` of a literal type, which hold no state);
- the longest functions: brace-matched bodies of functions and lambdas in the C++ sources, in lines.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPP_DIRS = ("cli", "daemon", "engine", "protocol", "script_kernels", "lint", "python/src")
SUFFIXES = (".cpp", ".hpp", ".h", ".cu")


def _files(dirs, suffixes):
    for d in dirs:
        base = ROOT / d
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*") if p.suffix in suffixes and p.is_file())


def _strip_cpp(text: str) -> str:
    """Comments and string/char literals blanked (newlines kept), so braces count."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


_FUNC_HEAD = re.compile(r"(\)\s*(const|mutable|noexcept|override|final|\s)*(->\s*[\w:<>,\s*&]+)?\s*)$")


def _scan(path: Path):
    """Function and lambda bodies (line count, first line, name) and the lines of statements that
    declare a static inside a function body."""
    text = _strip_cpp(path.read_text(errors="replace"))
    bodies, statics = [], []
    stack = []  # (line, is_function, name)
    line, head_start = 1, 0
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
            continue
        if c not in "{};":
            continue
        if c == "{":
            head = text[max(head_start, i - 400):i]
            is_fn = bool(_FUNC_HEAD.search(head)) and not re.search(
                r"\b(if|for|while|switch|catch)\s*\(", head)
            name = ""
            if is_fn:
                m = re.search(r"([~\w:]+|\])\s*\([^;{}]*\)[^;{}()]*$", head)
                name = "(lambda)" if m and m.group(1) == "]" else (m.group(1) if m else "?")
            stack.append((line, is_fn, name))
        elif c == "}" and stack:
            start, is_fn, name = stack.pop()
            if is_fn:
                bodies.append((line - start + 1, start, name))
        # the next statement starts after this character
        nxt = re.match(r"\s*static\s+(?!constexpr\b|const\b|inline\b|assert\b)", text[i + 1:i + 80])
        if nxt and any(is_fn for _, is_fn, _ in stack):
            statics.append(line + text[i + 1:i + 1 + nxt.end()].count("\n"))
        head_start = i + 1
    return bodies, statics


def longest_functions(limit: int):
    rows = []
    for path in _files(CPP_DIRS, SUFFIXES):
        bodies, _ = _scan(path)
        rows += [(n, str(path.relative_to(ROOT)), start, name) for n, start, name in bodies]
    rows.sort(reverse=True)
    return rows[:limit]


def cli_statics():
    where = []
    for path in _files(("cli",), (".cpp", ".hpp")):
        _, statics = _scan(path)
        where += [f"{path.relative_to(ROOT)}:{n}" for n in statics]
    return len(where), where


def reply_lookups():
    cpp = re.compile(r'\[\s*"[A-Za-z_0-9]+"\s*\]|\.(?:at|value|contains)\(\s*"[A-Za-z_0-9]+"')
    py = re.compile(r"\[\s*[\"'][A-Za-z_0-9]+[\"']\s*\]|\.get\(\s*[\"'][A-Za-z_0-9]+[\"']")
    n_cpp = sum(len(cpp.findall(p.read_text())) for p in _files(("cli",), (".cpp", ".hpp")))
    pyfiles = [ROOT / "python/gpuemu/client.py", *sorted((ROOT / "python/gpuemu").glob("_client*.py"))]
    n_py = sum(len(py.findall(p.read_text())) for p in pyfiles if p.is_file())
    return n_cpp, n_py


def wire_fields():
    json_fields = total = 0
    heads = [p for p in ROOT.rglob("*.hpp")
             if "wire" in p.parts and "include" in p.parts and not {"build", ".venv", ".git"} & set(p.parts)]
    member = re.compile(r"^\s+(?!using\b|static\b|template\b|return\b|friend\b)([\w:<>,\s]+?)\s+(\w+)\s*(=[^;]*)?;")
    for p in heads:
        for raw in _strip_cpp(p.read_text()).splitlines():
            m = member.match(raw)
            if m and "(" not in raw:
                total += 1
                if re.fullmatch(r"(std::optional<\s*)?(Json|nlohmann::json)(\s*>)?", m.group(1).strip()):
                    json_fields += 1
    return json_fields, total


def docs_size():
    files = [p for p in (ROOT / "docs").rglob("*") if p.is_file()]
    data = [p for p in files if p.suffix != ".md"]
    return sum(p.stat().st_size for p in files), len(files), len(data)


def main() -> int:
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--longest", type=int, default=10)
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout to measure (default: this one); e.g. an export of an older commit")
    args = ap.parse_args()
    ROOT = args.root.resolve()
    size, nfiles, ndata = docs_size()
    statics, statics_where = cli_statics()
    n_cpp, n_py = reply_lookups()
    jf, total = wire_fields()
    longest = longest_functions(args.longest)
    result = {
        "docs_bytes": size, "docs_files": nfiles, "docs_data_files": ndata,
        "cli_reply_lookups": n_cpp, "python_client_reply_lookups": n_py,
        "wire_json_fields": jf, "wire_fields": total,
        "cli_statics": statics, "cli_statics_at": statics_where,
        "longest_functions": [{"lines": n, "file": f, "line": l, "name": name} for n, f, l, name in longest],
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print("| measure | value |\n| --- | --- |")
    print(f"| docs/ | {size / 1e6:.1f} MB, {nfiles} files, {ndata} data files |")
    print(f"| string-keyed lookups, CLI (cli/) | {n_cpp} |")
    print(f"| string-keyed lookups, Python client | {n_py} |")
    print(f"| untyped `Json` fields on the wire | {jf} of {total} |")
    print(f"| function-local statics in the CLI | {statics} |")
    print("\n| lines | function | at |\n| ---: | --- | --- |")
    for n, f, l, name in longest:
        print(f"| {n} | `{name}` | {f}:{l} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
