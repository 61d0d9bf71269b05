"""The structural and nn ops ONNX models need, against NumPy (an independent implementation): slicing
with negative steps, pad modes, expand, flip, tile, triangles, cumsum, topk, scatter, logsumexp, norms."""
import numpy as np
import pytest

import tessera


def T(a):
    return tessera.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("start,end,step", [(1, 6, 2), (None, None, -1), (-2, None, -3), (5, -9, -2),
                                            (-100, 100, 4), (3, 3, 1), (2**63 - 1, -2**63, -1)])
def test_slice_copy_is_numpy_slicing(rng, start, end, step):
    x = rng.standard_normal((4, 7)).astype(np.float32)
    got = tessera.slice_copy(T(x), 1, start, end, step).numpy()
    np.testing.assert_array_equal(got, x[:, slice(start, end, step)])


@pytest.mark.parametrize("mode,np_mode", [("constant", "constant"), ("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_pad_modes_match_numpy(rng, mode, np_mode):
    x = rng.integers(-50, 50, size=(2, 3, 5)).astype(np.int32)
    kw = {"value": 4.0} if mode == "constant" else {}
    got = tessera.pad(T(x), [2, 3, 1, 2], mode, **kw).numpy()
    want = np.pad(x, [(0, 0), (1, 2), (2, 3)], mode=np_mode, **({"constant_values": 4} if mode == "constant" else {}))
    np.testing.assert_array_equal(got, want)


def test_pad_negative_crops(rng):
    x = rng.standard_normal((3, 6)).astype(np.float64)
    np.testing.assert_array_equal(tessera.pad(T(x), [-1, 2, 1, -2]).numpy(),
                                  np.pad(x[:-2, 1:], [(1, 0), (0, 2)]))


@pytest.mark.parametrize("pads,want", [([-1, 2], [1, 2, 3, 4, 5, 1, 2]), ([2, -1], [3, 4, 0, 1, 2, 3, 4]),
                                       ([-3, 3], [3, 4, 5, 3, 4, 5]), ([5, -1], [0, 1, 2, 3, 4, 0, 1, 2, 3, 4])])
def test_circular_pad_crops_first(pads, want):
    # Worked by hand; torch.nn.functional.pad and ONNX Runtime's Pad "wrap" give the same.
    x = np.arange(6, dtype=np.float32).reshape(1, 6)
    np.testing.assert_array_equal(tessera.pad(T(x), pads, "circular").numpy(), np.array([want], np.float32))


def test_expand_flip_repeat_triangles(rng):
    x = rng.standard_normal((3, 1)).astype(np.float32)
    np.testing.assert_array_equal(tessera.expand_copy(T(x), [2, 3, 4]).numpy(), np.broadcast_to(x, (2, 3, 4)))
    y = rng.integers(0, 9, size=(2, 3, 4)).astype(np.int64)
    np.testing.assert_array_equal(tessera.flip(T(y), [0, 2]).numpy(), np.flip(y, (0, 2)))
    np.testing.assert_array_equal(tessera.repeat(T(y), [2, 1, 1, 3]).numpy(), np.tile(y, (2, 1, 1, 3)))
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(tessera.tril(T(y), k).numpy(), np.tril(y, k))
        np.testing.assert_array_equal(tessera.triu(T(y), k).numpy(), np.triu(y, k))


def test_cumsum_topk_argmin(rng):
    x = rng.standard_normal((4, 6)).astype(np.float64)
    np.testing.assert_allclose(tessera.cumsum(T(x), 1).numpy(), np.cumsum(x, 1), rtol=1e-12)
    i = rng.integers(-5, 5, size=(4, 6)).astype(np.int16)
    got = tessera.cumsum(T(i), 0).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.cumsum(i.astype(np.int64), 0))
    values, indices = tessera.topk(T(i), 3, 1)
    order = np.argsort(-i.astype(np.int64), axis=1, kind="stable")[:, :3]  # ties: ascending index
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(i, order, 1))
    np.testing.assert_array_equal(tessera.argmin(T(i), 1).numpy(), np.argmin(i, 1))


def test_scatter_matches_put_along_axis(rng):
    self_ = rng.standard_normal((5, 4)).astype(np.float32)
    src = rng.standard_normal((5, 4)).astype(np.float32)
    index = np.stack([rng.permutation(5)[:3] for _ in range(4)], axis=1).astype(np.int64)  # distinct per column
    want = self_.copy()
    np.put_along_axis(want, index, src[:3], axis=0)
    np.testing.assert_array_equal(tessera.scatter(T(self_), 0, T(index), T(src)).numpy(), want)
    idx = rng.integers(0, 5, size=(6, 4)).astype(np.int64)
    src6 = rng.standard_normal((6, 4)).astype(np.float64)
    want = self_.astype(np.float64).copy()
    np.add.at(want, (idx, np.arange(4)[None, :].repeat(6, 0)), src6)
    got = tessera.scatter_reduce(T(self_.astype(np.float64)), 0, T(idx), T(src6), "sum").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_logsumexp_and_vector_norm(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float64)
    m = x.max(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(tessera.logsumexp(T(x), [0, 2], True).numpy(),
                               np.log(np.exp(x - m).sum(axis=(0, 2), keepdims=True)) + m, rtol=1e-12)
    for ord_ in (1, 2, 3, float("inf")):
        np.testing.assert_allclose(tessera.linalg_vector_norm(T(x), ord_, [1]).numpy(),
                                   np.linalg.norm(x, ord=ord_, axis=1), rtol=1e-12)


RESIZE_CASES = [  # (mode, coordinate_transformation_mode, nearest_mode, scales, exclude_outside, cubic_coeff_a)
    ("nearest", "half_pixel", "round_prefer_floor", (2.0, 3.0), 0, -0.75),
    ("nearest", "asymmetric", "floor", (0.6, 1.5), 0, -0.75),
    ("nearest", "pytorch_half_pixel", "round_prefer_ceil", (1.7, 0.8), 0, -0.75),  # (tf_half_pixel_for_nearest: opset 11 only, not in onnx.reference)
    ("nearest", "align_corners", "ceil", (2.0, 0.5), 0, -0.75),
    ("linear", "half_pixel", "round_prefer_floor", (0.6, 1.7), 0, -0.75),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", (2.0, 0.25), 0, -0.75),
    ("linear", "align_corners", "round_prefer_floor", (1.5, 2.5), 0, -0.75),
    ("linear", "asymmetric", "round_prefer_floor", (0.8, 3.0), 0, -0.75),
    ("linear", "half_pixel_symmetric", "round_prefer_floor", (0.7, 1.3), 0, -0.75),
    ("cubic", "half_pixel", "round_prefer_floor", (1.6, 0.6), 0, -0.75),
    ("cubic", "align_corners", "round_prefer_floor", (2.0, 1.5), 1, -0.5),
    ("cubic", "asymmetric", "round_prefer_floor", (0.8, 2.0), 1, -0.75),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=lambda c: "%s-%s" % (c[0], c[1]))
def test_resize_matches_onnx_reference(rng, case):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    mode, coord, nearest, scales, exclude, a = case
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    full_scales = np.array([1.0, 1.0, *scales], dtype=np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=coord,
                            nearest_mode=nearest, exclude_outside=exclude, cubic_coeff_a=a)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                            helper.make_tensor_value_info("scales", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    want = ReferenceEvaluator(model).run(None, {"x": x, "scales": full_scales})[0]
    size = [int(np.floor(n * s)) for n, s in zip(x.shape[2:], full_scales[2:])]
    resize = tessera._C.op("_resize")
    got = resize(T(x.astype(np.float64)), size, mode, coord, nearest, a, bool(exclude),
                 T(full_scales[2:].astype(np.float64))).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
