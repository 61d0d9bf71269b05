#!/usr/bin/env python3
"""Converters decomposed at import (pooling variants, 3-D Conv, ConvTranspose, DeformConv, RoiAlign,
DFT, QuantizeLinear, ConvInteger, QLinearConv, MatMulInteger, Det, MelWeightMatrix) on
configurations ONNX's node tests do not reach (asymmetric pads, ceil_mode with pads and dilations,
3-D windows, groups, dynamic batch, partly outside boxes, cut and padded DFT lengths, ties in
rounding, run-time edge frequencies), run with `tessera run` against
onnx.reference, seeded. Each case must pass; a refusal or a difference fails the run. ctest runs it
as onnx.nn_random.

  python3 tools/onnx/nn_random_tests.py --tessera build/release/bin/tessera
"""
import argparse
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

warnings.filterwarnings("ignore")
rng = np.random.default_rng(27)


def model(op, inputs, attrs, inits=(), outputs=("y",), opset=22):
    node = h.make_node(op, [name for name, _ in inputs] + [i.name for i in inits], list(outputs), **attrs)
    ins = [h.make_tensor_value_info(name, elem, shape) for name, (elem, shape) in inputs]
    outs = [h.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outputs]
    return h.make_model(h.make_graph([node], "g", ins, outs, initializer=list(inits)),
                        opset_imports=[h.make_opsetid("", opset)])


def check(args, tmp, name, m, feeds, ref=None, atol=1e-5):
    """Runs m on feeds through tessera and compares every output with the reference's."""
    ref = ref if ref is not None else ReferenceEvaluator(m).run(None, feeds)
    folder = os.path.join(tmp, name)
    os.makedirs(folder, exist_ok=True)
    onnx.save(m, os.path.join(folder, "model.onnx"))
    cmd = [args.tessera, "run", os.path.join(folder, "model.onnx"), "--output", os.path.join(folder, "out.npz")]
    for k, v in feeds.items():
        np.save(os.path.join(folder, k + ".npy"), v)
        cmd += ["--input", f"{k}={os.path.join(folder, k + '.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"{name}: refused or failed: {(r.stderr.strip().splitlines() or ['exit ' + str(r.returncode)])[-1]}"
    got = np.load(os.path.join(folder, "out.npz"))
    for o, want in zip(m.graph.output, ref):
        y = got[o.name]
        if y.shape != want.shape or y.dtype != want.dtype:
            return f"{name}: output {o.name} is {y.dtype}{list(y.shape)}, expected {want.dtype}{list(want.shape)}"
        if not np.allclose(y.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=atol, equal_nan=True):
            return f"{name}: output {o.name} differs by {np.abs(y.astype(np.float64) - want).max():.3g}"
    return None


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def pooling_cases():
    for op in ["MaxPool", "AveragePool", "LpPool"]:
        yield op + "_ceil_pads", op, [1, 2, 7, 8], dict(kernel_shape=[3, 2], strides=[2, 3], pads=[1, 0, 0, 1], ceil_mode=1)
        yield op + "_ceil_dilated", op, [1, 2, 9, 8], dict(kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1],
                                                             pads=[1, 1, 1, 1], ceil_mode=1)
        yield op + "_3d_pads", op, [1, 2, 5, 6, 7], dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1])
        yield op + "_3d_ceil", op, [1, 1, 6, 6, 7], dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                                                         pads=[1, 0, 1, 1, 0, 1], ceil_mode=1)
        yield op + "_1d_ceil", op, [2, 3, 10], dict(kernel_shape=[3], strides=[2], pads=[1, 2], ceil_mode=1)
        yield op + "_big_pads", op, [1, 2, 5, 5], dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2])
    yield "avg_counted_ceil", "AveragePool", [1, 2, 7, 8], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                                 ceil_mode=1, count_include_pad=1)
    yield "avg_dilated_pads", "AveragePool", [1, 2, 9, 9], dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 2, 0, 1])
    yield "lp_p1", "LpPool", [1, 2, 6, 6], dict(kernel_shape=[3, 3], p=1, pads=[1, 1, 1, 1])
    yield "lp_3d_dilated", "LpPool", [1, 2, 6, 6, 6], dict(kernel_shape=[2, 2, 2], p=3, dilations=[2, 1, 2])


