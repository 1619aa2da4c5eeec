"""The GPU targets, checked against the runs of scripts/gpu_check.sh (`gpu_report.py --targets`):
each target, what was measured and whether it is met. A number that was not measured says so.
"""

from __future__ import annotations

from typing import Any

from formers.bench.tables import aligned

COMPILED_RATIOS = {"primer-ez": 0.85, "transformer-xl": 0.7, "sparse-topk": 0.6, "switch": 0.8}
LONG = {  # (preset, seq_len) -> training tokens/s over vanilla's, at least
    ("longformer", 32768): 3.0,
    ("routing", 32768): 2.0,
    ("longformer", 8192): 1.2,
    ("routing", 8192): 1.2,
}


def _rows(runs: dict[str, Any], part: str) -> dict[str, dict[str, Any]]:
    found = (runs["parts"].get(part) or {}).get("result") or {}
    return {
        r["row"].removesuffix("+compile"): r for r in found.get("rows", []) if r["status"] == "ok"
    }


def _report(runs: dict[str, Any], part: str) -> dict[str, Any]:
    return (runs["parts"].get(part) or {}).get("result") or {}


def _check(name: str, value: float | None, least: float | None = None, most: float | None = None,
           unit: str = "×") -> list[str]:  # fmt: skip
    if value is None:
        return [name, "not measured", "—"]
    met = (least is None or value >= least) and (most is None or value <= most)
    return [name, f"{value:.2f}{unit}", "met" if met else "missed"]


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b:
        return None
    return a["tokens_per_second"] / b["tokens_per_second"]


def targets_table(runs: dict[str, Any]) -> str:
    """A table of the targets, measured values and verdicts."""
    rows = []
    compiled = _rows(runs, "peers-compiled")
    eager = _rows(runs, "peers")
    vanilla = compiled.get("vanilla:formers")
    for peer, least in (("bare", 1.0), ("hf-gpt2", 1.15), ("x-transformers", 1.15)):
        ratio = _ratio(vanilla, compiled.get(f"vanilla:{peer}"))
        rows.append(_check(f"vanilla compiled ≥ {least}× {peer} compiled", ratio, least))
    for preset, least in COMPILED_RATIOS.items():
        ratio = _ratio(compiled.get(f"{preset}:formers"), vanilla)
        rows.append(_check(f"{preset} compiled ≥ {least}× vanilla compiled", ratio, least))
    sweep = _report(runs, "sweep").get("sweep", {})
    at = {(r["preset"], r["seq_len"]): r for r in sweep.get("runs", []) if r["status"] == "ok"}
    for (preset, length), least in LONG.items():
        mine, full = at.get((preset, length)), at.get(("vanilla", length))
        ratio = _ratio(mine and mine["train"], full and full["train"])
        rows.append(_check(f"{preset} ≥ {least}× vanilla at {length:,}", ratio, least))
    mlm = _report(runs, "mlm").get("results", {})
    ratio = _ratio(mlm.get("linformer", {}).get("train"), mlm.get("bert", {}).get("train"))
    rows.append(_check("linformer ≥ 2× bert at 8,192 (masked LM)", ratio, 2.0))
    results = _report(runs, "compile").get("compile", {}).get("results", {})
    for name, r in results.items():
        if r["status"] != "ok":
            rows.append([f"{name}: compiled, under 90 s", r["status"], "missed"])
            continue
        spread = max(r["eager"]["max_over_min"], r["compiled"]["max_over_min"])
        rows.append(
            _check(f"{name}: step max/min ≤ 1.15 (eager, compiled)", spread, most=1.15, unit="")
        )
        rows.append(_check(f"{name}: compile < 90 s", r["compile_seconds"], most=90, unit=" s"))
    base = eager.get("vanilla:formers")
    for preset in ("transformer-xl", "sparse-topk"):
        mine = (eager.get(f"{preset}:formers") or {}).get("peak_memory_bytes")
        ours = (base or {}).get("peak_memory_bytes")
        ratio = mine / ours if mine and ours else None
        rows.append(_check(f"{preset} peak memory ≤ 1.5× vanilla (eager)", ratio, most=1.5))
    return aligned(["target", "measured", "verdict"], rows)
