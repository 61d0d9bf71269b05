#!/usr/bin/env python3
"""The side-by-side table of a GPU run: Tessera (bench_cuda, bench_sparse_cuda) and PyTorch
(torch_rows.py) on the same rows.

    gpu_table.py --out table.md BENCH.json [BENCH.json ...] [--torch TORCH.json]
    gpu_table.py --missing-torch-rows LIST [LIST ...]   rows of `bench --benchmark_list_tests`
                                                         output without a PyTorch row (exit 1 if any)
    gpu_table.py --self-test

Columns: the row; Tessera's time per call (the benchmark's tessera_us / sparse_us counter, else its
real time); PyTorch's; PyTorch / Tessera (above 1: Tessera is faster); the benchmark's own in-run
ratio (its named reference / Tessera: cuBLASLt, a device copy, the math path); notes. A missing
input file or row leaves a dash, never a crash: the table is written whatever else failed.
"""
import json
import os
import statistics
import sys

_DROPPED = ("min_time:", "iterations:", "repeats:", "threads:")
_TIME_UNIT_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
# Rows timed against the same PyTorch call as another row.
_TORCH_ALIASES = {"BM_SdpaSimt/": "BM_Sdpa/", "BM_SdpaFlash/": "BM_Sdpa/"}


def normalise(name):
    """A benchmark's name without Google Benchmark's run-option suffixes."""
    parts = [p for p in name.strip().split("/") if p and not p.startswith(_DROPPED)
             and p not in ("real_time", "manual_time", "process_time")]
    return "/".join(parts)


def torch_name(row):
    for alias, target in _TORCH_ALIASES.items():
        if row.startswith(alias):
            return target + row[len(alias):]
    return row


def load_bench(path):
    """{row: {"us", "ratio", "label", "error"}} in the file's order; {} when the file is missing."""
    rows = {}
    if not path or not os.path.exists(path):
        return rows
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return rows
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        row = normalise(b.get("run_name") or b.get("name", ""))
        us = b.get("tessera_us", b.get("sparse_us"))
        if us is None and "real_time" in b:
            us = b["real_time"] * _TIME_UNIT_US.get(b.get("time_unit", "ns"), 1e-3)
        rows[row] = {"us": us, "ratio": b.get("ratio"), "label": b.get("label", ""),
                     "error": b.get("error_message") if b.get("error_occurred") else None}
    return rows


def load_torch(path):
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def table(bench_files, torch_file):
    rows = {}
    for path in bench_files:
        rows.update(load_bench(path))
    torch = load_torch(torch_file)
    meta = torch.get("_meta", {})
    lines = ["| row | Tessera µs | PyTorch µs | PyTorch / Tessera | in-run reference / Tessera | notes |",
             "|---|---:|---:|---:|---:|---|"]
    speedups = []
    for row, r in rows.items():
        t = torch.get(torch_name(row), {})
        mine, theirs = r["us"], t.get("us")
        if r["error"]:
            mine = None
        vs = theirs / mine if mine and theirs else None
        if vs is not None:
            speedups.append(vs)
        notes = "; ".join(n for n in (r["error"] and f"Tessera: {r['error']}", t.get("note"),
                                      r["label"] and r["label"].replace("|", "/")) if n)
        lines.append(f"| {row} | {fmt(mine)} | {fmt(theirs)} | {fmt(vs, 2)} | {fmt(r['ratio'], 2)} | {notes} |")
    head = [f"# Tessera vs PyTorch on the GPU ({meta.get('device', 'device unknown')}, "
            f"PyTorch {meta.get('torch', 'not run')})", ""]
    if speedups:
        head.append(f"{len(speedups)} rows compared; PyTorch / Tessera: median {statistics.median(speedups):.2f}, "
                    f"min {min(speedups):.2f}, max {max(speedups):.2f}; {sum(s >= 0.9 for s in speedups)} rows at "
                    f">= 0.9.")
    else:
        head.append("No row has both a Tessera and a PyTorch time.")
    return "\n".join(head + [""] + lines) + "\n"


