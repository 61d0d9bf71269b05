"""tessera.Tensor: metadata, operators and PyTorch's promotion of Python numbers, indexing as views, .to()."""
import numpy as np
import pytest

import tessera


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_metadata(rng):
    a = rand(rng, 2, 3, 4)
    t = tessera.from_numpy(a)
    assert t.shape == (2, 3, 4) and t.size() == (2, 3, 4) and t.size(1) == 3
    assert t.ndim == 3 and t.dim() == 3 and t.numel() == 24 and len(t) == 2
    assert t.dtype is tessera.float32 and t.dtype == tessera.float and t.itemsize == 4
    assert t.device == tessera.device("cpu") and t.device.type == "cpu" and t.is_cpu
    assert t.stride() == (12, 4, 1) and t.is_contiguous()
    assert t.T.shape == (4, 3, 2) and not t.T.is_contiguous()


def test_dtype_and_device_objects():
    assert repr(tessera.float32) == "tessera.float32" and str(tessera.int64) == "int64"
    assert tessera.float64.itemsize == 8 and tessera.float16.is_floating_point and not tessera.int8.is_floating_point
    assert tessera.promote_types(tessera.int32, tessera.float16) is tessera.float16
    assert tessera.promote_types("uint8", "int8") is tessera.int16
    d = tessera.device("cpu")
    assert repr(d) == "device(type='cpu')" and d.index is None and d == "cpu"
    assert repr(tessera.device("cpu", 0)) == "device(type='cpu', index=0)"
    assert tessera.device("cpu:0") == tessera.device("cpu", 0)
    assert len({tessera.float32, tessera.float, tessera.int64}) == 2


@pytest.mark.parametrize("op", ["+", "-", "*", "/"])
def test_arithmetic_against_numpy(rng, op):
    a, b = rand(rng, 3, 4), rand(rng, 4)  # broadcasting
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    for got, want in [(eval("ta %s tb" % op), eval("a %s b" % op)),
                      (eval("ta %s 2.5" % op), eval("a %s np.float32(2.5)" % op)),
                      (eval("1.5 %s ta" % op), eval("np.float32(1.5) %s a" % op))]:
        assert got.dtype is tessera.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)


def test_pow_matmul_neg_abs(rng):
    a, b = np.abs(rand(rng, 3, 5)) + 0.1, rand(rng, 5, 2)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    np.testing.assert_allclose((ta ** 2).numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_allclose((ta ** ta).numpy(), a ** a, rtol=1e-5)
    np.testing.assert_allclose((2.0 ** ta).numpy(), np.float32(2.0) ** a, rtol=1e-5)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((-ta).numpy(), -a)
    np.testing.assert_allclose(abs(-ta).numpy(), a)


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">="])
def test_comparisons(rng, op):
    a = rng.integers(-3, 3, size=(4, 5)).astype(np.int32)
    b = rng.integers(-3, 3, size=(5,)).astype(np.int32)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    got = eval("ta %s tb" % op)
    assert got.dtype is tessera.bool
    np.testing.assert_array_equal(got.numpy(), eval("a %s b" % op))
    np.testing.assert_array_equal(eval("ta %s 1" % op).numpy(), eval("a %s 1" % op))


def test_python_numbers_promote_like_pytorch():
    i32 = tessera.tensor([1, 2, 3], dtype=tessera.int32)
    u8 = tessera.tensor([2, 7], dtype=tessera.uint8)
    f16 = tessera.tensor([1.0, 2.0], dtype=tessera.float16)
    assert (i32 + 0.5).dtype is tessera.float32      # a float number raises the category only
    assert (i32 + 2).dtype is tessera.int32          # an int number does not widen
    assert (u8 * -3).dtype is tessera.uint8 and (u8 * -3).tolist() == [250, 235]  # wraps as in PyTorch
    assert (u8 / -3).dtype is tessera.float32
    assert (f16 * 1e5).dtype is tessera.float16
    assert (i32 + True).dtype is tessera.int32
    assert (i32 / 2).dtype is tessera.float32 and (i32 / 2).tolist() == [0.5, 1.0, 1.5]
    assert (tessera.tensor([1.0]) + np.float64(2)).tolist() == [3.0]  # NumPy scalars are numbers too


def test_inplace_operators_write_through_views(rng):
    a = rand(rng, 4, 4)
    t = tessera.from_numpy(a.copy())
    row = t[1]
    row += 1
    row *= 2
    row -= 0.5
    row /= 4
    expected = a.copy()
    expected[1] = ((a[1] + 1) * 2 - 0.5) / 4
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6)
    same = t
    t += 1
    assert t is same


def test_indexing_gives_views(rng):
    a = rand(rng, 4, 5, 6)
    t = tessera.from_numpy(a)
    cases = [(1,), (-1,), (slice(1, 3),), (slice(None, None, 2),), (slice(1, None, 3), 2), (None, 1),
             (Ellipsis, 2), (1, Ellipsis, slice(0, 4, 2)), (slice(None), None, slice(2, 5)), (2, -1, 0),
             (slice(10, 20),)]
    for idx in cases:
        view = t[idx]
        want = a[idx]
        assert view.shape == want.shape, idx
        np.testing.assert_array_equal(view.numpy(), want)
        if view.numel():
            assert np.shares_memory(view.numpy(), a), idx  # a view, not a copy


