#!/usr/bin/env python3
"""PyTorch on the rows of bench_cuda and bench_sparse_cuda, timed the way they time Tessera.

    torch_rows.py OUT.json [--min-time S] [--device DEV] [--only TEXT]
                                            measure on DEV (default cuda:0) the rows whose name holds
                                            TEXT (default all), write {row: {"us": ..., "note": ...}}
    torch_rows.py --list                    print the row names (no torch import)
    torch_rows.py --self-test               two rows on the CPU (exit 77 without torch)

Each row is one op call followed by torch.cuda.synchronize(), repeated for at least --min-time
seconds after a warm-up call, as the benchmarks do (op + synchronize per iteration). Row names are
the benchmarks' names without Google Benchmark's suffixes (min_time, iterations, real_time); the
BM_SdpaSimt and BM_SdpaFlash rows are compared with the same PyTorch call as BM_Sdpa (gpu_table.py).
"""
import json
import sys
import time


def row_specs():
    """(name, kind, parameters) for every row, in the benchmarks' order."""
    rows = []
    for dt in ("f16", "bf16"):
        for n in (1024, 2048, 4096, 8192):
            rows.append((f"BM_Matmul/{dt}/{n}", "matmul", dict(dt=dt, n=n)))
        for seq in (1024, 4096):
            for d in (64, 128):
                rows.append((f"BM_Sdpa/{dt}/{seq}/{d}", "sdpa", dict(dt=dt, seq=seq, d=d)))
    for dt in ("f32", "f16"):
        n = 1 << 26
        rows.append((f"BM_Add/{dt}/{n}", "add", dict(dt=dt, n=n)))
        rows.append((f"BM_MulNumber/{dt}/{n}", "mul_number", dict(dt=dt, n=n)))
        for r, c in ((16384, 4096), (65536, 512)):
            rows.append((f"BM_Softmax/{dt}/{r}/{c}", "softmax", dict(dt=dt, r=r, c=c)))
    for dt in ("f16", "f32"):
        for op in ("max", "avg"):
            rows.append((f"BM_Pool2d/{op}/{dt}", "pool", dict(dt=dt, op=op)))
            rows.append((f"BM_Pool2dKernel/{op}/{dt}", "same_as", dict(row=f"BM_Pool2d/{op}/{dt}")))
    for dt in ("f16", "f32"):
        rows.append((f"BM_BatchNorm/{dt}", "norm", dict(dt=dt, batch=True)))
        rows.append((f"BM_BatchNormKernel/{dt}", "same_as", dict(row=f"BM_BatchNorm/{dt}")))
        rows.append((f"BM_LayerNorm/{dt}", "norm", dict(dt=dt, batch=False)))
    for transposed in (False, True):
        for pair in ("f32_f16", "f32_bf16", "f32_f32"):
            name = "BM_CopyTransposed" if transposed else "BM_Copy"
            rows.append((f"{name}/{pair}/8192", "copy", dict(pair=pair, n=8192, transposed=transposed)))
    for dt in ("f16", "bf16"):
        rows.append((f"BM_CompiledChain/{dt}/{1 << 24}", "compiled_chain", dict(dt=dt, n=1 << 24)))
        rows.append((f"BM_CompiledSoftmaxChain/{dt}", "compiled_rows", dict(dt=dt, kind="softmax")))
        rows.append((f"BM_CompiledNormChain/{dt}", "compiled_rows", dict(dt=dt, kind="norm")))
        rows.append((f"BM_CompiledBlock/{dt}", "compiled_block", dict(dt=dt)))
        rows.append((f"BM_CompiledBlockGraphs/{dt}", "compiled_block", dict(dt=dt, mode="reduce-overhead")))
    batches = (16, 64, 256, 1024, 4096)
    for dt in ("f16", "bf16"):
        for batch in batches:
            rows.append((f"BM_SparseLinear/{dt}/{batch}", "sparse_linear", dict(dt=dt, batch=batch)))
    # bench_sparse_cuda's rows with one sparse path forced compare with the same PyTorch call.
    for variant, dt in (("f16_cusparselt", "f16"), ("bf16_cusparselt", "bf16"), ("f16_kernel", "f16")):
        for batch in batches:
            rows.append((f"BM_SparseLinear/{variant}/{batch}", "same_as", dict(row=f"BM_SparseLinear/{dt}/{batch}")))
    return rows