def missing_torch_rows(list_files):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_rows  # row names only: torch itself is not imported
    known = {name for name, _, _ in torch_rows.row_specs()}
    missing = []
    for path in list_files:
        with open(path) as f:
            for line in f:
                if line.startswith("BM_"):
                    row = normalise(line)
                    if torch_name(row) not in known:
                        missing.append(row)
    return missing


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        bench = {"benchmarks": [
            {"name": "BM_Matmul/f16/1024/min_time:0.300/real_time", "run_name": "BM_Matmul/f16/1024/min_time:0.300/real_time",
             "run_type": "iteration", "real_time": 0.05, "time_unit": "ms", "tessera_us": 50.0, "ratio": 0.9,
             "label": "reference: cuBLASLt direct"},
            {"name": "BM_SdpaSimt/f16/1024/64/min_time:0.300/real_time", "run_type": "iteration", "real_time": 200.0,
             "time_unit": "us"},
            {"name": "BM_Add/f32/67108864/min_time:0.300/real_time", "run_type": "iteration", "error_occurred": True,
             "error_message": "no CUDA device", "real_time": 0, "time_unit": "us"},
            {"name": "BM_Add/f32/67108864_mean", "run_type": "aggregate", "real_time": 1.0}]}
        sparse = {"benchmarks": [{"name": "BM_SparseLinear/f16/16/iterations:20/real_time", "run_type": "iteration",
                                  "real_time": 30.0, "time_unit": "us", "sparse_us": 25.0, "ratio": 0.5}]}
        torch = {"BM_Matmul/f16/1024": {"us": 45.0, "note": ""}, "BM_Sdpa/f16/1024/64": {"us": 100.0, "note": ""},
                 "BM_Add/f32/67108864": {"us": 400.0, "note": ""},
                 "BM_SparseLinear/f16/16": {"us": 50.0, "note": "dense F.linear (2:4 refused: RuntimeError)"},
                 "_meta": {"torch": "2.11", "device": "NVIDIA H200"}}
        paths = []
        for name, obj in (("b.json", bench), ("s.json", sparse), ("t.json", torch)):
            paths.append(os.path.join(d, name))
            with open(paths[-1], "w") as f:
                json.dump(obj, f)
        out = table(paths[:2] + [os.path.join(d, "absent.json")], paths[2])
        lines = out.splitlines()
        expect = {
            "BM_Matmul/f16/1024": "| BM_Matmul/f16/1024 | 50.0 | 45.0 | 0.90 | 0.90 | reference: cuBLASLt direct |",
            "BM_SdpaSimt/f16/1024/64": "| BM_SdpaSimt/f16/1024/64 | 200.0 | 100.0 | 0.50 | - |  |",
            "BM_Add/f32/67108864": "| BM_Add/f32/67108864 | - | 400.0 | - | - | Tessera: no CUDA device |",
            "BM_SparseLinear/f16/16": "| BM_SparseLinear/f16/16 | 25.0 | 50.0 | 2.00 | 0.50 | dense F.linear (2:4 refused: RuntimeError) |",
        }
        for row, want in expect.items():
            got = [ln for ln in lines if ln.startswith(f"| {row} |")]
            assert got == [want], f"row {row}: got {got}, expected {want}"
        assert not any("_mean" in ln for ln in lines), "aggregate rows must be left out"
        assert "NVIDIA H200" in lines[0] and "3 rows compared" in out and "median 0.90" in out, out
        assert table([os.path.join(d, "absent.json")], None).count("\n| ") == 1  # header only, no crash
        assert normalise("BM_Softmax/f16/16384/4096/min_time:0.300/real_time") == "BM_Softmax/f16/16384/4096"
    print("gpu_table self-test: ok")


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        self_test()
        return 0
    if args and args[0] == "--missing-torch-rows":
        missing = missing_torch_rows(args[1:])
        for row in missing:
            print(f"no PyTorch row for {row} (add it to torch_rows.py)")
        return 1 if missing else 0
    out, torch_file, bench_files = None, None, []
    i = 0
    while i < len(args):
        if args[i] in ("--out", "--torch") and i + 1 < len(args):
            if args[i] == "--out":
                out = args[i + 1]
            else:
                torch_file = args[i + 1]
            i += 2
        else:
            bench_files.append(args[i])
            i += 1
    if not out or not bench_files:
        print(__doc__, file=sys.stderr)
        return 2
    text = table(bench_files, torch_file)
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