def test_tensor_index_gathers(rng):
    a = rand(rng, 5, 3)
    idx = np.array([4, 0, 0, 2])
    got = tessera.from_numpy(a)[tessera.from_numpy(idx)]
    np.testing.assert_array_equal(got.numpy(), a[idx])
    got = tessera.from_numpy(a)[:, tessera.tensor([2, 1])]
    np.testing.assert_array_equal(got.numpy(), a[:, [2, 1]])


def test_boolean_mask_copies_as_numpy(rng):
    a = rand(rng, 4, 5, 3)
    t = tessera.from_numpy(a)
    masks = [(a > 0), (a[:, :, 0] > 0), (a[:, 0, 0] > 0), np.zeros(4, bool), np.ones((4, 5), bool)]
    for m in masks:
        got = t[tessera.from_numpy(m)]
        want = a[m]
        assert got.shape == want.shape, m.shape
        np.testing.assert_array_equal(got.numpy(), want)
        if got.numel():
            assert not np.shares_memory(got.numpy(), a)  # a copy, as in PyTorch and NumPy
    m = a[0, :, 0] > 0  # a mask after other indices: t[1:, mask] and t[..., mask-over-the-last-dim]
    np.testing.assert_array_equal(t[1:, tessera.from_numpy(m)].numpy(), a[1:, m])
    m2 = a[0, 0, :] > 0
    np.testing.assert_array_equal(t[..., tessera.from_numpy(m2)].numpy(), a[..., m2])
    np.testing.assert_array_equal(t[t > 0].numpy(), a[a > 0])  # a mask made by a tessera op


def test_setitem(rng):
    a = rand(rng, 3, 4)
    t = tessera.from_numpy(a)  # shares: writes land in `a`
    t[0] = 7.0
    t[1, ::2] = tessera.tensor([1.0, 2.0])
    t[2:, 3] = 0
    assert (a[0] == 7).all() and a[1, 0] == 1 and a[1, 2] == 2 and a[2, 3] == 0
    row = rng.standard_normal(4)          # float64 array into a float32 row: converted
    t[2] = row
    np.testing.assert_allclose(a[2], row.astype(np.float32))
    t[0, 1:3] = [5, 6]                    # a list
    assert a[0, 1] == 5 and a[0, 2] == 6
    with pytest.raises(TypeError, match="not str"):
        t[0] = "x"


def test_to_and_copy(rng):
    a = rand(rng, 3)
    t = tessera.from_numpy(a)
    assert t.to("cpu") is not None and t.to("cpu").data_ptr() == t.data_ptr()  # nothing to do: itself
    d = t.to(tessera.float64)
    assert d.dtype is tessera.float64
    np.testing.assert_array_equal(d.numpy(), a.astype(np.float64))
    assert t.to(dtype=tessera.int32).dtype is tessera.int32
    assert t.to("float16").dtype is tessera.float16
    assert t.to(d).dtype is tessera.float64
    c = t.to("cpu", copy=True)
    assert c.data_ptr() != t.data_ptr()
    np.testing.assert_array_equal(c.numpy(), a)


def test_repr_is_the_cpp_printer():
    assert repr(tessera.tensor([[1.0, 2.0], [3.0, 4.0]])) == "tensor([[1., 2.],\n        [3., 4.]])"
    assert repr(tessera.tensor([1, 2])) == "tensor([1, 2])"


def test_conversions():
    t = tessera.tensor([3.5])
    assert float(t) == 3.5 and int(t) == 3 and bool(t) and t.item() == 3.5
    assert tessera.tensor([2]).item() == 2 and isinstance(tessera.tensor([2]).item(), int)
    assert [x.item() for x in tessera.tensor([1, 2, 3])] == [1, 2, 3]
    assert tessera.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ValueError):
        bool(tessera.tensor([1.0, 2.0]))


def test_factories():
    assert tessera.zeros(2, 3).shape == (2, 3) and tessera.zeros((2, 3)).tolist() == [[0.0] * 3] * 2
    assert tessera.ones(4, dtype=tessera.int64).tolist() == [1, 1, 1, 1]
    assert tessera.full((2,), 7).dtype is tessera.int64
    assert tessera.arange(5).tolist() == list(range(5))
    assert tessera.arange(1.0, 2.0, 0.25).tolist() == [1.0, 1.25, 1.5, 1.75]
    tessera.manual_seed(3)
    a = tessera.rand(100)
    tessera.manual_seed(3)
    b = tessera.rand(100)
    assert tessera.equal(a, b) and 0 <= a.numpy().min() and a.numpy().max() < 1
    r = tessera.randn(10000).numpy()
    assert abs(r.mean()) < 0.05 and abs(r.std() - 1) < 0.05
    assert tessera.tensor([1.5]).dtype is tessera.float32
    assert tessera.tensor(np.array([1.5])).dtype is tessera.float64
