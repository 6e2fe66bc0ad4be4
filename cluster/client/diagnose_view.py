"""`tfdist diagnose`'s answer as text: the verdict first, then the numbers behind it, then what to try."""

from __future__ import annotations

from cluster.client.tables import table
from cluster.shared.diagnosis import Diagnosis, samples_per_s, slower


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "-"


def render(d: Diagnosis) -> str:
    rows = []
    for run in d.variants:
        rate = samples_per_s(run, d.batch)
        ranks = ", ".join(f"{t.rank}: {_ms(t.median)}" for t in run.timings if t.times) if run.measured else ""
        rows.append([run.name, run.job or "-", ",".join(run.nodes) or "-", str(run.ranks or "-"),
                     _ms(run.step_time) if run.measured else "-", f"{rate:.1f}" if rate else "-",
                     run.skipped or run.not_applied() or ranks])
    lines = [f"verdict: {d.summary}", "",
             table(["VARIANT", "JOB", "NODES", "RANKS", "STEP", "SAMPLES/S", "RANK MEDIANS / NOTE"], rows), ""]
    shares = ", ".join(f"{name} {value:.0%}" for name, value in d.shares.items() if value is not None)
    lines.append(f"shares of a step: {shares or 'not measured (no variant ran beside the baseline)'}")
    if d.scaling_efficiency is not None:
        lines.append(f"scaling efficiency: {d.scaling_efficiency:.0%} of {len(d.variants[0].nodes)} x one node")
    if d.straggler:
        lines.append(f"straggler: rank {d.straggler.rank} on {d.straggler.node}: on its own, {slower(d.straggler)} "
                     "compared with the other ranks")
    b = d.bandwidth
    if b:
        measured = f"{b.measured_bytes_per_s / 1e6:.2f} MB/s achieved" if b.measured_bytes_per_s else \
            "too little communication to measure a rate"
        nominal = f"; the slowest link is nominally {b.nominal_bits_per_s / 1e9:g} Gb/s ({b.link})" \
            if b.nominal_bits_per_s else "; the links' nominal rates are not known"
        lines.append(f"all-reduce: {b.allreduce_bytes_per_step / 1e6:.2f} MB sent per rank per step, {measured}"
                     f"{nominal}")
    lines += ["", "try:"] + [f"  - {fix}" for fix in d.fixes]
    return "\n".join(lines)