def run_pooling(args, tmp, failures):
    for name, op, shape, attrs in pooling_cases():
        m = model(op, [("x", (TP.FLOAT, shape))], attrs)
        failures.append(check(args, tmp, name, m, {"x": randn(*shape)}))
    for name, shape, attrs in [("indices_pads", [2, 3, 6, 7], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                               ("indices_dilated_ceil", [2, 3, 8, 7], dict(kernel_shape=[2, 2], strides=[2, 2],
                                                                             dilations=[2, 1], ceil_mode=1)),
                               ("indices_column_major", [2, 3, 6, 7], dict(kernel_shape=[2, 3], strides=[2, 1], storage_order=1)),
                               ("indices_1d", [2, 3, 9], dict(kernel_shape=[3], strides=[2], pads=[1, 1]))]:
        m = model("MaxPool", [("x", (TP.FLOAT, shape))], attrs, outputs=("y", "i"))
        failures.append(check(args, tmp, "maxpool_" + name, m, {"x": randn(*shape)}))
    x = rng.integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)
    m = model("MaxPool", [("x", (TP.UINT8, [1, 2, 6, 6]))], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 2]))
    failures.append(check(args, tmp, "maxpool_uint8_pads", m, {"x": x}))
    # A dynamic batch and spatial size: counted pads need no static size.
    m = model("AveragePool", [("x", (TP.FLOAT, ["N", 2, "H", "W"]))], dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                                           count_include_pad=1))
    for shape in [(1, 2, 6, 6), (2, 2, 9, 7)]:
        failures.append(check(args, tmp, f"avg_dynamic_{shape[0]}", m, {"x": randn(*shape)}))


def group_reference(m_attrs, x, w, b, op="ConvTranspose"):
    """onnx.reference's grouped ConvTranspose mixes up channels: one group at a time, concatenated."""
    g = m_attrs.get("group", 1)
    attrs = {k: v for k, v in m_attrs.items() if k != "group"}
    parts = []
    cin, mout = x.shape[1] // g, w.shape[1]
    for i in range(g):
        feeds = {"x": x[:, i * cin:(i + 1) * cin], "w": w[i * cin:(i + 1) * cin], "b": b[i * mout:(i + 1) * mout]}
        m = model(op, [(k, (TP.FLOAT, list(v.shape))) for k, v in feeds.items()], attrs)
        parts.append(ReferenceEvaluator(m).run(None, feeds)[0])
    return [np.concatenate(parts, 1)]


