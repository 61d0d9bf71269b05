"""tessera.onnx: import a model built with the onnx package, run it on the CPU and on the reference
accelerator, compile it, export it back; ONNX Runtime is the independent reference."""
import numpy as np
import pytest

import tessera

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tessera.onnx as tonnx  # noqa: E402


def mlp_model(rng, opset=17):
    """x[batch, 8] -> Gemm-like MatMul + Add -> Relu -> Reshape to [batch, 4, 4] -> Softmax."""
    w = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    shape = np.array([-1, 4, 4], dtype=np.int64)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["r3"]),
             helper.make_node("Softmax", ["r3"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 4])],
                              initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
                                           numpy_helper.from_array(shape, "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_import_from_a_model_bytes_and_a_path_runs_like_onnx_runtime(rng, tmp_path):
    model = mlp_model(rng)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    for source in (model, model.SerializeToString(), str(path), path):
        program = tonnx.import_model(source)
        assert isinstance(program, tessera.ExportedProgram)
        for batch in (1, 5):  # one program for every batch size (the dim_param is a symbol)
            x = rng.standard_normal((batch, 8)).astype(np.float32)
            got = program(tessera.from_numpy(x)).numpy()
            np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert "batch in [1, 65536]" in str(program)


def test_options_fix_dims_and_set_ranges(rng):
    model = mlp_model(rng)
    fixed = tonnx.import_model(model, fixed_dims={"batch": 3})
    assert "f32[3, 8]" in str(fixed)
    ranged = tonnx.import_model(model, ranges={"batch": (2, 64)})
    assert "batch in [2, 64]" in str(ranged)
    with pytest.raises(TypeError, match="pair of ints"):
        tonnx.import_model(model, ranges={"batch": 4})


def test_runs_on_the_reference_accelerator(rng, mhd):
    model = mlp_model(rng)
    program = tonnx.import_model(model, device="my_hardware_device")
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = program(tessera.from_numpy(x).my_hardware_device())
    assert y.is_my_hardware_device
    np.testing.assert_allclose(y.cpu().numpy(), ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_compile_an_imported_model(rng):
    model = mlp_model(rng)
    compiled = tessera.compile(tonnx.import_model(model))
    for batch in (2, 7):
        x = rng.standard_normal((batch, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(tessera.from_numpy(x)).numpy(), ort_run(model, {"x": x})[0],
                                   rtol=1e-5, atol=1e-6)
    assert compiled.compiled.artifacts()[0]["backend"] == "cpp"


def test_export_a_python_function_and_run_it_in_onnx_runtime(rng, tmp_path):
    w = tessera.from_numpy(rng.standard_normal((6, 3)).astype(np.float32))

    def fn(x):
        return tessera.sigmoid(tessera.matmul(x, w)) * 2.0 - x.sum(1, keepdim=True)

    x = rng.standard_normal((4, 6)).astype(np.float32)
    program = tessera.export(fn, (tessera.from_numpy(x),), dynamic_shapes=[{0: "batch"}])
    data = tonnx.export_model(program)
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == tonnx.EXPORT_OPSET
    x2 = rng.standard_normal((9, 6)).astype(np.float32)  # another batch size: the dim is symbolic
    want = fn(tessera.from_numpy(x2)).numpy()
    np.testing.assert_allclose(ort_run(model, {model.graph.input[0].name: x2})[0], want, rtol=1e-5, atol=1e-5)
    path = tmp_path / "fn.onnx"
    assert tonnx.export_model(program, path) is None
    again = tonnx.import_model(path)  # and back in
    np.testing.assert_allclose(again(tessera.from_numpy(x2)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_bad_models_are_refused_with_the_reason(rng, tmp_path):
    with pytest.raises((ValueError, RuntimeError), match=r"(?i)onnx|protobuf|parse"):
        tonnx.import_model(b"this is not a model")
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="odd_node")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises((ValueError, RuntimeError), match="NoSuchOp") as info:
        tonnx.import_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert "odd_node" in str(info.value)
    with pytest.raises((ValueError, RuntimeError), match="missing.onnx"):
        tonnx.import_model(str(tmp_path / "missing.onnx"))
    with pytest.raises(TypeError, match="expected a path, bytes or an onnx.ModelProto"):
        tonnx.import_model(42)
    with pytest.raises(TypeError, match="expected a tessera.ExportedProgram"):
        tonnx.export_model("not a program")
    # The process keeps working after every refusal.
    model = mlp_model(rng)
    x = rng.standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(tonnx.import_model(model)(tessera.from_numpy(x)).numpy(), ort_run(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)
    assert "Softmax" in tonnx.supported_op_types() and tonnx.MIN_OPSET <= 17 <= tonnx.MAX_OPSET


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_with_crops_runs_like_onnx_runtime(rng, mode):
    # Negative pads crop; in "wrap" mode the crop comes first and the wrap reads what is left.
    pads = np.array([0, -1, 2, 0, 2, -2], dtype=np.int64)  # ONNX: the begins, then the ends
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 6])]
    nodes = [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)]
    graph = helper.make_graph(nodes, "pad", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(pads, "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = rng.standard_normal((2, 5, 6)).astype(np.float32)
    got = tonnx.import_model(model)(tessera.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, ort_run(model, {"x": x})[0])


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_exported_pad_with_crops_runs_in_onnx_runtime(rng, mode):
    x = rng.standard_normal((2, 5, 6)).astype(np.float32)
    pads = [2, -2, -1, 2]  # the last dim first: (2 before, crop 2 after), then (crop 1 before, 2 after)
    program = tessera.export(lambda t: tessera.pad(t, pads, mode), (tessera.from_numpy(x),))
    model = onnx.load_from_string(tonnx.export_model(program))
    onnx.checker.check_model(model)
    want = tessera.pad(tessera.from_numpy(x), pads, mode).numpy()
    np.testing.assert_array_equal(ort_run(model, {model.graph.input[0].name: x})[0], want)
    np.testing.assert_array_equal(tonnx.import_model(model)(tessera.from_numpy(x)).numpy(), want)


@pytest.mark.parametrize("dtype,value", [(np.float32, -2.5), (np.float32, np.nan), (np.int64, 7)])
def test_pad_value_given_at_run_time_runs_like_onnx_runtime(rng, dtype, value):
    # constant_value is a graph input, not an initializer: known only when the model runs.
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.INT64
    pads = np.array([1, -1, 0, 2], dtype=np.int64)  # dim 0: 1 before, 0 after; dim 1: crop 1, 2 after
    inputs = [helper.make_tensor_value_info("x", elem, [3, 4]), helper.make_tensor_value_info("v", elem, [])]
    nodes = [helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant")]
    graph = helper.make_graph(nodes, "pad", inputs, [helper.make_tensor_value_info("y", elem, None)],
                              initializer=[numpy_helper.from_array(pads, "p")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = (rng.standard_normal((3, 4)) * 10).astype(dtype)
    v = np.array(value, dtype=dtype)
    program = tonnx.import_model(model)
    got = program(tessera.from_numpy(x), tessera.from_numpy(v)).numpy()
    np.testing.assert_array_equal(got, ort_run(model, {"x": x, "v": v})[0])
    v2 = np.array(3, dtype=dtype)  # the same program with another value
    got2 = program(tessera.from_numpy(x), tessera.from_numpy(v2)).numpy()
    np.testing.assert_array_equal(got2, ort_run(model, {"x": x, "v": v2})[0])
