#!/usr/bin/env python3
"""ONNX models on Tessera's CPU against ONNX Runtime's CPU execution provider, same machine, same
thread count, interleaved rounds (docs/performance.md, "ONNX models against ONNX Runtime").

    python3 benchmarks/onnx/bench_onnx_vs_ort.py --tessera build/release/bin/tessera [--out DIR]
        [--repeat 20] [--rounds 3] [--threads 2] [--models resnet50,bert_base,...] [--json FILE]

Models: the nine light CNNs of the onnx wheel (backend/test/data/light, converted to opset 13;
their batch dim is made symbolic so batch 8 runs too) and BERT-base- and GPT-2-small-shaped models
(12 layers, hidden 768, 12 heads, vocabulary 30522) that tools/onnx/make_transformers.py exports
with torch.onnx (written to --out, not committed), at batch 1 and 8 (sequence 128 for the
transformers). Tessera runs each model through `tessera run --repeat N --json`
(import once, N timed runs, median); ONNX Runtime through an InferenceSession with
intra_op_num_threads = --threads, the median of N runs. Each (model, batch) takes the best median
of --rounds interleaved rounds on each side. The ratio is ONNX Runtime time / Tessera time: above
1 Tessera is faster. Prints a markdown table; --json writes the rows.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx


def light_models():
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {f[len("light_"):-len(".onnx")]: os.path.join(data, f) for f in sorted(os.listdir(data)) if f.endswith(".onnx")}


def with_symbolic_batch(path, out_dir):
    """The model converted to opset 13 (the light CNNs are opset 9, below the importer's 11; both sides
    run the converted model) with dim 0 of its inputs and outputs named 'batch' and a leading 1 of a
    constant Reshape target made -1, so that both runtimes take any batch."""
    from onnx import numpy_helper, version_converter
    m = onnx.load(path)
    if any(o.domain in ("", "ai.onnx") and o.version < 13 for o in m.opset_import):
        m = version_converter.convert_version(m, 13)
    init_by_name = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:  # Constant nodes' values count as initializers here
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            init_by_name[n.output[0]] = n.attribute[0].t
    for n in m.graph.node:
        if n.op_type == "Reshape" and len(n.input) > 1 and n.input[1] in init_by_name:
            t = init_by_name[n.input[1]]
            shape = numpy_helper.to_array(t).copy()
            if shape.size and shape[0] == 1 and -1 not in shape:
                shape[0] = -1
                t.CopyFrom(numpy_helper.from_array(shape.astype(np.int64), t.name))
    inits = {t.name for t in m.graph.initializer}
    for v in list(m.graph.input) + list(m.graph.output):
        if v.name in inits or not v.type.tensor_type.shape.dim:
            continue
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    out = os.path.join(out_dir, os.path.basename(path))
    onnx.save(m, out)
    return out


def feeds_for(model_path, batch, seq):
    m = onnx.load(model_path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for v in m.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = []
        for i, d in enumerate(t.shape.dim):
            if d.HasField("dim_value"):
                shape.append(d.dim_value if i else batch)
            else:
                shape.append(batch if i == 0 else seq)
        if t.elem_type == onnx.TensorProto.INT64:
            arr = (np.ones(shape, np.int64) if "mask" in v.name else rng.integers(0, 100, shape)).astype(np.int64)
        else:
            arr = rng.random(shape, dtype=np.float32)
        feeds[v.name] = arr
    return feeds


def time_ort(model_path, feeds, repeat, threads):
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.log_severity_level = 3
    # ONNX Runtime's pool threads spin after a run by default; left spinning they would take the cores
    # from the Tessera process timed next. Spinning stays on while ONNX Runtime is timed (its default
    # configuration), and the session is gone before Tessera runs.
    s = ort.InferenceSession(model_path, o, providers=["CPUExecutionProvider"])
    s.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        s.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    del s
    gc.collect()
    time.sleep(0.5)
    return statistics.median(times)


def time_tessera(tessera, model_path, feeds, repeat, tmp, compile=False):
    args = [tessera, "run", model_path, "--device", "cpu", "--repeat", str(repeat), "--json", "--output",
            os.path.join(tmp, "out.npz")] + (["--compile"] if compile else [])
    for name, arr in feeds.items():
        f = os.path.join(tmp, f"in_{len(args)}.npy")
        np.save(f, arr)
        args += ["--input", f"{name}={f}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1] if (r.stderr or r.stdout).strip() else "failed")
    line = [l for l in r.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["median_ms"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tessera", required=True)
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "tessera_onnx_bench"))
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", default="")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--json", default="")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    models = {k: with_symbolic_batch(v, a.out) for k, v in light_models().items()}
    here = os.path.dirname(os.path.abspath(__file__))
    make = os.path.join(here, "..", "..", "tools", "onnx", "make_transformers.py")
    base = {"bert_base": os.path.join(a.out, "bert.onnx"), "gpt2_base": os.path.join(a.out, "gpt2.onnx")}
    wanted = [m for m in a.models.split(",") if m]
    if (not wanted or any(m in base for m in wanted)) and not all(os.path.exists(f) for f in base.values()):
        subprocess.run([sys.executable, make, a.out, "--layers", "12", "--hidden", "768", "--heads", "12", "--vocab",
                        "30522", "--max-pos", "512"], check=True, capture_output=True)
    models.update(base)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models.items():
            if wanted and name not in wanted:
                continue
            for batch in [int(b) for b in a.batches.split(",")]:
                feeds = feeds_for(path, batch, a.seq)
                row = {"model": name, "batch": batch}
                try:
                    ort_ms, tsr_ms, cmp_ms = [], [], []
                    for _ in range(a.rounds):
                        ort_ms.append(time_ort(path, feeds, a.repeat, a.threads))
                        tsr_ms.append(time_tessera(a.tessera, path, feeds, a.repeat, tmp))
                        try:
                            cmp_ms.append(time_tessera(a.tessera, path, feeds, a.repeat, tmp, compile=True))
                        except Exception as e:  # noqa: BLE001 (the interpreter's row still counts)
                            row["compile_error"] = str(e)[:160]
                    row.update(ort_ms=min(ort_ms), tessera_ms=min(tsr_ms), ratio=min(ort_ms) / min(tsr_ms))
                    if cmp_ms:
                        row.update(compiled_ms=min(cmp_ms), compiled_ratio=min(ort_ms) / min(cmp_ms))
                except Exception as e:  # noqa: BLE001 (reported in the table)
                    row["error"] = str(e)[:200]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    print("| model | batch | ONNX Runtime ms | Tessera ms | ratio | Tessera compiled ms | ratio compiled |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['batch']} | | | not run: {r['error']} | | |")
            continue
        compiled = (f"{r['compiled_ms']:.2f} | {r['compiled_ratio']:.2f}" if "compiled_ms" in r
                    else f"| not compiled: {r.get('compile_error', '')}")
        print(f"| {r['model']} | {r['batch']} | {r['ort_ms']:.2f} | {r['tessera_ms']:.2f} | {r['ratio']:.2f} | {compiled} |")
    for key in ("ratio", "compiled_ratio"):
        ratios = [r[key] for r in rows if key in r]
        if ratios:
            print(f"\n{key}: median {statistics.median(ratios):.2f}, lowest {min(ratios):.2f} over {len(ratios)} rows")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