def run_conv_transpose(args, tmp, failures):
    cases = [("asym_2d", [1, 2, 4, 5], [2, 3, 3, 3], dict(pads=[1, 0, 2, 1], strides=[2, 2])),
             ("asym_1d", [2, 2, 5], [2, 3, 3], dict(pads=[2, 1], strides=[3], dilations=[2])),
             ("sym_1d", [2, 2, 5], [2, 3, 3], dict(pads=[1, 1], strides=[2], output_padding=[1])),
             ("same_lower", [1, 2, 4, 5], [2, 3, 3, 2], dict(auto_pad="SAME_LOWER", strides=[2, 3])),
             ("same_upper_output_padding", [1, 2, 4, 5], [2, 3, 4, 4], dict(auto_pad="SAME_UPPER", strides=[2, 2],
                                                                           output_padding=[1, 0])),
             ("output_shape_smaller", [1, 2, 4, 5], [2, 3, 3, 3], dict(output_shape=[8, 9], strides=[2, 2], pads=[1, 1, 1, 1])),
             ("output_shape_larger", [1, 2, 4, 5], [2, 3, 3, 3], dict(output_shape=[10, 11], strides=[2, 2])),
             ("plain_3d", [1, 2, 3, 3, 3], [2, 2, 3, 3, 3], dict(strides=[3, 2, 1])),
             ("output_padding_3d", [1, 2, 3, 3, 3], [2, 2, 2, 2, 2], dict(strides=[2, 2, 2], output_padding=[1, 1, 0])),
             ("groups_3d", [2, 4, 3, 4, 3], [4, 2, 2, 3, 2], dict(group=2, strides=[2, 1, 2], dilations=[2, 1, 1],
                                                                 pads=[1, 0, 1, 0, 1, 1])),
             ("groups_2d_asym", [1, 4, 4, 4], [4, 2, 3, 3], dict(group=2, pads=[0, 1, 1, 0], dilations=[2, 1]))]
    for name, xs, ws, attrs in cases:
        x, w = randn(*xs), randn(*ws)
        b = randn(ws[1] * attrs.get("group", 1))
        m = model("ConvTranspose", [("x", (TP.FLOAT, xs)), ("w", (TP.FLOAT, ws)), ("b", (TP.FLOAT, [len(b)]))], attrs)
        ref = group_reference(attrs, x, w, b) if attrs.get("group", 1) > 1 else None
        failures.append(check(args, tmp, "convtranspose_" + name, m, {"x": x, "w": w, "b": b}, ref, atol=1e-4))
    m = model("ConvTranspose", [("x", (TP.FLOAT, ["N", 2, 3, 4, 3])), ("w", (TP.FLOAT, [2, 2, 2, 3, 2]))],
              dict(strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1]))
    for n in [1, 3]:
        failures.append(check(args, tmp, f"convtranspose_dynamic_{n}", m, {"x": randn(n, 2, 3, 4, 3), "w": randn(2, 2, 2, 3, 2)},
                              atol=1e-4))


def run_conv3d(args, tmp, failures):
    for name, xs, ws, attrs in [("groups_pads", [2, 4, 5, 6, 5], [6, 2, 2, 3, 2], dict(group=2, pads=[1, 0, 1, 0, 2, 1],
                                                                                       strides=[2, 1, 2], dilations=[1, 2, 1])),
                                ("same_upper", [1, 3, 4, 5, 6], [2, 3, 3, 3, 3], dict(auto_pad="SAME_UPPER", strides=[2, 2, 1]))]:
        feeds = {"x": randn(*xs), "w": randn(*ws), "b": randn(ws[0])}
        m = model("Conv", [(k, (TP.FLOAT, list(v.shape))) for k, v in feeds.items()], attrs)
        failures.append(check(args, tmp, "conv3d_" + name, m, feeds, atol=1e-4))
    m = model("Conv", [("x", (TP.FLOAT, ["N", 2, 4, 4, 4])), ("w", (TP.FLOAT, [3, 2, 2, 2, 2]))], dict(pads=[1, 1, 1, 1, 1, 1]))
    for n in [1, 2]:
        failures.append(check(args, tmp, f"conv3d_dynamic_{n}", m, {"x": randn(n, 2, 4, 4, 4), "w": randn(3, 2, 2, 2, 2)}, atol=1e-4))


