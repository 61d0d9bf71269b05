#!/usr/bin/env python3
"""Per-op overhead from Python: 1-element float32 CPU ops timed with timeit for tessera, PyTorch (when
installed) and NumPy, interleaved in one run. Prints a Markdown table (docs/performance.md, "Python").

  PYTHONPATH=build/release/python python3 python/bench/bench_overhead.py [--rounds 30] [--number 2000]

Interleaved: each round times every call of every library once (one timeit of --number calls), so
load from other processes falls on all columns alike; a cell is the best round. The ratio columns
divide in the same run. Exits 0 whatever the figures (a benchmark, not a test).
"""
import argparse
import os
import platform
import timeit

import numpy as np

import tessera

# (label (the tessera call), tessera statement, PyTorch statement, NumPy statement); None: no equivalent.
ROWS = [
    ("a + b", "a + b", "ta + tb", "x + y"),
    ("tessera.add(a, b)", "tessera.add(a, b)", "torch.add(ta, tb)", "np.add(x, y)"),
    ("a * 2.0", "a * 2.0", "ta * 2.0", "x * 2.0"),
    ("tessera.mul(a, 2.0)", "tessera.mul(a, 2.0)", "torch.mul(ta, 2.0)", "np.multiply(x, 2.0)"),
    ("tessera.relu(a)", "tessera.relu(a)", "torch.relu(ta)", "np.maximum(x, 0)"),
    ("a.relu()", "a.relu()", "ta.relu()", None),
    ("tessera.sum(a)", "tessera.sum(a)", "torch.sum(ta)", "np.sum(x)"),
    ("a.exp()", "a.exp()", "ta.exp()", "np.exp(x)"),
    ("a[0] (view)", "a[0]", "ta[0]", "x[0:1]"),
    ("_C.op('add.Tensor')(a, b): typed fast path", "add_typed(a, b)", None, None),
    ("_C.op('add.Tensor', typed=False)(a, b): boxed call", "add_boxed(a, b)", None, None),
    ("the same add as a Python wrapper over the boxed call (the generated function before the typed bindings)",
     "add_wrapped(a, b)", None, None),
    ("tessera.from_numpy(x)", "tessera.from_numpy(x)", "torch.from_numpy(x)", None),
]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--number", type=int, default=2000)
    a = ap.parse_args()
    ns = {"tessera": tessera, "np": np, "a": tessera.ones(1), "b": tessera.ones(1),
          "x": np.ones(1, np.float32), "y": np.ones(1, np.float32)}
    # The op handle the generated add() calls, with and without its typed fast path (python/src/typed_ops.cpp).
    op = tessera._C.op
    try:
        ns.update(add_typed=op("add.Tensor"), add_boxed=op("add.Tensor", typed=False))
    except TypeError:  # an extension without the typed fast path
        ns.update(add_typed=op("add.Tensor"), add_boxed=op("add.Tensor"))
    boxed = ns["add_boxed"]

    def add_wrapped(self, other, *, alpha=1):  # what tessera/_ops.py generated for add() before
        return boxed(self, other, alpha)
    ns["add_wrapped"] = add_wrapped
    try:
        import torch
        torch.set_num_threads(1)  # a 1-element op: threads only add noise
        ns.update(torch=torch, ta=torch.ones(1), tb=torch.ones(1))
    except ImportError:
        torch = None
    libs = ["tessera", "torch", "numpy"] if torch else ["tessera", "numpy"]
    best = {}
    for _ in range(a.rounds):
        for label, *stmts in ROWS:
            for lib, stmt in zip(["tessera", "torch", "numpy"], stmts):
                if stmt is None or lib not in libs:
                    continue
                t = timeit.timeit(stmt, globals=ns, number=a.number) / a.number * 1e6
                best[label, lib] = min(best.get((label, lib), t), t)
    load = os.getloadavg()
    print("%s, %d cores, load average %.1f / %.1f / %.1f (1/5/15 min), NumPy %s%s" % (
        cpu_model(), os.cpu_count(), *load, np.__version__, ", PyTorch %s" % torch.__version__ if torch else ""))
    print()
    head = "| call | tessera µs |" + (" PyTorch µs | PyTorch / tessera |" if torch else "") + " NumPy µs |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for label, *stmts in ROWS:
        cell = lambda lib: "%.2f" % best[label, lib] if (label, lib) in best else "-"  # noqa: E731
        line = "| `%s` | %s |" % (label, cell("tessera"))
        if torch:
            ratio = "%.1fx" % (best[label, "torch"] / best[label, "tessera"]) if (label, "torch") in best else "-"
            line += " %s | %s |" % (cell("torch"), ratio)
        print(line + " %s |" % cell("numpy"))


if __name__ == "__main__":
    main()
