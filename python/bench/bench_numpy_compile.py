#!/usr/bin/env python3
"""A NumPy function of 6 ufuncs on 16M float32 values: NumPy itself, the same function on tessera
tensors eagerly (through __array_ufunc__), and compiled with tessera.compile (backend "cpp": one fused
loop), in the same run, interleaved. Prints a Markdown table (docs/performance.md, "Python").

  PYTHONPATH=build/release/python python3 python/bench/bench_numpy_compile.py [--n 16777216] [--repeat 5]
"""
import argparse
import os
import time

import numpy as np

import tessera


def f(x, y):  # six ufuncs: exp, negative, multiply, add, tanh, sqrt... over x and y
    return np.tanh(np.exp(-x) * y + 1.0) + np.sqrt(y)


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16 * 1024 * 1024)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.random(a.n, dtype=np.float32)
    y = rng.random(a.n, dtype=np.float32)
    tx, ty = tessera.from_numpy(x), tessera.from_numpy(y)
    compiled = tessera.compile(f, backend="cpp")
    expected = f(x, y)
    np.testing.assert_allclose(compiled(tx, ty).numpy(), expected, rtol=1e-5, atol=1e-6)  # also compiles
    # Interleaved: each round runs NumPy, eager and compiled once, so load from other processes falls
    # on all three alike; a row is its best round.
    fns = (("NumPy", lambda: f(x, y)), ("tessera eager (np. calls on tensors)", lambda: f(tx, ty)),
           ("tessera.compile, backend cpp", lambda: compiled(tx, ty)))
    times = {label: float("inf") for label, _ in fns}
    for _ in range(a.repeat):
        for label, fn in fns:
            times[label] = min(times[label], best(fn, 1))
    t_np = times["NumPy"]
    load = os.getloadavg()
    print("%d cores, load average %.1f / %.1f / %.1f (1/5/15 min), NumPy %s" % (os.cpu_count(), *load, np.__version__))
    print()
    print("| n = %d float32 | ms | NumPy time / this |" % a.n)
    print("|---|---|---|")
    for label, _ in fns:
        print("| %s | %.1f | %.2fx |" % (label, times[label] * 1e3, t_np / times[label]))

if __name__ == "__main__":
    main()
