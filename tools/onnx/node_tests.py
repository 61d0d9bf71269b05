#!/usr/bin/env python3
"""ONNX's own node tests (onnx.backend.test.case.node, ~1,900 cases: a model plus inputs and expected
outputs) run through the C++ importer with `tessera run`, compared with the expected outputs at the
case's tolerances (the ONNX runner's rtol 1e-3 / atol 1e-7 unless the case says otherwise).
Integer inputs of rank <= 1 (axes, shapes, k, pads given as inputs), Resize's scales and roi and
OneHot's depth (an output size) are bound at import with --bind (ImportOptions::constant_inputs), as a
compiler for static shapes takes them.

Each case ends as one of: pass; wrong (a result differs: a bug); refused (the importer or the
runtime said what is missing, in one line); input (the case feeds sequences/optionals/strings,
which Tessera's program inputs are not); known (a listed difference, or a bfloat16 result within
4 bfloat16 ulps where the case's tolerance is finer than bfloat16 can resolve). Prints a per-op table (markdown) and a summary; with
--max-wrong N exits non-zero when more than N cases give wrong results or crash, with --min-pass
N when fewer than N pass. ctest runs it as onnx.node_tests.

  python3 tools/onnx/node_tests.py --tessera build/release/bin/tessera [--filter conv] [--jobs 2]
"""
import argparse
import collections
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import numpy_helper as nh

warnings.filterwarnings("ignore")

# NumPy has no bfloat16; the onnx package's cases use ml_dtypes' (saved to .npy as 2-byte void, which
# `tessera run` reads and writes as bfloat16).
import ml_dtypes  # noqa: E402  (a dependency of the onnx package)
BF16 = np.dtype(ml_dtypes.bfloat16)


# Cases whose difference is understood and is not a bug, with the reason (like the conformance kit's
# expected-failure lists); they count as "known", not "wrong". Remove an entry once it passes.
KNOWN_DIFFERENCES = {
    "test_dft_inverse":
        "the expected output is a float32 FFT's: 10 of 200 elements are exactly 0 and hold up to 1.9e-7 of rounding "
        "there, above atol 1e-7 (NumPy's float64 ifft of the same input misses them the same way)",
    "test_dft_inverse_opset19":
        "as test_dft_inverse (the expected output's float32 FFT rounding at exact zeros exceeds atol 1e-7)",
    "test_attention_4d_causal_fp16_expanded":
        "float16 end to end: 3 elements 2 float16 ulps off (the NumPy reference rounds to float16 after every "
        "step; Tessera's float16 matmul and softmax accumulate in float32)",
}


# The model tests the onnx wheel ships (backend/test/data: pytorch-converted, pytorch-operator,
# simple; each a model.onnx and test_data_set_N/{input,output}_K.pb), compared at rtol 1e-3 /
# atol 1e-4. The light CNNs there are run against ONNX Runtime by tests/onnx/onnx_models_test.py.
MODEL_SUITES = ("pytorch-converted", "pytorch-operator", "simple")


class ModelCase:
    def __init__(self, suite, folder):
        self.suite, self.name = suite, suite + "/" + os.path.basename(folder)
        self.model = onnx.load(os.path.join(folder, "model.onnx"))
        self.rtol, self.atol = 1e-3, 1e-4
        self.data_sets = []

        def read(path):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            return t

        def numbered(ds, kind):
            files = [f for f in os.listdir(ds) if f.startswith(kind + "_") and f.endswith(".pb")]
            return [read(os.path.join(ds, f)) for f in sorted(files, key=lambda f: int(f[len(kind) + 1:-3]))]

        for ds in sorted(d for d in os.listdir(folder) if d.startswith("test_data_set_")):
            ds = os.path.join(folder, ds)
            self.data_sets.append((numbered(ds, "input"), numbered(ds, "output")))


def collect_model_cases(name_filter):
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    for suite in MODEL_SUITES:
        for name in sorted(os.listdir(os.path.join(root, suite))):
            if name_filter in suite + "/" + name:
                yield ModelCase(suite, os.path.join(root, suite, name))


def op_of(case):
    if isinstance(case, ModelCase):
        return "(model) " + case.suite
    types = [n.op_type for n in case.model.graph.node]
    return types[0] if len(set(types)) == 1 else (case.model.graph.node[-1].op_type if types else "?")


