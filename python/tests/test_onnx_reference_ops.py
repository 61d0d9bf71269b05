"""The structural and nn ops ONNX models need, against onnx.reference (ONNX's own Python runtime): each
ONNX node the importer maps onto one op, run by both on fresh random inputs."""
import numpy as np
import pytest

import tessera

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def T(a):
    return tessera.from_numpy(np.ascontiguousarray(a))


def run_onnx(op_type, inputs, n_out=1, opset=19, **attrs):
    """Runs one ONNX node on the NumPy arrays `inputs` (a list of (name, array); array None: an absent input)."""
    names = [name if a is not None else "" for name, a in inputs]
    node = helper.make_node(op_type, names, ["y%d" % i for i in range(n_out)], **attrs)
    feeds = {name: a for name, a in inputs if a is not None}
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y%d" % i, 0, None) for i in range(n_out)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("starts,ends,steps", [(1, 6, 2), (-1, -(2**63), -1), (5, 1, -2), (-100, 100, 3), (2**62, -3, -2)])
def test_slice(rng, starts, ends, steps):
    x = rng.standard_normal((3, 7)).astype(np.float32)
    arr = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    want = run_onnx("Slice", [("x", x), ("s", arr(starts)), ("e", arr(ends)), ("a", arr(1)), ("p", arr(steps))])[0]
    np.testing.assert_array_equal(tessera.slice_copy(T(x), 1, starts, ends, steps).numpy(), want)


@pytest.mark.parametrize("mode,ours", [("constant", "constant"), ("reflect", "reflect"), ("edge", "replicate"),
                                       ("wrap", "circular")])
def test_pad(rng, mode, ours):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    pads = np.array([0, 1, 1, 0, 2, 3], dtype=np.int64)  # ONNX: all begins, then all ends (onnx.reference: no crops)
    want = run_onnx("Pad", [("x", x), ("p", pads), ("v", np.array(1.5, np.float32) if mode == "constant" else None)],
                    mode=mode)[0]
    ours_pad = [1, 3, 1, 2, 0, 0]  # last dim first, (begin, end) pairs
    got = tessera.pad(T(x), ours_pad, ours, 1.5 if mode == "constant" else None).numpy()
    np.testing.assert_array_equal(got, want)


def test_batch_norm_and_instance_norm(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    s, b, m = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2, 3).astype(np.float32)
    want = run_onnx("BatchNormalization", [("x", x), ("s", s), ("b", b), ("m", m), ("v", v)], epsilon=1e-3)[0]
    got = tessera.batch_norm(T(x), T(s), T(b), T(m), T(v), False, 0.1, 1e-3, False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    want = run_onnx("InstanceNormalization", [("x", x), ("s", s), ("b", b)], epsilon=1e-5)[0]
    np.testing.assert_allclose(tessera.group_norm(T(x), 3, T(s), T(b), 1e-5).numpy(), want, rtol=1e-4, atol=1e-4)


def test_cumsum_argmin_topk_trilu_tile(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = run_onnx("CumSum", [("x", x), ("a", np.array(1, np.int64))])[0]
    np.testing.assert_allclose(tessera.cumsum(T(x), 1).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(tessera.argmin(T(x), 0, True).numpy(), run_onnx("ArgMin", [("x", x)], axis=0)[0])
    ints = rng.integers(0, 4, size=(4, 6)).astype(np.int64)  # many ties
    for largest in (1, 0):
        values, indices = run_onnx("TopK", [("x", ints), ("k", np.array([3], np.int64))], n_out=2, axis=1,
                                   largest=largest)
        got_v, got_i = tessera.topk(T(ints), 3, 1, bool(largest))
        np.testing.assert_array_equal(got_v.numpy(), values)
        np.testing.assert_array_equal(got_i.numpy(), indices)
    for upper in (0, 1):
        want = run_onnx("Trilu", [("x", x), ("k", np.array(1, np.int64))], upper=upper)[0]
        np.testing.assert_array_equal((tessera.triu if upper else tessera.tril)(T(x), 1).numpy(), want)
    want = run_onnx("Tile", [("x", x), ("r", np.array([2, 3], np.int64))])[0]
    np.testing.assert_array_equal(tessera.repeat(T(x), [2, 3]).numpy(), want)
    want = run_onnx("Expand", [("x", x[:, :1]), ("s", np.array([2, 4, 6], np.int64))])[0]
    np.testing.assert_array_equal(tessera.expand_copy(T(x[:, :1]), [2, 4, 6]).numpy(), want)


@pytest.mark.parametrize("reduction,ours", [("none", None), ("add", "sum"), ("mul", "prod"), ("max", "amax"),
                                            ("min", "amin")])
def test_scatter_elements(rng, reduction, ours):
    data = rng.standard_normal((4, 5)).astype(np.float32)
    updates = rng.standard_normal((3, 5)).astype(np.float32)
    if reduction == "none":  # distinct rows per column: no order question
        index = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1).astype(np.int64) - 4  # negative: wrap
    else:
        index = rng.integers(-4, 4, size=(3, 5)).astype(np.int64)
    want = run_onnx("ScatterElements", [("d", data), ("i", index), ("u", updates)], axis=0, reduction=reduction)[0]
    if ours is None:
        got = tessera.scatter(T(data), 0, T(index), T(updates)).numpy()
    else:
        got = tessera.scatter_reduce(T(data), 0, T(index), T(updates), ours).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stride,pads,output_padding,group,dilation",
                         [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 0, 1, 2), (2, 0, 1, 1, 2)])  # onnx.reference: group 1
def test_conv_transpose(rng, stride, pads, output_padding, group, dilation):
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3 * group).astype(np.float32)
    want = run_onnx("ConvTranspose", [("x", x), ("w", w), ("b", b)], strides=[stride] * 2, pads=[pads] * 4,
                    output_padding=[output_padding] * 2, group=group, dilations=[dilation] * 2)[0]
    got = tessera.conv_transpose2d(T(x), T(w), T(b), [stride], [pads], [output_padding], group, [dilation]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_reductions(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    axes = np.array([0, 2], np.int64)
    want = run_onnx("ReduceLogSumExp", [("x", x), ("a", axes)], keepdims=1)[0]
    np.testing.assert_allclose(tessera.logsumexp(T(x), [0, 2], True).numpy(), want, rtol=1e-5, atol=1e-5)
    for op, p in (("ReduceL1", 1), ("ReduceL2", 2)):
        want = run_onnx(op, [("x", x), ("a", axes)], keepdims=0)[0]
        np.testing.assert_allclose(tessera.linalg_vector_norm(T(x), p, [0, 2]).numpy(), want, rtol=1e-5, atol=1e-5)
