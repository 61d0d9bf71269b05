#!/usr/bin/env python3
"""Per-op overhead from Python: 1-element ops timed with timeit, next to NumPy (and PyTorch when it is
installed), all in the same run. Prints a Markdown table (docs/performance.md, "Python").

  PYTHONPATH=build/release/python python3 python/bench/bench_overhead.py [--repeat 7] [--number 20000]
"""
import argparse
import timeit

import numpy as np

import tessera


def best_us(stmt, number, repeat, ns):
    return min(timeit.repeat(stmt, globals=ns, number=number, repeat=repeat)) / number * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=20000)
    a = ap.parse_args()
    ns = {"tessera": tessera, "np": np, "a": tessera.ones(1), "b": tessera.ones(1),
          "x": np.ones(1, np.float32), "y": np.ones(1, np.float32), "add_op": tessera._C.op("add.Tensor")}
    rows = [("a + b (operator)", "a + b", "x + y"),
            ("a + 1.0 (wrapped number)", "a + 1.0", "x + 1.0"),
            ("tessera.add(a, b) (generated, boxed call)", "tessera.add(a, b)", "np.add(x, y)"),
            ("_C.op('add.Tensor')(a, b) (boxed call only)", "add_op(a, b)", None),
            ("a.exp() (generated method)", "a.exp()", "np.exp(x)"),
            ("a[0] (view)", "a[0]", "x[0:1]"),
            ("from_numpy(x) (zero-copy)", "tessera.from_numpy(x)", None)]
    torch = None
    try:
        import torch  # noqa: F401 (only measured when installed)
        ns.update(torch=torch, ta=torch.ones(1), tb=torch.ones(1))
    except ImportError:
        pass
    torch_stmts = {"a + b": "ta + tb", "a + 1.0": "ta + 1.0", "tessera.add(a, b)": "torch.add(ta, tb)",
                   "a.exp()": "ta.exp()", "a[0]": "ta[0]", "tessera.from_numpy(x)": "torch.from_numpy(x)"}
    print("| call | tessera µs | NumPy µs |%s" % (" PyTorch µs |" if torch else ""))
    print("|---|---|---|%s" % ("---|" if torch else ""))
    for label, ts, npy in rows:
        t = best_us(ts, a.number, a.repeat, ns)
        n = best_us(npy, a.number, a.repeat, ns) if npy else float("nan")
        line = "| `%s` | %.2f | %s |" % (label, t, "%.2f" % n if npy else "-")
        if torch:
            s = torch_stmts.get(ts)
            line += " %s |" % ("%.2f" % best_us(s, a.number, a.repeat, ns) if s else "-")
        print(line)


if __name__ == "__main__":
    main()