def run_case(tessera, case, tmp):
    folder = os.path.join(tmp, case.name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    onnx.save(case.model, path)
    inits = {i.name for i in case.model.graph.initializer}
    in_names = [i.name for i in case.model.graph.input if i.name not in inits]
    out_names = [o.name for o in case.model.graph.output]
    for k, (inputs, outputs) in enumerate(case.data_sets):
        try:  # some cases give TensorProtos
            inputs = [nh.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in inputs]
            outputs = [nh.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in outputs]
            # Scalars the case gives as NumPy scalars (np.float32(-1)) are 0-d tensors.
            inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
            outputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in outputs]
        except Exception:  # noqa: BLE001 (a type NumPy lacks)
            return "input", "a data type NumPy has no dtype for"
        if any(not isinstance(x, np.ndarray) or (x.dtype.kind in "OUSV" and x.dtype != BF16) or x.dtype.names
               for x in list(inputs) + list(outputs)):
            odd = [x for x in list(inputs) + list(outputs) if isinstance(x, np.ndarray) and x.dtype.kind == "V"]
            if odd:
                return "input", f"element type {odd[0].dtype} has no Tessera dtype"
            return "input", "sequence, optional or string data"
        args = []
        for name, x in zip(in_names, inputs):
            f = os.path.join(folder, f"in{k}_{len(args)}.npy")
            np.save(f, x)
            # Integer inputs of rank <= 1 are a node's parameters (axes, shapes, k, pads): bound at
            # import (ImportOptions::constant_inputs), as a compiler for static shapes takes them.
            bind = (x.dtype.kind in "iu" or name in ("scales", "roi", "depth")) and x.ndim <= 1 and x.size <= 64
            args += ["--bind" if bind else "--input", f"{name}={f}"]
        out = os.path.join(folder, f"out{k}.npz")
        try:
            r = subprocess.run([tessera, "run", path, "--output", out] + args, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "refused", "timed out"
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            return ("crash" if r.returncode < 0 else "refused"), (lines[-1] if lines else f"exit {r.returncode}")
        got = np.load(out)
        for name, ref in zip(out_names, outputs):
            if name not in got:
                return "wrong", f"output {name} missing"
            t = got[name]
            if t.dtype.kind == "V" and t.dtype.itemsize == 2:  # bfloat16 comes back as 2-byte void
                t = t.view(BF16)
            if t.shape != ref.shape:
                return "wrong", f"output {name}: shape {t.shape}, expected {ref.shape}"
            if ref.dtype.kind in "biu":
                if not np.array_equal(t.astype(ref.dtype), ref):
                    return "wrong", f"output {name}: values differ"
            else:
                try:
                    np.testing.assert_allclose(t.astype(np.float64), ref.astype(np.float64), rtol=case.rtol, atol=case.atol, equal_nan=True)
                except AssertionError:
                    diff = np.nanmax(np.abs(t.astype(np.float64) - ref.astype(np.float64))) if t.size else 0
                    if ref.dtype == BF16 and np.allclose(t.astype(np.float64), ref.astype(np.float64), rtol=2.0**-6,
                                                         atol=case.atol, equal_nan=True):
                        return "known", (f"output {name}: bfloat16 end to end, within 4 bfloat16 ulps (rtol 2^-6; max diff {diff:.3g}) "
                                         f"but not the case's rtol {case.rtol}, finer than bfloat16's 2^-8 resolution: "
                                         "the reference rounds to bfloat16 after other steps than Tessera's kernels")
                    return "wrong", f"output {name}: max diff {diff:.3g} (rtol {case.rtol}, atol {case.atol})"
    return "pass", ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--filter", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--max-wrong", type=int, default=-1)
    ap.add_argument("--min-pass", type=int, default=0, help="fail when fewer cases pass (a regression)")
    ap.add_argument("--min-model-pass", type=int, default=0, help="fail when fewer model tests pass")
    ap.add_argument("--details", action="store_true", help="print every non-passing case")
    args = ap.parse_args()
    from onnx.backend.test.case.node import collect_testcases
    cases = [c for c in collect_testcases(None) if args.filter in c.name] + list(collect_model_cases(args.filter))
    results = {}
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_case, args.tessera, c, tmp): c for c in cases}
        for f in concurrent.futures.as_completed(futures):
            case = futures[f]
            status, why = f.result()
            if status == "wrong" and case.name in KNOWN_DIFFERENCES:
                status, why = "known", KNOWN_DIFFERENCES[case.name] + " (" + why + ")"
            results[case.name] = (op_of(case), status, why)
    per_op = collections.defaultdict(collections.Counter)
    for name, (op, status, why) in sorted(results.items()):
        per_op[op][status] += 1
        if args.details and status != "pass":
            print(f"{status:8} {name}: {why}")
    models = collections.Counter(status for name, (_, status, _) in results.items() if "/" in name)
    total = collections.Counter(status for name, (_, status, _) in results.items() if "/" not in name)
    print("| op | pass | wrong | known | refused | input |")
    print("|---|---|---|---|---|---|")
    for op in sorted(per_op):
        c = per_op[op]
        print(f"| {op} | {c['pass']} | {c['wrong'] + c['crash']} | {c['known']} | {c['refused']} | {c['input']} |")
    print(f"\n{sum(models.values())} model tests: {models['pass']} pass, {models['wrong']} wrong, {models['crash']} crashed, "
          f"{models['refused']} refused, {models['input']} with inputs Tessera does not take")
    print(f"{sum(total.values())} cases: {total['pass']} pass, {total['wrong']} wrong, {total['crash']} crashed, "
          f"{total['known']} known differences, {total['refused']} refused, {total['input']} with inputs Tessera does not take")
    bad = total["wrong"] + total["crash"] + models["wrong"] + models["crash"]
    if args.max_wrong >= 0 and bad > args.max_wrong:
        print(f"FAIL: {bad} cases give wrong results or crash (at most {args.max_wrong} allowed)")
        return 1
    if total["pass"] < args.min_pass:
        print(f"FAIL: {total['pass']} cases pass, fewer than {args.min_pass}")
        return 1
    if models["pass"] < args.min_model_pass:
        print(f"FAIL: {models['pass']} model tests pass, fewer than {args.min_model_pass}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
