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
    op_time = long_op_seconds(a)
    done = threading.Event()
    ticks = []

    def worker():
        tessera.matmul(a, a)
        done.set()

    th = threading.Thread(target=worker)
    th.start()
    while not done.is_set():
        ticks.append(time.perf_counter())  # pure Python: runs only while the worker does not hold the GIL
    th.join()
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    # With the GIL held for the whole op, this loop would stall for about op_time at once.
    assert len(ticks) > 1000, (len(ticks), op_time)
    assert max(gaps) < op_time / 2, (max(gaps), op_time)


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
