#!/usr/bin/env python3
"""Resize, Upsample, GridSample, AffineGrid and Col2Im models made at random (fixed seeds) run through
`tessera run` and compared with onnx.reference's evaluator (Upsample, which the importer rewrites
into Resize: with ONNX Runtime, as onnx.reference refuses its non-integer scales). They reach what ONNX's node tests do not: dynamic batch dims,
integer and float16 inputs, every attribute mixed with every other, output sizes of 0.

A case passes, or is refused with one line when it asks for what the importer refuses (a dynamic dim
resized); a wrong result or a crash fails the run. The evaluator computes cubic weights in float32
(Note [Resize at import] in onnx/src/ops_resize.cpp), so cubic results are compared at rtol 1e-4 and
integer ones may differ by one there. ctest runs it as onnx.sampling.

  python3 tools/onnx/sampling_tests.py --tessera build/release/bin/tessera [--cases 150]
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh
from onnx.reference import ReferenceEvaluator

warnings.filterwarnings("ignore")
ONNX_TYPE = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.float64: TP.DOUBLE, np.uint8: TP.UINT8,
             np.int32: TP.INT32}


def model(node, inputs, inits, opset):
    g = h.make_graph([node], "g", inputs, [h.make_tensor_value_info(node.output[0], inputs[0].type.tensor_type.elem_type,
                                                                    None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 9 if opset > 8 else 7
    return m


def run(tessera, folder, m, feeds, ref, cubic=False):
    """'pass', 'refused <line>' or 'wrong <why>'."""
    os.makedirs(folder, exist_ok=True)
    onnx.save(m, os.path.join(folder, "m.onnx"))
    args = []
    for name, x in feeds.items():
        np.save(os.path.join(folder, name + ".npy"), x)
        args += ["--input", f"{name}={os.path.join(folder, name + '.npy')}"]
    out = os.path.join(folder, "out.npz")
    r = subprocess.run([tessera, "run", os.path.join(folder, "m.onnx"), "--output", out] + args, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines() or [f"exit {r.returncode}"]
        return ("crash " if r.returncode < 0 else "refused ") + lines[-1]
    got = np.load(out)[m.graph.output[0].name]
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return f"wrong: {got.dtype}{got.shape}, expected {ref.dtype}{ref.shape}"
    if ref.dtype.kind in "iu":
        ok = np.abs(got.astype(np.int64) - ref.astype(np.int64)).max(initial=0) <= (1 if cubic else 0)
    else:
        tol = 1e-2 if ref.dtype == np.float16 else 1e-4 if cubic else 1e-5
        ok = np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)
    return "pass" if ok else f"wrong: max diff {np.abs(got.astype(np.float64) - ref.astype(np.float64)).max():.3g}"


def resize_case(rng):
    rank = rng.choice([2, 3, 4])
    shape = [rng.randint(1, 6) for _ in range(rank)]
    dt = rng.choice([np.float32] * 4 + [np.float16, np.float64, np.uint8, np.int32])
    mode = rng.choice(["nearest", "linear", "cubic"])
    ctm = rng.choice(["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                      "tf_crop_and_resize"])
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = rng.choice(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    elif rng.random() < 0.4:
        attrs["antialias"] = 1
    if mode == "cubic" and rng.random() < 0.5:
        attrs["cubic_coeff_a"] = rng.choice([-0.5, -0.75])
    if rng.random() < 0.3:
        attrs["exclude_outside"] = 1
    if ctm == "tf_crop_and_resize" and rng.random() < 0.5:
        attrs["extrapolation_value"] = 10.0
    axes = list(range(rank))
    if rng.random() < 0.3:
        axes = rng.sample(range(rank), rng.randint(1, rank))
        attrs["axes"] = axes
    inputs, inits = ["X", "", "", ""], []
    if ctm == "tf_crop_and_resize":
        roi = [rng.uniform(-0.2, 0.5) for _ in axes] + [rng.uniform(0.5, 1.2) for _ in axes]
        inputs[1] = "roi"
        inits.append(nh.from_array(np.array(roi, np.float32), "roi"))
    if rng.random() < 0.5:
        inputs[2] = "scales"
        inits.append(nh.from_array(np.array([rng.choice([1.0, 0.3, 0.5, 0.6, 0.8, 1.5, 2.0, 2.3, 3.0]) for _ in axes],
                                            np.float32), "scales"))
    else:
        inputs[3] = "sizes"
        inits.append(nh.from_array(np.array([rng.randint(0 if rng.random() < 0.05 else 1, 9) for _ in axes], np.int64),
                                   "sizes"))
        if rng.random() < 0.3:
            attrs["keep_aspect_ratio_policy"] = rng.choice(["not_larger", "not_smaller"])
    while inputs[-1] == "":
        inputs.pop()
    dims = list(shape)
    if rank >= 3 and 0 not in axes and rng.random() < 0.3:
        dims[0] = "N"  # a dynamic batch the resize leaves alone
    x = (np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal(shape) * 50)
    x = np.clip(x, 0, 255).astype(dt) if dt == np.uint8 else x.astype(dt)
    m = model(h.make_node("Resize", inputs, ["Y"], **attrs), [h.make_tensor_value_info("X", ONNX_TYPE[dt], dims)], inits,
              19)
    return m, {"X": x}, mode == "cubic"


def grid_sample_case(rng):
    k = rng.choice([1, 2, 2, 3])
    n, c = rng.randint(1, 2), rng.randint(1, 2)
    dims, out = [rng.randint(1, 4) for _ in range(k)], [rng.randint(1, 4) for _ in range(k)]
    mode = rng.choice(["nearest", "linear", "cubic"] if k == 2 else ["nearest", "linear"])
    padding, align = rng.choice(["zeros", "border", "reflection"]), rng.randint(0, 1)
    if padding == "reflection" and align:
        dims = [max(2, d) for d in dims]
    gen = np.random.default_rng(rng.randint(0, 1 << 30))
    dt = np.int32 if mode == "nearest" and rng.random() < 0.3 else np.float32
    x = (gen.standard_normal([n, c] + dims) * 100).astype(dt)
    g = gen.uniform(-1.4, 1.4, [n] + out + [k]).astype(np.float32)
    if rng.random() < 0.3:
        g = (np.round(g * 4) / 4).astype(np.float32)  # on pixel centres and edges: rounding ties
    batch = "N" if rng.random() < 0.3 else n
    m = model(h.make_node("GridSample", ["X", "G"], ["Y"], mode=mode, padding_mode=padding, align_corners=align),
              [h.make_tensor_value_info("X", ONNX_TYPE[dt], [batch, c] + dims),
               h.make_tensor_value_info("G", TP.FLOAT, [batch] + out + [k])], [], 22)
    return m, {"X": x, "G": g}, False


def col2im_case(rng):
    nd = rng.choice([1, 2, 3])
    while True:
        image, block = [rng.randint(1, 6) for _ in range(nd)], [rng.randint(1, 3) for _ in range(nd)]
        dil, strides = [rng.randint(1, 2) for _ in range(nd)], [rng.randint(1, 2) for _ in range(nd)]
        pads = [rng.randint(0, 1) for _ in range(2 * nd)]
        blocks = [(image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
        if min(blocks) >= 1:
            break
    n, c = rng.randint(1, 2), rng.randint(1, 2)
    dt = rng.choice([np.float32, np.float32, np.int32])
    x = (np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal(
        (n, c * int(np.prod(block)), int(np.prod(blocks)))) * 10).astype(dt)
    m = model(h.make_node("Col2Im", ["X", "image", "block"], ["Y"], dilations=dil, strides=strides, pads=pads),
              [h.make_tensor_value_info("X", ONNX_TYPE[dt], ["N" if rng.random() < 0.3 else n] + list(x.shape[1:]))],
              [nh.from_array(np.array(image, np.int64), "image"), nh.from_array(np.array(block, np.int64), "block")], 18)
    return m, {"X": x}, False


def affine_grid_case(rng):
    k = rng.choice([2, 3])
    align = rng.randint(0, 1)
    size = [rng.randint(1, 3), rng.randint(1, 3)] + [rng.randint(1 + align, 5) for _ in range(k)]
    theta = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal((size[0], k, k + 1)).astype(np.float32)
    m = model(h.make_node("AffineGrid", ["theta", "size"], ["Y"], align_corners=align),
              [h.make_tensor_value_info("theta", TP.FLOAT, ["N" if rng.random() < 0.5 else size[0], k, k + 1])],
              [nh.from_array(np.array(size, np.int64), "size")], 20)
    return m, {"theta": theta}, False


def upsample_case(rng):
    mode = rng.choice(["nearest", "linear"])
    shape = [rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 4)]
    scales = [1.0, 1.0, rng.choice([1.0, 1.5, 2.0, 2.5, 3.0]), rng.choice([1.0, 1.3, 2.0, 3.0])]
    x = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal(shape).astype(np.float32)
    m = model(h.make_node("Upsample", ["X", "scales"], ["Y"], mode=mode),
              [h.make_tensor_value_info("X", TP.FLOAT, shape)], [nh.from_array(np.array(scales, np.float32), "scales")], 9)
    return m, {"X": x}, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--cases", type=int, default=150, help="Resize cases (GridSample and Col2Im: a third each)")
    args = ap.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    rng = random.Random(27)
    plan = ([("Resize", resize_case)] * args.cases + [("GridSample", grid_sample_case)] * (args.cases // 3) +
            [("Col2Im", col2im_case)] * (args.cases // 3) + [("AffineGrid", affine_grid_case)] * 10 +
            [("Upsample", upsample_case)] * (10 if ort else 0))
    counts, bad = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (op, make) in enumerate(plan):
            m, feeds, cubic = make(rng)
            if op == "Upsample":
                m.opset_import[0].version = 9
                path = os.path.join(tmp, f"ref{i}.onnx")
                onnx.save(m, path)
                ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            else:
                try:
                    ref = ReferenceEvaluator(m).run(None, feeds)[0]
                except Exception:  # noqa: BLE001 (a model the reference itself rejects)
                    continue
            result = run(args.tessera, os.path.join(tmp, str(i)), m, feeds, ref, cubic)
            kind = result.split(" ")[0].rstrip(":")
            counts[(op, kind)] = counts.get((op, kind), 0) + 1
            # A refusal may only name a dynamic dim, or the model's opset (a build that reads no opset 9).
            allowed = "the dynamic size" in result or "this importer reads opsets" in result
            if kind in ("wrong", "crash") or (kind == "refused" and not allowed):
                bad += 1
                print(f"{kind:8} {op} case {i}: {result}\n         {onnx.helper.printable_graph(m.graph)}")
    for op in dict.fromkeys(op for op, _ in plan):
        print(op + ": " + ", ".join(f"{n} {k}" for (o, k), n in sorted(counts.items()) if o == op))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