def transformer_block(torch, F, dev, dt):
    """The block of benchmarks/cpu/transformer_block.h: seq 512, d_model 512, 8 heads, MLP 2048, causal."""
    seq, d, heads, mlp = 512, 512, 8, 2048
    g = torch.Generator(device="cpu").manual_seed(11)

    def weight(o, i):
        return (torch.randn(o, i, generator=g) / i ** 0.5).to(dev, dt)

    def vec(n, scale):
        return (torch.randn(n, generator=g) * scale).to(dev, dt)

    w = dict(ln1_w=(1 + 0.1 * torch.randn(d, generator=g)).to(dev, dt), ln1_b=vec(d, 0.1),
             wq=weight(d, d), bq=vec(d, 0.1), wk=weight(d, d), bk=vec(d, 0.1), wv=weight(d, d), bv=vec(d, 0.1),
             wo=weight(d, d), bo=vec(d, 0.1), ln2_w=(1 + 0.1 * torch.randn(d, generator=g)).to(dev, dt),
             ln2_b=vec(d, 0.1), w1=weight(mlp, d), b1=vec(mlp, 0.1), w2=weight(d, mlp), b2=vec(d, 0.1))

    def block(x):
        h = F.layer_norm(x, (d,), w["ln1_w"], w["ln1_b"])
        q, k, v = (F.linear(h, w["w" + n], w["b" + n]).view(1, seq, heads, d // heads).transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, seq, d)
        x1 = x + F.linear(a, w["wo"], w["bo"])
        h2 = F.layer_norm(x1, (d,), w["ln2_w"], w["ln2_b"])
        return x1 + F.linear(F.gelu(F.linear(h2, w["w1"], w["b1"])), w["w2"], w["b2"])

    return block, (torch.randn(1, seq, d, generator=g).to(dev, dt),)


def measure(out_path, min_time, dev, only):
    import torch
    import torch.nn.functional as F

    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    on_cuda = dev.startswith("cuda")

    def sync():
        if on_cuda:
            torch.cuda.synchronize()

    def per_call(fn):
        fn()
        sync()
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            sync()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time and n >= 3:
                return elapsed / n * 1e6

    def prune_2_4(w):  # keep the two largest of every four along the rows, as the benchmark's weight
        g = w.reshape(-1, 4)
        keep = g.abs().topk(2, dim=1).indices
        mask = torch.zeros_like(g, dtype=torch.bool).scatter_(1, keep, True)
        return (g * mask).reshape(w.shape)

    results = {}
    sparse_weights = {}
    for name, kind, p in row_specs():
        if only and only not in name:
            continue
        note = ""
        try:
            if kind == "matmul":
                a = torch.randn(p["n"], p["n"], device=dev, dtype=dtypes[p["dt"]])
                b = torch.randn(p["n"], p["n"], device=dev, dtype=dtypes[p["dt"]])
                us = per_call(lambda: a @ b)
            elif kind == "sdpa":
                q, k, v = (torch.randn(1, 16, p["seq"], p["d"], device=dev, dtype=dtypes[p["dt"]]) for _ in range(3))
                us = per_call(lambda: F.scaled_dot_product_attention(q, k, v))
            elif kind in ("add", "mul_number"):
                x = torch.randn(p["n"], device=dev, dtype=dtypes[p["dt"]])
                y = torch.randn(p["n"], device=dev, dtype=dtypes[p["dt"]])
                us = per_call((lambda: x + y) if kind == "add" else (lambda: x * 2.5))
            elif kind == "softmax":
                z = torch.randn(p["r"], p["c"], device=dev, dtype=dtypes[p["dt"]])
                us = per_call(lambda: torch.softmax(z, -1))
            elif kind == "pool":  # bench_cuda's BM_Pool2d: channels-last [32, 64, 112, 112]
                z = torch.randn(32, 64, 112, 112, device=dev, dtype=dtypes[p["dt"]]).to(
                    memory_format=torch.channels_last)
                if p["op"] == "max":
                    us = per_call(lambda: F.max_pool2d(z, 3, 2, 1))
                else:
                    us = per_call(lambda: F.avg_pool2d(z, 2, 2))
            elif kind == "norm":  # bench_cuda's BM_Norm
                dt = dtypes[p["dt"]]
                c = 64 if p["batch"] else 1024
                z = torch.randn(*((32, 64, 56, 56) if p["batch"] else (8192, 1024)), device=dev, dtype=dt)
                w, b, m = (torch.randn(c, device=dev, dtype=dt) for _ in range(3))
                v = torch.rand(c, device=dev, dtype=dt) + 0.5
                if p["batch"]:
                    us = per_call(lambda: F.batch_norm(z, m, v, w, b, False, 0.1, 1e-5))
                else:
                    us = per_call(lambda: F.layer_norm(z, (1024,), w, b))
            elif kind == "copy":
                src_dt, dst_dt = p["pair"].split("_")
                src = torch.randn(p["n"], p["n"], device=dev, dtype=dtypes[src_dt])
                dst = torch.empty(p["n"], p["n"], device=dev, dtype=dtypes[dst_dt])
                view = src.t() if p["transposed"] else src
                us = per_call(lambda: dst.copy_(view))
            elif kind == "sparse_linear":
                dt = dtypes[p["dt"]]
                if p["dt"] not in sparse_weights:
                    w = prune_2_4(torch.randn(4096, 4096, device=dev, dtype=dt))
                    try:
                        from torch.sparse import to_sparse_semi_structured
                        sparse_weights[p["dt"]] = (to_sparse_semi_structured(w), "PyTorch 2:4 (semi-structured)")
                    except Exception as e:  # no cuSPARSELt / CUTLASS kernel for this build or GPU
                        sparse_weights[p["dt"]] = (w, f"dense F.linear (2:4 refused: {type(e).__name__})")
                ws, note = sparse_weights[p["dt"]]
                x = torch.randn(p["batch"], 4096, device=dev, dtype=dt)
                try:
                    us = per_call(lambda: F.linear(x, ws))
                except Exception as e:
                    wd = ws.to_dense() if hasattr(ws, "to_dense") else ws
                    note = f"dense F.linear (2:4 linear refused: {type(e).__name__})"
                    us = per_call(lambda: F.linear(x, wd))
            elif kind in ("compiled_chain", "compiled_rows", "compiled_block"):
                # torch.compile (the row's mode, else the default) of the same function; eager when it
                # cannot compile here.
                dt = dtypes[p["dt"]]
                if kind == "compiled_chain":
                    cols = 4096
                    args = (torch.randn(p["n"] // cols, cols, device=dev, dtype=dt), torch.randn(cols, device=dev, dtype=dt),
                            torch.randn(p["n"] // cols, cols, device=dev, dtype=dt))
                    fn = lambda x, b, s: F.gelu(x * 1.702 + b) * s  # noqa: E731
                elif kind == "compiled_rows":  # bench_cuda's BM_CompiledRowChain: [8192, 1024]
                    args = (torch.randn(8192, 1024, device=dev, dtype=dt), torch.randn(8192, 1024, device=dev, dtype=dt),
                            torch.randn(1024, device=dev, dtype=dt), torch.randn(1024, device=dev, dtype=dt))
                    if p["kind"] == "softmax":
                        fn = lambda x, m, w, b: torch.softmax(x * 0.125 + m, -1)  # noqa: E731
                    else:
                        fn = lambda x, r, w, b: F.layer_norm(x + r, (1024,), w, b)  # noqa: E731
                else:
                    fn, args = transformer_block(torch, F, dev, dt)
                try:
                    mode = p.get("mode")
                    compiled = torch.compile(fn, mode=mode) if mode else torch.compile(fn)
                    for _ in range(3):  # reduce-overhead records its CUDA graph after warm-up calls
                        compiled(*args)
                    note = f"torch.compile(mode={mode!r})" if mode else "torch.compile"
                except Exception as e:
                    compiled, note = fn, f"eager (torch.compile failed: {type(e).__name__})"
                us = per_call(lambda: compiled(*args))
            elif kind == "same_as":
                if p["row"] not in results:
                    raise ValueError(f"{p['row']} was not measured in this run")
                us, note = results[p["row"]]["us"], f"as {p['row']}"
            else:
                raise ValueError(kind)
            results[name] = {"us": us, "note": note}
        except Exception as e:  # one row failing must not lose the others
            results[name] = {"us": None, "note": f"error: {type(e).__name__}: {e}"[:200]}
        if on_cuda:
            torch.cuda.empty_cache()
        print(f"{name:40s} {results[name]['us'] or float('nan'):12.2f} us {results[name]['note']}", flush=True)
    device = torch.cuda.get_device_name(torch.device(dev)) if on_cuda else dev
    results["_meta"] = {"torch": torch.__version__, "device": device, "min_time_s": min_time}
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


def self_test():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_rows self-test: no torch here (skipped)")
        return 77
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        for only in ("BM_Copy/f32_bf16/", "BM_SparseLinear/f16/16"):
            measure(out, 0.01, "cpu", only)
            rows = json.load(open(out))
            names = [n for n in rows if n != "_meta"]
            assert len(names) >= 1 and all(n.startswith(only.rstrip("/")) for n in names), names
            for n in names:
                assert isinstance(rows[n]["us"], float) and rows[n]["us"] > 0, (n, rows[n])
            assert rows["_meta"]["device"] == "cpu", rows["_meta"]
    print("torch_rows self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if argv[1:] == ["--list"]:
        for name, _, _ in row_specs():
            print(name)
        return 0
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    def option(flag, default):
        return argv[argv.index(flag) + 1] if flag in argv[:-1] else default

    measure(argv[1], float(option("--min-time", "0.2")), option("--device", "cuda:0"), option("--only", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
