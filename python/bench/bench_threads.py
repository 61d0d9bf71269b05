#!/usr/bin/env python3
"""Op throughput from 1 and N Python threads: the GIL is released while an op runs, so threads that
call ops on separate tensors run them at the same time. Prints a Markdown table (docs/performance.md,
"Python").

  OMP_NUM_THREADS=1 PYTHONPATH=build/release/python python3 python/bench/bench_threads.py [--threads 2]

OMP_NUM_THREADS=1 keeps each op on its calling thread (otherwise one op already uses every core and
there is nothing for a second Python thread to gain). Each row runs the same total number of ops,
split over the threads, in interleaved rounds; a cell is the best round. NumPy, which also releases
the GIL inside its ufuncs, is the reference. Exits 0 whatever the figures (a benchmark, not a test).
"""
import argparse
import os
import threading
import time

import numpy as np

import tessera


def run(threads, calls, make_call):
    """Seconds for `calls` calls split over `threads` threads (each with its own operands)."""
    work = [make_call() for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def body(call):
        start.wait()
        for _ in range(calls // threads):
            call()

    ts = [threading.Thread(target=body, args=(w,)) for w in work]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--size", type=int, default=1 << 16)
    args = p.parse_args()

    rng = np.random.default_rng(0)

    def tessera_exp():
        a = tessera.from_numpy(rng.standard_normal(args.size).astype(np.float32))
        return lambda: tessera.exp(a)

    def tessera_chain():
        a = tessera.from_numpy(rng.standard_normal(args.size).astype(np.float32))
        return lambda: tessera.tanh(a * 1.5 + 0.25)

    def numpy_exp():
        x = rng.standard_normal(args.size).astype(np.float32)
        return lambda: np.exp(x)

    rows = [("tessera.exp(a)", tessera_exp), ("tessera.tanh(a * 1.5 + 0.25)", tessera_chain),
            ("np.exp(x) (reference)", numpy_exp)]
    best = {(name, n): float("inf") for name, _ in rows for n in (1, args.threads)}
    for _ in range(args.rounds):
        for name, make in rows:
            for n in (1, args.threads):
                best[(name, n)] = min(best[(name, n)], run(n, args.calls, make))

    load = os.getloadavg()
    print("%d cores, OMP_NUM_THREADS=%s, load average %.1f / %.1f / %.1f, %d float32 per operand, %d calls per "
          "cell\n" % (os.cpu_count(), os.environ.get("OMP_NUM_THREADS", "unset"), *load, args.size, args.calls))
    print("| ops | 1 thread ms | %d threads ms | speed-up |" % args.threads)
    print("|---|---|---|---|")
    for name, _ in rows:
        one, many = best[(name, 1)], best[(name, args.threads)]
        print("| `%s` | %.1f | %.1f | %.2fx |" % (name, one * 1e3, many * 1e3, one / many))


if __name__ == "__main__":
    main()