def run_deform_conv(args, tmp, failures):
    for name, (n, ch, hh, ww, oc, k), attrs, extra in [
            ("groups_mask_bias", (2, 4, 5, 6, 6, [3, 2]), dict(group=2, offset_group=2, strides=[2, 1], dilations=[1, 2],
                                                               pads=[1, 0, 1, 2]), True),
            ("offset_groups", (1, 4, 6, 5, 2, [2, 2]), dict(offset_group=4, pads=[1, 1, 0, 0]), False)]:
        g, og = attrs.get("group", 1), attrs.get("offset_group", 1)
        s, d, p = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]), attrs["pads"]
        oh = (hh + p[0] + p[2] - (k[0] - 1) * d[0] - 1) // s[0] + 1
        ow = (ww + p[1] + p[3] - (k[1] - 1) * d[1] - 1) // s[1] + 1
        feeds = {"x": randn(n, ch, hh, ww), "w": randn(oc, ch // g, *k), "o": randn(n, og * k[0] * k[1] * 2, oh, ow) * 1.5}
        if extra:
            feeds["b"] = randn(oc)
            feeds["m"] = rng.random((n, og * k[0] * k[1], oh, ow)).astype(np.float32)
        m = model("DeformConv", [(key, (TP.FLOAT, list(v.shape))) for key, v in feeds.items()], dict(kernel_shape=k, **attrs))
        failures.append(check(args, tmp, "deformconv_" + name, m, feeds, atol=1e-4))


def run_roi_align(args, tmp, failures):
    for name, attrs in [("avg_half_pixel", dict(output_height=3, output_width=4, sampling_ratio=3, spatial_scale=0.5)),
                        ("avg_output_half_pixel", dict(output_height=2, output_width=5, sampling_ratio=2,
                                                       coordinate_transformation_mode="output_half_pixel")),
                        ("max", dict(output_height=3, output_width=3, sampling_ratio=2, spatial_scale=0.75, mode="max"))]:
        rois = (rng.random((5, 4)) * 14 - 3).astype(np.float32)  # some partly outside the image
        rois[:, 2:] = rois[:, :2] + rng.random((5, 2)).astype(np.float32) * 8
        feeds = {"x": randn(2, 3, 7, 9), "rois": rois, "bi": np.array([0, 1, 1, 0, 1], np.int64)}
        m = model("RoiAlign", [("x", (TP.FLOAT, [2, 3, 7, 9])), ("rois", (TP.FLOAT, [5, 4])), ("bi", (TP.INT64, [5]))], attrs)
        failures.append(check(args, tmp, "roialign_" + name, m, feeds))


def run_dft(args, tmp, failures):
    def const(name, v):
        return onnx.numpy_helper.from_array(np.array(v, np.int64), name)
    for name, shape, attrs, length, axis in [("complex_padded", [2, 7, 3, 2], {}, 9, 1),
                                             ("complex_cut", [2, 7, 3, 2], {}, 5, -3),
                                             ("real_onesided", [2, 3, 9, 1], dict(onesided=1), None, 2),
                                             ("inverse_complex", [2, 6, 3, 2], dict(inverse=1), 8, 1),
                                             ("irfft_odd", [2, 5, 3, 2], dict(inverse=1, onesided=1), 9, 1),
                                             ("irfft_default_length", [1, 5, 2], dict(inverse=1, onesided=1), None, 1)]:
        inits = [const("len", length) if length is not None else None, const("axis", axis)]
        node = h.make_node("DFT", ["x", "len" if length is not None else "", "axis"], ["y"], **attrs)
        g = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, shape)],
                         [h.make_tensor_value_info("y", TP.UNDEFINED, None)], initializer=[i for i in inits if i is not None])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
        failures.append(check(args, tmp, "dft_" + name, m, {"x": randn(*shape)}, atol=1e-4))


def run_quantize(args, tmp, failures):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, -3.2, 7.49], np.float32)  # ties round to even
    for elem, zp in [(TP.INT8, np.int8(3)), (TP.UINT8, np.uint8(100)), (TP.INT16, np.int16(-7))]:
        inits = [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s"), onnx.numpy_helper.from_array(np.array(zp), "z")]
        nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"])]
        g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [9])],
                         [h.make_tensor_value_info("q", elem, None), h.make_tensor_value_info("d", TP.FLOAT, None)],
                         initializer=inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
        failures.append(check(args, tmp, f"quantize_{TP.DataType.Name(elem).lower()}", m, {"x": x}))


def run_det(args, tmp, failures):
    for n in range(1, 7):
        m = model("Det", [("x", (TP.FLOAT, [3, n, n]))], {})
        failures.append(check(args, tmp, f"det_{n}", m, {"x": randn(3, n, n)}, atol=1e-4))


