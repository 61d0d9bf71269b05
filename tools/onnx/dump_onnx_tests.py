#!/usr/bin/env python3
"""Writes ONNX's own backend tests to a folder, in ONNX's test-data layout, for the C++ suite runner.

    python3 tools/onnx/dump_onnx_tests.py OUT_DIR

Every case becomes OUT_DIR/<suite>/<name>/ with model.onnx, test_data_set_0/input_<i>.pb and
output_<i>.pb (serialised TensorProto, the format ONNX's shipped tests use) and case.json:
{"name", "suite", "rtol", "atol", "op_types", "opset", "unsupported": reason or null}.

Suites:
  node      the cases onnx.backend.test.case.node generates (about 1,900 for onnx 1.23), with
            ONNX's tolerances (rtol 1e-3, atol 1e-7);
  converted the model tests the onnx wheel ships (pytorch-converted, pytorch-operator, simple);
  light     the nine CNNs of backend/test/data/light, with the input ONNX's runner makes
            (arange / n) and ONNX Runtime's outputs as the expected values (rtol 1e-3, atol 1e-4).
A case whose inputs or outputs are not tensors (sequences, optionals, maps) is written with
"unsupported" set, so the runner counts it as refused with that reason. OUT_DIR/STAMP holds the onnx
version: a folder already written for the same version is left as it is.
"""
import json
import os
import shutil
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper


def tensor_proto(value, name):
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    if isinstance(value, np.ndarray) or np.isscalar(value):
        return numpy_helper.from_array(np.asarray(value), name)
    return None


def op_types(model):
    types = set()
    for n in model.graph.node:
        types.add(n.op_type)
    for f in model.functions:
        for n in f.node:
            types.add(n.op_type)
    return sorted(types)


def opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


def write_case(folder, suite, name, model, inputs, outputs, rtol, atol, unsupported=None):
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    graph_outputs = [o.name for o in model.graph.output]
    for kind, values, names in (("input", inputs, graph_inputs), ("output", outputs, graph_outputs)):
        for i, v in enumerate(values):
            t = tensor_proto(v, names[i] if i < len(names) else f"{kind}_{i}")
            if t is None:
                unsupported = unsupported or f"{kind} {i} is a {type(v).__name__}, not a tensor"
                continue
            with open(os.path.join(folder, "test_data_set_0", f"{kind}_{i}.pb"), "wb") as f:
                f.write(t.SerializeToString())
    meta = {"name": name, "suite": suite, "rtol": rtol, "atol": atol, "op_types": op_types(model),
            "opset": opset(model), "unsupported": unsupported}
    with open(os.path.join(folder, "case.json"), "w") as f:
        json.dump(meta, f)


def dump_node(out):
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    for c in cases:
        inputs, outputs = c.data_sets[0]
        write_case(os.path.join(out, "node", c.name), "node", c.name, c.model, inputs, outputs,
                   c.rtol, c.atol)
    return len(cases)


def dump_converted(out, data):
    n = 0
    for sub in ("pytorch-converted", "pytorch-operator", "simple"):
        root = os.path.join(data, sub)
        for name in sorted(os.listdir(root)):
            src = os.path.join(root, name)
            if not os.path.exists(os.path.join(src, "model.onnx")):
                continue
            dst = os.path.join(out, "converted", name)
            shutil.copytree(src, dst, dirs_exist_ok=True)
            model = onnx.load(os.path.join(src, "model.onnx"))
            unsupported = None
            if not os.path.isdir(os.path.join(src, "test_data_set_0")):
                unsupported = "the case ships no test_data_set_0"
            elif any(f.endswith(".pb") is False for f in os.listdir(os.path.join(src, "test_data_set_0"))):
                unsupported = "the case's data is not TensorProto files"
            meta = {"name": name, "suite": "converted", "rtol": 1e-3, "atol": 1e-7,
                    "op_types": op_types(model), "opset": opset(model), "unsupported": unsupported}
            with open(os.path.join(dst, "case.json"), "w") as f:
                json.dump(meta, f)
            n += 1
    return n


def dump_light(out, data):
    import onnxruntime as ort
    n = 0
    for file in sorted(os.listdir(os.path.join(data, "light"))):
        if not file.endswith(".onnx"):
            continue
        name = file[len("light_"):-len(".onnx")]
        model = onnx.load(os.path.join(data, "light", file))
        inits = {t.name for t in model.graph.initializer}
        feeds = {}
        for x in model.graph.input:
            if x.name in inits:
                continue
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
            count = int(np.prod(shape))
            feeds[x.name] = (np.arange(count).reshape(shape) / count).astype(np.float32)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        outputs = session.run(None, feeds)
        write_case(os.path.join(out, "light", name), "light", name, model, list(feeds.values()), outputs,
                   1e-3, 1e-4)
        n += 1
    return n


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: dump_onnx_tests.py OUT_DIR")
    out = sys.argv[1]
    stamp = os.path.join(out, "STAMP")
    version = f"onnx {onnx.__version__} format 1"
    if os.path.exists(stamp) and open(stamp).read().strip() == version:
        print(f"{out}: already holds the tests of {version}")
        return
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    counts = {"node": dump_node(out), "converted": dump_converted(out, data), "light": dump_light(out, data)}
    with open(stamp, "w") as f:
        f.write(version + "\n")
    print(f"{out}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
