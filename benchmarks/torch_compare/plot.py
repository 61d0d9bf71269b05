#!/usr/bin/env python3
"""Plots bench_torch_compare's JSON: one horizontal bar per row, ratio = PyTorch time / Tessera time
(> 1: Tessera is faster), with the goal line (1.2) and the parity line (1.0). With a contention run
in the file, a second panel shows each side's slowdown next to two busy loops.

usage: benchmarks/torch_compare/plot.py [build/bench/torch_compare.json] [docs/performance_torch.png]
       benchmarks/torch_compare/plot.py --markdown [build/bench/torch_compare.json]   (the table for docs/)
"""
import json
import pathlib
import sys


def markdown(data):
    loaded = any("tessera_slowdown" in r for r in data["rows"])
    head = "| row | Tessera | PyTorch | PyTorch ÷ Tessera | oneDNN prepacked ÷ Tessera |"
    sep = "|---|---|---|---|---|"
    if loaded:
        head += " slowdown next to 2 busy loops: Tessera / PyTorch |"
        sep += "---|"
    print(head)
    print(sep)

    def t(us):
        return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"

    for r in data["rows"]:
        ratio = "not compared" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        if r.get("ratio") is not None and r["ratio"] >= data.get("goal", 1.2):
            ratio = f"**{ratio}**"
        ref = f"{r['ratio_vs_reference']:.2f}" if "ratio_vs_reference" in r else ""
        line = (f"| {r['name']} | {t(r['tessera_us'])} | {t(r['torch_us']) if 'torch_us' in r else '-'} | {ratio} "
                f"| {ref} |")
        if loaded:
            line += f" {r.get('tessera_slowdown', 0):.1f}x / {r.get('torch_slowdown', 0):.1f}x |"
        print(line)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--markdown":
        src = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "build/bench/torch_compare.json")
        return markdown(json.loads(src.read_text()))
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build/bench/torch_compare.json")
    out = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "docs/performance_torch.png")
    data = json.loads(src.read_text())
    rows = [r for r in data["rows"] if r.get("ratio") is not None]
    if not rows:
        print(f"{src}: no compared rows (PyTorch was not available to the benchmark)")
        return 1
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    loaded = [r for r in rows if "tessera_slowdown" in r and "torch_slowdown" in r]
    panels = 2 if loaded else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 0.32 * len(rows) + 1.5), squeeze=False)
    names = [r["name"] for r in rows][::-1]
    ratios = [r["ratio"] for r in rows][::-1]
    ax = axes[0][0]
    goal = data.get("goal", 1.2)
    colors = ["tab:green" if v >= goal else ("tab:orange" if v >= 1.0 else "tab:red") for v in ratios]
    ax.barh(names, ratios, color=colors)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.axvline(goal, color="tab:green", linestyle="--", linewidth=0.8, label=f"goal {goal}")
    ax.set_xscale("log")
    ax.set_xlabel("PyTorch time / Tessera time (log scale; > 1: Tessera faster)")
    ax.set_title(f"{data['cpu']}, {data['threads']} threads, torch {data['torch']}", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    if loaded:
        ax2 = axes[0][1]
        names2 = [r["name"] for r in loaded][::-1]
        y = range(len(names2))
        ax2.barh([i + 0.2 for i in y], [r["tessera_slowdown"] for r in loaded][::-1], height=0.4, label="Tessera")
        ax2.barh([i - 0.2 for i in y], [r["torch_slowdown"] for r in loaded][::-1], height=0.4, label="PyTorch")
        ax2.set_yticks(list(y))
        ax2.set_yticklabels(names2)
        ax2.set_xscale("log")
        # Plain numbers at 1, 2, 5, 10, ... (the default minor labels overlap on a narrow range).
        ax2.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax2.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax2.set_xlabel("time next to two busy loops / quiet time (log scale)")
        ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
