"""Side-by-side comparisons of variants of one measurement: alternating rounds, medians, ratios to a
baseline, a Markdown table and a JSON file (launch_overhead.py, slurm_start.py)."""

import json
import os
import platform
import statistics
import sys
import time


def alternate(variants: dict, runs: int, run_once) -> dict[str, list[dict]]:
    """`runs` rounds of every variant, the order reversed every other round to cancel drift.
    `run_once(variant)` returns one sample: {measure: seconds}."""
    samples = {name: [] for name in variants}
    for i in range(runs):
        for name in (list(variants) if i % 2 == 0 else list(reversed(variants))):
            samples[name].append(run_once(variants[name]))
            print(f"run {i + 1}/{runs} {name}: {samples[name][-1]}", file=sys.stderr)
    return samples


def summarize(samples: dict[str, list[dict]], baseline: str, measures, label: str) -> list[dict]:
    """One row per variant: `median_<measure>` and `<measure without _s>_ratio` to the baseline's median."""
    base = {k: statistics.median(s[k] for s in samples[baseline]) for k in measures}
    rows = []
    for name, runs in samples.items():
        med = {k: statistics.median(s[k] for s in runs) for k in measures}
        rows.append({label: name, "runs": len(runs), **{f"median_{k}": round(med[k], 3) for k in measures},
                     **{f"{k.removesuffix('_s')}_ratio": round(med[k] / base[k], 3) for k in measures},
                     "samples": runs})
    return rows


def print_table(rows: list[dict], label: str, width: int, columns: list[tuple[str, str]]) -> None:
    """`columns`: (heading, measure) pairs, each printed as its median and its ratio."""
    header = f"| {label:{width}} |" + "".join(f" {heading} | ratio |" for heading, _ in columns)
    print(header)
    print("|" + "|".join("-" * len(c) for c in header.split("|")[1:-1]) + "|")
    for r in rows:
        print(f"| {r[label]:{width}} |" + "".join(
            f" {r['median_' + k]:{len(heading)}.2f} | {r[k.removesuffix('_s') + '_ratio']:5.3f} |"
            for heading, k in columns))


def write_json(path: str, benchmark: str, runs: int, rows: list[dict], **extra) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"benchmark": benchmark, "date": time.strftime("%Y-%m-%d"), "runs": runs,
                   "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, **extra,
                   "results": rows}, f, indent=2)
    print(f"wrote {path}")


def print_measures(rows: list[tuple[str, str, str]], widths: tuple[int, int, int]) -> None:
    """(measure, value, aim) rows as a Markdown table, the columns `widths` wide."""
    name_w, value_w, aim_w = widths
    print(f"| {'measure':{name_w}} | {'tfdist':>{value_w}} | {'aim':>{aim_w}} |")
    print(f"|{'-' * (name_w + 2)}|{'-' * (value_w + 2)}|{'-' * (aim_w + 2)}|")
    for name, value, aim in rows:
        print(f"| {name:{name_w}} | {value:>{value_w}} | {aim:>{aim_w}} |")


def save_json(path: str, result: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")
