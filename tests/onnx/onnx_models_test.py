#!/usr/bin/env python3
"""ONNX models (tools/onnx/test_models.py) imported and run through `tessera run`, compared with ONNX
Runtime (the reference), on every device; dynamic models at two sizes; the imported program saved as
.tsr and run again in a fresh process; and the importer's one-line errors on broken models.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "onnx"))
import test_models  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
# Ops a device does not implement and whose plugin forbids the CPU fallback: the run must fail with
# the dispatcher's "no kernel" error naming the op.
UNSUPPORTED = {("my_hardware_device", "cnn"): "conv2d", ("my_hardware_device", "conv_pads"): "conv2d",
               ("my_hardware_device", "conv_bn"): "conv2d"}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def compare(name, expected, got, failures):
    for key, ref in expected.items():
        if key not in got:
            failures.append(f"{name}: output '{key}' missing (have {sorted(got)})")
            continue
        t = got[key]
        if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
            ok = t.shape == ref.shape and np.array_equal(t.astype(ref.dtype), ref)
        else:
            ok = t.shape == ref.shape and np.allclose(t, ref, rtol=RTOL, atol=ATOL)
        if not ok:
            diff = np.abs(t.astype(np.float64) - ref).max() if t.shape == ref.shape else "-"
            failures.append(f"{name}: output '{key}' differs from ONNX Runtime (shape {t.shape} vs {ref.shape}, max diff {diff})")


def run_models(args, tmp, failures):
    rng = np.random.default_rng(5)
    count = exports = 0
    for name, build, bindings in test_models.MODELS:
        m = build()
        path = os.path.join(tmp, f"{name}.onnx")
        onnx.save(m, path)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        out_names = [o.name for o in m.graph.output]
        r = run([args.tessera, "graph", path])
        if r.returncode != 0:
            failures.append(f"{name}: tessera graph failed: {r.stderr.strip()}")
            continue
        for k, binding in enumerate(bindings):
            feeds = test_models.random_inputs(m, binding, rng)
            expected = dict(zip(out_names, sess.run(out_names, feeds)))
            ins = []
            for key, x in feeds.items():
                f = os.path.join(tmp, f"{name}_{k}_{key}.npy")
                np.save(f, x)
                ins += ["--input", f"{key}={f}"]
            for device in args.devices.split(","):
                out = os.path.join(tmp, f"{name}_{k}_{device}.npz")
                tsr = os.path.join(tmp, f"{name}.tsr")
                extra = ["--save", tsr] if device == "cpu" and k == 0 else []
                r = run([args.tessera, "run", path, "--device", device, "--output", out] + ins + extra)
                missing = UNSUPPORTED.get((device, name))
                if missing:
                    if r.returncode == 0 or f"no kernel for '{missing}'" not in r.stderr:
                        failures.append(f"{name} on {device}: expected the 'no kernel for {missing}' error, got {r.stderr.strip()}")
                    continue
                if r.returncode != 0:
                    failures.append(f"{name} {binding} on {device}: {r.stderr.strip()}")
                    continue
                got = dict(np.load(out))
                compare(f"{name} {binding} on {device}", expected, got, failures)
                count += 1
            # The imported program exported again as ONNX runs in ONNX Runtime with the same results.
            exported = os.path.join(tmp, f"{name}.export.onnx")
            r = run([args.tessera, "run", path, "--save", exported])
            if r.returncode != 0:
                failures.append(f"{name}: export failed: {r.stderr.strip()}")
            else:
                try:
                    sess2 = ort.InferenceSession(exported, so, providers=["CPUExecutionProvider"])
                    compare(f"{name} {binding} exported", expected, dict(zip(out_names, sess2.run(out_names, feeds))), failures)
                    exports += 1
                except Exception as e:  # noqa: BLE001 (ONNX Runtime's own errors)
                    failures.append(f"{name} {binding}: ONNX Runtime refused the exported model: {str(e).splitlines()[0]}")
            # The saved program, reloaded in a fresh process, gives the same results.
            out = os.path.join(tmp, f"{name}_{k}_tsr.npz")
            r = run([args.tessera, "run", os.path.join(tmp, f"{name}.tsr"), "--output", out] + ins)
            if r.returncode != 0:
                failures.append(f"{name} {binding} from .tsr: {r.stderr.strip()}")
            else:
                compare(f"{name} {binding} from .tsr", expected, dict(np.load(out)), failures)
    return count, exports


def run_transformers(args, tmp, failures):
    """The BERT- and GPT-2-shaped models of tests/onnx/data (tools/onnx/make_transformers.py, one
    layer, exported by torch.onnx's dynamo and TorchScript exporters): PyTorch's own outputs for the
    inputs stored with them, then ONNX Runtime's at other batch and sequence sizes (batch 1 among
    them), on every device; the saved .tsr in a fresh process."""
    data = os.path.join(os.path.dirname(__file__), "data")
    count = 0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for name in ["bert_dynamo", "bert_torchscript", "gpt2_dynamo", "gpt2_torchscript"]:
        path = os.path.join(data, f"{name}.onnx")
        io = dict(np.load(os.path.join(data, f"{name}_io.npz")))
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        in_names = [i.name for i in sess.get_inputs()]
        cases = [({k: io[k] for k in in_names}, io["output"], "PyTorch")]
        rng = np.random.default_rng(11)
        for b, s in [(1, 5), (3, 12)]:
            feeds = {"input_ids": rng.integers(0, 100, (b, s)).astype(np.int64)}
            if "attention_mask" in in_names:
                mask = np.ones((b, s), np.int64)
                mask[-1, s - 2:] = 0
                feeds["attention_mask"] = mask
            cases.append((feeds, sess.run(None, feeds)[0], "ONNX Runtime"))
        tsr = os.path.join(tmp, f"{name}.tsr")
        for k, (feeds, ref, who) in enumerate(cases):
            ins = []
            for key, x in feeds.items():
                f = os.path.join(tmp, f"{name}_{k}_{key}.npy")
                np.save(f, x)
                ins += ["--input", f"{key}={f}"]
            runs = [(device, path) for device in args.devices.split(",")] + [("cpu", tsr)]
            for device, model in runs:
                out = os.path.join(tmp, f"{name}_{k}_{device}.npz")
                extra = ["--save", tsr] if k == 0 and model == path and device == "cpu" else []
                r = run([args.tessera, "run", model, "--device", device, "--output", out] + ins + extra)
                label = f"{name} {feeds['input_ids'].shape} on {device}{' (.tsr)' if model == tsr else ''} vs {who}"
                if r.returncode != 0:
                    failures.append(f"{label}: {r.stderr.strip()}")
                    continue
                compare(label, {"output": ref}, dict(np.load(out)), failures)
                count += 1
    return count


def run_light_models(args, tmp, failures):
    """The nine CNNs the onnx wheel ships (backend/test/data/light: resnet50, densenet121, inception
    v1/v2, vgg19, squeezenet, shufflenet, alexnet, zfnet512; opset 9, imported as they are) on the
    CPU against ONNX Runtime."""
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    count = 0
    so = ort.SessionOptions()
    so.log_severity_level = 3
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".onnx"):
            continue
        path = os.path.join(folder, f)
        m = onnx.load(path)
        inits = {i.name for i in m.graph.initializer}
        inp = [i for i in m.graph.input if i.name not in inits][0]
        x = np.random.default_rng(3).random([d.dim_value for d in inp.type.tensor_type.shape.dim]).astype(np.float32)
        xf, out = os.path.join(tmp, "light_x.npy"), os.path.join(tmp, "light_out.npz")
        np.save(xf, x)
        r = run([args.tessera, "run", path, "--input", f"{inp.name}={xf}", "--output", out])
        if r.returncode != 0:
            failures.append(f"{f}: {r.stderr.strip()}")
            continue
        ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {inp.name: x})
        compare(f, dict(zip([o.name for o in m.graph.output], ref)), dict(np.load(out)), failures)
        count += 1
    if count != 9:
        failures.append(f"light models: {count} of 9 compared")
    return count


def expect_error(args, tmp, name, data, needles, failures):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    r = run([args.tessera, "graph", path])
    err = r.stderr.strip()
    if r.returncode == 0:
        failures.append(f"{name}: imported, expected an error naming {needles}")
    elif r.returncode < 0:
        failures.append(f"{name}: crashed with signal {-r.returncode}")
    elif not all(n in err for n in needles) or len(err.splitlines()) != 1:
        failures.append(f"{name}: error '{err}' is not one line naming {needles}")


def run_errors(args, tmp, failures):
    good = test_models.mlp().SerializeToString()
    expect_error(args, tmp, "truncated.onnx", good[: len(good) // 2], ["not a valid ONNX model"], failures)
    expect_error(args, tmp, "garbage.onnx", b"\xff" * 64, ["not a valid ONNX model"], failures)
    # An unknown op: the message names the node, the op type, the opset and near supported ops.
    m = test_models.model([h.make_node("Relu", ["x"], ["a"]), h.make_node("StringNormalizer", ["a"], ["y"], name="sn_7")],
                          [test_models.vi("x", [2, 3])], [test_models.vi("y", [2, 3])], opset=17)
    expect_error(args, tmp, "unknown_op.onnx", m.SerializeToString(),
                 ["'sn_7'", "StringNormalizer", "opset 17", "nearest supported: "], failures)
    # An attribute the converter does not handle is refused, not ignored.
    m = test_models.mlp()
    m.graph.node[2].attribute.append(h.make_attribute("slope", 0.5))
    expect_error(args, tmp, "unknown_attr.onnx", m.SerializeToString(), ["(Relu, opset 17)", "attribute 'slope' is not supported"], failures)
    # Hostile sizes: an initializer whose dims overflow int64, and one whose raw data is short.
    t = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[2**40, 2**40], raw_data=b"\0" * 16)
    m = test_models.model([h.make_node("Add", ["x", "w"], ["y"])], [test_models.vi("x", [2, 2])],
                          [test_models.vi("y", [2, 2])], [test_models.w("w", 2, 2)])
    m.graph.initializer[0].CopyFrom(t)
    expect_error(args, tmp, "hostile_dims.onnx", m.SerializeToString(), ["tensor 'w'", "overflow"], failures)
    m.graph.initializer[0].dims[:] = [4, 4]
    expect_error(args, tmp, "short_raw.onnx", m.SerializeToString(), ["tensor 'w'", "bytes of raw data"], failures)
    # External data: a location outside the model's folder is refused; inside it, it loads.
    ext = onnx.TensorProto(name="w", data_type=TP.FLOAT, dims=[2, 2], data_location=TP.EXTERNAL)
    ext.external_data.add(key="location", value="../outside.bin")
    m.graph.ClearField("initializer")
    m.graph.initializer.append(ext)
    expect_error(args, tmp, "escape.onnx", m.SerializeToString(), ["outside the model's folder"], failures)
    with open(os.path.join(tmp, "w.bin"), "wb") as f:
        f.write(b"pad!" + np.arange(4, dtype=np.float32).tobytes())
    ext.external_data[0].value = "w.bin"
    ext.external_data.add(key="offset", value="4")
    ext.external_data.add(key="length", value="16")
    m.graph.initializer[0].CopyFrom(ext)
    path = os.path.join(tmp, "external.onnx")
    onnx.save(m, path)
    x = np.ones((2, 2), np.float32)
    np.save(os.path.join(tmp, "ext_x.npy"), x)
    out = os.path.join(tmp, "ext.npz")
    r = run([args.tessera, "run", path, "--input", os.path.join(tmp, "ext_x.npy"), "--output", out])
    if r.returncode != 0:
        failures.append(f"external data: {r.stderr.strip()}")
    elif not np.allclose(np.load(out)["y"], x + np.arange(4, dtype=np.float32).reshape(2, 2)):
        failures.append("external data: wrong values")
    ext.external_data[1].value = "8"  # past the end of the file
    m.graph.initializer[0].CopyFrom(ext)
    expect_error(args, tmp, "ext_past_end.onnx", m.SerializeToString(), ["past the end"], failures)
    # An opset outside the supported range.
    m = test_models.mlp()
    m.opset_import[0].version = 99
    expect_error(args, tmp, "opset99.onnx", m.SerializeToString(), ["opset 99", "1 to 28"], failures)
    # An op whose older form (scales where newer opsets take roi) the converters do not read.
    m = test_models.model([h.make_node("Resize", ["x", "s"], ["y"], name="old_resize")],
                          [test_models.vi("x", [1, 1, 2, 2]), test_models.vi("s", [4])], [test_models.vi("y", [1, 1, 4, 4])], opset=10)
    expect_error(args, tmp, "resize_opset10.onnx", m.SerializeToString(),
                 ["'old_resize'", "(Resize, opset 10)", "opset 11 or newer"], failures)
    # Legacy forms (Note [Legacy opsets]) that cannot be upgraded are refused naming the node.
    m = test_models.model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn_train")],
                          [test_models.vi("x", [1, 2, 2, 2])] + [test_models.vi(n, [2]) for n in "sbmv"],
                          [test_models.vi("y", [1, 2, 2, 2])], opset=6)
    expect_error(args, tmp, "bn_opset6.onnx", m.SerializeToString(), ["'bn_train'", "opset 6", "training mode"], failures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--devices", default="cpu")
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        count, exports = run_models(args, tmp, failures)
        count += run_transformers(args, tmp, failures)
        count += run_light_models(args, tmp, failures)
        run_errors(args, tmp, failures)
    for f in failures:
        print("FAIL:", f)
    print(f"{count} model runs and {exports} exported models compared with ONNX Runtime; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