def run_mel(args, tmp, failures):
    # The edges at run time: the bins are computed by tensor ops, then floored.
    for mels, dft, rate in [(5, 64, 8000), (13, 100, 16000), (19, 512, 44100)]:
        inits = [onnx.numpy_helper.from_array(np.array(v, np.int32), name) for name, v in [("m", mels), ("d", dft), ("s", rate)]]
        node = h.make_node("MelWeightMatrix", ["m", "d", "s", "lo", "hi"], ["y"])
        g = h.make_graph([node], "g", [h.make_tensor_value_info("lo", TP.FLOAT, []), h.make_tensor_value_info("hi", TP.FLOAT, [])],
                         [h.make_tensor_value_info("y", TP.UNDEFINED, None)], initializer=inits)
        feeds = {"lo": np.array(rng.uniform(0, 300), np.float32), "hi": np.array(rng.uniform(1000, rate / 2), np.float32)}
        failures.append(check(args, tmp, f"melweightmatrix_{mels}", h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), feeds))


def run_integer(args, tmp, failures):
    def const(name, v):
        return onnx.numpy_helper.from_array(np.asarray(v), name)
    x = rng.integers(0, 255, (2, 4, 6, 5)).astype(np.uint8)
    w = rng.integers(-128, 127, (6, 2, 3, 2)).astype(np.int8)
    attrs = dict(group=2, pads=[1, 0, 2, 1], strides=[2, 1])
    inits = [const("xz", np.uint8(131)), const("wz", rng.integers(-5, 5, 6).astype(np.int8))]
    node = h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.UINT8, x.shape), h.make_tensor_value_info("w", TP.INT8, w.shape)],
                     [h.make_tensor_value_info("y", TP.UNDEFINED, None)], initializer=inits)
    failures.append(check(args, tmp, "convinteger_groups_pads", h.make_model(g, opset_imports=[h.make_opsetid("", 22)]),
                          {"x": x, "w": w}))
    inits = [const("xs", np.float32(0.05)), const("xz", np.uint8(120)), const("ws", (rng.random(6) * 0.1).astype(np.float32)),
             const("wz", np.zeros(6, np.int8)), const("ys", np.float32(0.7)), const("yz", np.uint8(90)),
             const("b", rng.integers(-500, 500, 6).astype(np.int32))]
    node = h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.UINT8, x.shape), h.make_tensor_value_info("w", TP.INT8, w.shape)],
                     [h.make_tensor_value_info("y", TP.UNDEFINED, None)], initializer=inits)
    failures.append(check(args, tmp, "qlinearconv_per_channel", h.make_model(g, opset_imports=[h.make_opsetid("", 22)]),
                          {"x": x, "w": w}))
    a = rng.integers(0, 255, (2, 3, 5)).astype(np.uint8)
    b = rng.integers(-128, 127, (5, 4)).astype(np.int8)
    inits = [const("az", np.uint8(128)), const("bz", rng.integers(-3, 3, 4).astype(np.int8))]
    node = h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    g = h.make_graph([node], "g", [h.make_tensor_value_info("a", TP.UINT8, a.shape), h.make_tensor_value_info("b", TP.INT8, b.shape)],
                     [h.make_tensor_value_info("y", TP.UNDEFINED, None)], initializer=inits)
    failures.append(check(args, tmp, "matmulinteger_per_column", h.make_model(g, opset_imports=[h.make_opsetid("", 22)]),
                          {"a": a, "b": b}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", required=True)
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for fn in [run_pooling, run_conv_transpose, run_conv3d, run_deform_conv, run_roi_align, run_dft, run_quantize, run_integer, run_det, run_mel]:
            fn(args, tmp, failures)
    cases = len(failures)
    failures = [f for f in failures if f]
    for f in failures:
        print("FAIL:", f)
    print(f"{cases} cases: {cases - len(failures)} pass, {len(failures)} fail")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
