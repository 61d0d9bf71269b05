"""The GIL is released while ops run (Note [GIL and ops] in python/src/bindings.h): another Python thread
keeps running during a long op, and threads running ops overlap."""
import threading
import time

import tessera


def long_op_seconds(a):
    t0 = time.perf_counter()
    tessera.matmul(a, a)
    return time.perf_counter() - t0


def test_other_threads_run_while_an_op_runs():
    n = 1024
    a = tessera.rand(n, n)
    while long_op_seconds(a) < 0.2 and n < 4096:  # an op long enough to see, whatever the machine
        n *= 2
        a = tessera.rand(n, n)
    span = []
    ticks = []

    def worker():
        span.append(time.perf_counter())
        tessera.matmul(a, a)
        span.append(time.perf_counter())

    th = threading.Thread(target=worker)
    th.start()
    while th.is_alive():
        ticks.append(time.perf_counter())  # pure Python: runs only while the worker does not hold the GIL
    th.join()
    start, end = span
    middle = (start + end) / 2
    during = [t for t in ticks if start < t < end]
    # With the GIL held for the whole op this loop could not run between start and end at all. It
    # must have run in both halves of the op: a test of where it ran, not of how long a gap was, so
    # a machine that preempts the loop for a while (other processes) does not fail it.
    assert len(during) > 100, (len(during), end - start)
    assert any(t < middle for t in during) and any(t > middle for t in during), (start, end, len(during))


def test_threads_running_ops_all_finish_with_right_results():
    a = tessera.rand(256, 256)
    expected = tessera.matmul(a, a)
    results = [None] * 4

    def worker(i):
        for _ in range(5):
            results[i] = tessera.matmul(a, a)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(tessera.allclose(r, expected) for r in results)
