"""From the runs of measure.py to the power curve of each (op, dtype): detection rate and worst error
per k, the smallest k caught, the control's worst error and the detection margin; as JSON and as a
Markdown table."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Optional, Tuple

DETECTION_RATE = 0.95  # a k counts as caught when at least this share of the runs fail
MARGIN_GOAL = 4.0      # issue 21: a loss 4x the control's worst error must be caught
DTYPE_ORDER = ("float32", "float16", "bfloat16", "float8_e4m3fn")


def _median(xs: List[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return math.nan
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summarize(runs: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One entry per (op, dtype, sites) over its runs (one run per master seed)."""
    groups: Dict[Tuple[str, str, Tuple[str, ...]], List[Dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["op"], r["dtype"], tuple(r["sites"])), []).append(r)
    out = []
    for (op, dtype, sites), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], _dtype_rank(kv[0][1]), kv[0][2])):
        out.append(_curve(op, dtype, list(sites), sorted(rs, key=lambda r: r["seed"])))
    return out


def _dtype_rank(d: str) -> int:
    return DTYPE_ORDER.index(d) if d in DTYPE_ORDER else len(DTYPE_ORDER)


def _curve(op: str, dtype: str, sites: List[str], rs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per k, over the runs that measured it (a scouted protocol measures the full grid on a few
    seeds and only the window around the transition on the rest; every run measures k = 1)."""
    ks = sorted({k for r in rs for k in r["ks"]})
    judged = [r for r in rs if r["cases"]]
    curve = []
    for k in ks:
        with_k = _once_per_seed([(r, r["ks"].index(k)) for r in judged if k in r["ks"]])
        run_worst = [max(e[j] for e in r["errors"]) for r, j in with_k]
        caught = sum(any(f[j] for f in r["failed"]) for r, j in with_k)
        cases_failed = sum(sum(f[j] for f in r["failed"]) for r, j in with_k)
        curve.append({"k": k, "bits": 23 - int(round(math.log2(k))), "runs": len(with_k), "runs_caught": caught,
                      "rate": caught / len(with_k) if with_k else math.nan,
                      "cases": sum(r["cases"] for r, _ in with_k),
                      "worst": max(run_worst) if run_worst else math.nan,
                      "median_run_worst": _median(run_worst), "cases_failed": cases_failed})
    control = ks.index(1)
    k_star: Optional[int] = None
    for j in range(len(ks) - 1, -1, -1):  # the smallest k from which every larger k is caught
        if curve[j]["rate"] >= DETECTION_RATE:
            k_star = ks[j]
        else:
            break
    ctrl = curve[control]
    entry: Dict[str, Any] = {
        "op": op, "dtype": dtype, "sites": sites, "envelope": next((r["envelope"] for r in judged), None),
        "seeds": sorted({r["seed"] for r in rs}), "runs": len({r["seed"] for r in judged}),
        "cases": curve[control]["cases"], "cases_per_run": max((r["cases"] for r in rs), default=0),
        "control_worst": ctrl["worst"], "control_failed_cases": ctrl["cases_failed"],
        "k_star": k_star, "curve": curve,
        "problems": [p for r in rs for p in r.get("problems", [])],
        "sites_reached": sorted({s for r in rs for s in r.get("sites_reached", [])}),
        "seconds": round(sum(r.get("seconds", 0.0) for r in rs), 1),
    }
    entry["control_worst_case"] = _worst_cases(judged, 1, failing_only=False, limit=1)
    if k_star is not None:
        entry["caught_at_k_star"] = _worst_cases(judged, k_star, failing_only=True, limit=10)
        entry["escaped_at_half_k_star"] = (_worst_cases(judged, k_star // 2, failing_only=False, limit=5)
                                          if k_star > 1 else [])
        at = curve[ks.index(k_star)]
        entry["worst_at_k_star"] = at["worst"]
        entry["runs_at_k_star"] = at["runs"]
        entry["rate_at_k_star"] = at["rate"]
        below = ks.index(k_star) - 1
        entry["rate_below_k_star"] = curve[below]["rate"] if below >= 0 else None
        cw = ctrl["worst"]
        entry["margin"] = at["worst"] / cw if cw > 0 else math.inf
        # the largest ratio that escaped: the k just below k_star (not caught in >= 95% of runs)
        entry["escaped_ratio"] = (curve[below]["worst"] / cw if cw > 0 else math.inf) if below > control else None
    else:
        entry["worst_at_k_star"] = entry["rate_at_k_star"] = entry["rate_below_k_star"] = None
        entry["margin"] = entry["escaped_ratio"] = entry["runs_at_k_star"] = None
    entry.update(_per_run(judged))
    return entry


def _once_per_seed(with_k: List[Tuple[Dict[str, Any], int]]) -> List[Tuple[Dict[str, Any], int]]:
    """One measurement of a k per master seed: a resumed scouted run can measure a seed's window
    twice (the cases are the same, so are the errors), and counting both would weigh that seed
    double."""
    seen = set()
    out = []
    for r, j in with_k:
        if r["seed"] not in seen:
            seen.add(r["seed"])
            out.append((r, j))
    return out


def _per_run(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The margin read run by run: every (run, k > 1) pair is one kernel judged on one run's cases,
    with r = its worst error over those cases / the control's worst over the very same cases.
    ``margin_per_run`` is the smallest ratio t such that, for every t' >= t, at least 95% of the
    pairs with r >= t' were caught (inf when a pair at the top escaped, None without pairs);
    ``goal_runs`` counts the pairs with r >= 4 and how many of them failed the run."""
    pairs: List[Tuple[float, bool]] = []
    seen = set()
    for r in runs:
        if 1 not in r["ks"]:
            continue
        c = r["ks"].index(1)
        ctrl = max((e[c] for e in r["errors"]), default=0.0)
        for j, k in enumerate(r["ks"]):
            if k == 1 or (r["seed"], k) in seen:
                continue
            seen.add((r["seed"], k))
            worst = max((e[j] for e in r["errors"]), default=0.0)
            ratio = worst / ctrl if ctrl > 0 else (math.inf if worst > 0 else 1.0)
            pairs.append((ratio, any(f[j] for f in r["failed"])))
    if not pairs:
        return {"margin_per_run": None, "goal_runs": None}
    pairs.sort(key=lambda p: -p[0])
    margin = math.inf
    caught = 0
    for n, (ratio, hit) in enumerate(pairs, 1):  # the share caught among the n largest ratios
        caught += hit
        if n < len(pairs) and pairs[n][0] == ratio:  # a threshold sits between distinct ratios only
            continue
        if caught / n < DETECTION_RATE:
            break
        margin = ratio
    goal = [hit for ratio, hit in pairs if ratio >= MARGIN_GOAL]
    return {"margin_per_run": margin, "goal_runs": [sum(goal), len(goal)]}


def _worst_cases(runs: List[Dict[str, Any]], k: int, failing_only: bool, limit: int) -> List[Dict[str, Any]]:
    """The cases with the largest error at k (``gpuemu fuzz OP --seed SEED --case INDEX`` replays
    each): their seed, index, dims, attrs, non-contiguous layouts and error."""
    found = []
    for r in runs:
        if k not in r["ks"]:
            continue
        j = r["ks"].index(k)
        info = r.get("case_info") or [{} for _ in r["errors"]]
        for e, f, c in zip(r["errors"], r["failed"], info):
            if f[j] or not failing_only:
                found.append({"seed": r["seed"], **c, "error": e[j]})
    found.sort(key=lambda c: -c["error"])
    return found[:limit]


def margin_flag(e: Dict[str, Any]) -> str:
    """Why an entry misses the goal ('' when it meets it)."""
    if e["control_failed_cases"]:
        return "control fails"
    if e["k_star"] is None:
        return "not caught in the grid"
    if e["control_worst"] == 0:
        return "control bit-exact"
    if e["margin"] > MARGIN_GOAL:
        if e["escaped_ratio"] is not None and e["escaped_ratio"] < MARGIN_GOAL:
            return "margin > 4 (grid step: 4 lies between k/2 and k)"
        return "margin > 4"
    return ""


def per_run_flag(e: Dict[str, Any]) -> str:
    """Why an entry misses the goal read run by run ('' when it meets it)."""
    if e.get("margin_per_run") is None:
        return "no mutant runs"
    if e["control_failed_cases"]:
        return "control fails"
    goal = e.get("goal_runs")
    if e.get("control_worst") == 0 and goal and goal[1] > 0 and goal[0] == goal[1]:
        return ""  # a bit-exact control: no ratio, but every mutant that changed an output was caught
    return "margin per run > 4" if e["margin_per_run"] > MARGIN_GOAL else ""


def _fmt(x: Optional[float], digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.{digits}g}"


def _k(k: Optional[int]) -> str:
    return "-" if k is None else f"2^{int(round(math.log2(k)))} ({23 - int(round(math.log2(k)))} bits)"


def _goal(g: Optional[List[int]]) -> str:
    return "-" if not g else f"{g[0]}/{g[1]}"


def markdown(entries: List[Dict[str, Any]]) -> str:
    lines = ["| op | dtype | envelope | control worst | smallest k caught (bits kept) | runs caught at k / at k/2 "
             "| mutant worst at k | margin | ratio at k/2 | runs at k x cases | | margin per run | runs >= 4x caught |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in entries:
        rate = "-"
        if e["k_star"] is not None:
            below = "-" if e["rate_below_k_star"] is None else f"{e['rate_below_k_star']:.0%}"
            rate = f"{e['rate_at_k_star']:.0%} / {below}"
        lines.append(f"| {e['op']} | {e['dtype']} | {_fmt(e['envelope'])} | {_fmt(e['control_worst'])} | "
                     f"{_k(e['k_star'])} | {rate} | {_fmt(e['worst_at_k_star'])} | {_fmt(e['margin'])} | "
                     f"{_fmt(e['escaped_ratio'])} | "
                     f"{e['runs_at_k_star'] or e['runs']} x {e['cases_per_run']} | {margin_flag(e)} | "
                     f"{_fmt(e.get('margin_per_run'))} | {_goal(e.get('goal_runs'))} |")
    return "\n".join(lines)


def curve_markdown(entries: List[Dict[str, Any]]) -> str:
    """The mutant's worst error at each k (the plot's data), one row per (op, dtype)."""
    ks = sorted({c["k"] for e in entries for c in e["curve"]})
    head = "| op | dtype | " + " | ".join(f"2^{int(round(math.log2(k)))}" for k in ks) + " |"
    lines = [head, "|---|---|" + "---|" * len(ks)]
    for e in entries:
        by_k = {c["k"]: c for c in e["curve"]}
        cells = [(_fmt(by_k[k]["worst"], 2) + ("*" if by_k[k]["rate"] >= DETECTION_RATE else "")) if k in by_k else ""
                 for k in ks]
        lines.append(f"| {e['op']} | {e['dtype']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
