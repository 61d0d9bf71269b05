#!/usr/bin/env python3
"""Plots the ratio counters of Google Benchmark JSON files (./run.sh bench writes them to build/bench/).

Every counter whose name starts with "ratio", "speedup", "mem_ratio" or ends in "_direct" is a ratio
against a reference measured in the same run; each becomes one bar, grouped by benchmark program, with
the goal line at the value the issue names where one is known.

usage: tools/perf/plot.py [build/bench] [docs/performance.png]
"""
import json
import pathlib
import sys

RATIO_PREFIXES = ("ratio", "speedup", "mem_ratio", "cpu_over")


def ratios(path):
    data = json.loads(path.read_text())
    for bench in data.get("benchmarks", []):
        if bench.get("run_type") == "aggregate" and bench.get("aggregate_name") != "mean":
            continue
        for key, value in bench.items():
            if isinstance(value, (int, float)) and key.startswith(RATIO_PREFIXES):
                yield f"{bench['name']} [{key}]", float(value)


def main():
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/bench")
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "docs/performance.png")
    rows = []
    for f in sorted(src.glob("*.json")):
        rows += [(f.stem.replace("bench_", ""), name, value) for name, value in ratios(f)]
    if not rows:
        sys.exit(f"no ratio counters found in {src}/*.json; run ./run.sh bench first")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(12, max(4, 0.28 * len(rows))))
    labels = [f"{prog}: {name}" for prog, name, _ in rows]
    values = [v for _, _, v in rows]
    ax.barh(range(len(rows)), values, color="#4472c4")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("ratio against the reference measured in the same run (log scale; 1 = parity)")
    ax.set_title("Tessera benchmarks: ratios against same-run references")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out} ({len(rows)} ratios)")


if __name__ == "__main__":
    main()
