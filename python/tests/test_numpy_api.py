"""NumPy functions on tessera tensors (__array_ufunc__, __array_function__), and compile of NumPy code."""
import numpy as np
import pytest

import tessera


def f(x, y):  # NumPy code: six ufuncs
    return np.tanh(np.exp(-np.abs(x)) * y + np.sqrt(np.abs(y)) - 1.0)


def test_numpy_functions_run_on_tensors(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    got = f(ta, tb)
    assert isinstance(got, tessera.Tensor) and got.dtype is tessera.float32
    np.testing.assert_allclose(got.numpy(), f(a, b), rtol=1e-5, atol=1e-6)
    # Sums in float32 in another order than NumPy's: the error scales with the sum of |terms|, not
    # with the result, which cancellation can make small (a column summing to 4e-4).
    np.testing.assert_allclose(np.sum(ta, axis=1).numpy(), a.sum(1), rtol=1e-5, atol=1e-6 * np.abs(a).sum(1).max())
    np.testing.assert_allclose(np.mean(ta).numpy(), a.mean(), rtol=1e-5, atol=1e-6 * np.abs(a).mean())
    np.testing.assert_allclose(np.max(ta, axis=0, keepdims=True).numpy(), a.max(0, keepdims=True))
    np.testing.assert_allclose(np.var(ta, axis=1, ddof=1).numpy(), a.var(1, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(np.add.reduce(ta, axis=0).numpy(), a.sum(0), rtol=1e-5, atol=1e-6 * np.abs(a).sum(0).max())
    np.testing.assert_allclose(np.matmul(ta, tb.T).numpy(), a @ b.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([ta, tb], axis=1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_allclose(np.where(ta > 0, ta, tb).numpy(), np.where(a > 0, a, b))
    np.testing.assert_allclose(np.transpose(np.reshape(ta, (5, 4))).numpy(), a.reshape(5, 4).T)
    np.testing.assert_allclose((a + tb).numpy(), a + b, rtol=1e-6)  # an ndarray operand, shared


def test_numpy_semantics_where_they_differ():
    i = tessera.tensor([1, 2, 3])
    assert np.true_divide(i, 2).dtype is tessera.float64   # NumPy: int / int is float64
    assert (i / 2).dtype is tessera.float32                 # PyTorch (the operator): the default dtype
    assert np.exp(i).dtype is tessera.float64


def test_uncovered_functions_name_themselves():
    t = tessera.ones(3)
    with pytest.raises(TypeError, match="numpy.hypot is not supported"):
        np.hypot(t, t)
    with pytest.raises(TypeError, match="numpy.cumprod is not supported"):
        np.cumprod(t)
    with pytest.raises(TypeError, match="numpy.pad with mode='reflect'"):
        np.pad(t, 1, mode="reflect")
    with pytest.raises(TypeError, match="numpy.reciprocal of an integer array"):
        np.reciprocal(tessera.tensor([1, 2]))
    with pytest.raises(TypeError, match="matrix norms"):
        np.linalg.norm(tessera.ones(2, 2), ord=1)


# Every ufunc of the table, against NumPy on fresh random inputs (values in each function's domain).
UNARY_FLOAT = ["negative", "absolute", "fabs", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan",
               "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor",
               "ceil", "trunc", "rint", "sign", "reciprocal", "square", "isnan", "isinf", "isfinite"]


def _domain(name, rng, shape):
    x = rng.standard_normal(shape) * 3
    if name in ("log", "sqrt"):
        x = np.abs(x) + 0.01
    elif name == "log1p":
        x = np.abs(x) - 0.9
    elif name in ("arcsin", "arccos", "arctanh"):
        x = np.tanh(x) * 0.99
    elif name == "arccosh":
        x = np.abs(x) + 1.01
    elif name == "reciprocal":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    elif name in ("rint", "floor", "ceil", "trunc"):
        x.flat[:3] = [2.5, -0.5, 1.5]  # halves: rint rounds to even
    elif name in ("isnan", "isinf", "isfinite"):
        x.flat[:3] = [np.nan, np.inf, -np.inf]
    return x.astype(np.float32)


@pytest.mark.parametrize("name", UNARY_FLOAT)
def test_unary_ufuncs_match_numpy(name, rng):
    x = _domain(name, rng, (5, 7))
    ufunc = getattr(np, name)
    got = ufunc(tessera.from_numpy(x))
    want = ufunc(x)
    assert isinstance(got, tessera.Tensor)
    assert np.dtype(got.numpy().dtype) == want.dtype, (name, got.dtype, want.dtype)
    np.testing.assert_allclose(got.numpy(), want, rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["arctan2", "floor_divide", "remainder", "fmod", "logical_xor"])
def test_binary_float_ufuncs_match_numpy(name, rng):
    a = (rng.standard_normal((6, 4)) * 4).astype(np.float32)
    b = (rng.standard_normal((6, 4)) * 2).astype(np.float32)
    b = np.where(np.abs(b) < 0.25, 0.75, b).astype(np.float32)
    ufunc = getattr(np, name)
    got = ufunc(tessera.from_numpy(a), tessera.from_numpy(b))
    want = ufunc(a, b)
    assert np.dtype(got.numpy().dtype) == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
                                  "floor_divide", "remainder", "fmod"])
def test_integer_ufuncs_match_numpy(name, rng):
    a = rng.integers(-100, 100, (3, 5)).astype(np.int64)
    b = rng.integers(1, 6, (3, 5)).astype(np.int64)
    if name in ("floor_divide", "remainder", "fmod"):
        b = b * rng.choice([-1, 1], (3, 5))
    got = getattr(np, name)(tessera.from_numpy(a), tessera.from_numpy(b))
    want = getattr(np, name)(a, b)
    assert got.numpy().dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(np.invert(tessera.from_numpy(a)).numpy(), np.invert(a))
    m = rng.random(7) > 0.5
    np.testing.assert_array_equal(np.invert(tessera.from_numpy(m)).numpy(), np.invert(m))
    np.testing.assert_array_equal(np.logical_not(tessera.from_numpy(m)).numpy(), np.logical_not(m))
    i = np.array([1, 2, 3], dtype=np.int64)
    assert np.arctan2(tessera.from_numpy(i), tessera.from_numpy(i)).dtype is tessera.float64  # NumPy's rule


def test_array_functions_match_numpy(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t = tessera.from_numpy(a)
    np.testing.assert_array_equal(np.clip(t, -0.5, 0.5).numpy(), np.clip(a, -0.5, 0.5))
    np.testing.assert_array_equal(np.clip(t, None, 0.1).numpy(), np.clip(a, None, 0.1))
    np.testing.assert_allclose(np.cumsum(t, axis=1).numpy(), np.cumsum(a, axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.cumsum(t).numpy(), np.cumsum(a), rtol=1e-5, atol=1e-5)
    i = rng.integers(0, 9, 6).astype(np.int32)
    assert np.cumsum(tessera.from_numpy(i)).numpy().dtype == np.cumsum(i).dtype
    np.testing.assert_array_equal(np.flip(t).numpy(), np.flip(a))
    np.testing.assert_array_equal(np.flip(t, axis=1).numpy(), np.flip(a, axis=1))
    np.testing.assert_array_equal(np.tril(t, k=-1).numpy(), np.tril(a, k=-1))
    np.testing.assert_array_equal(np.triu(t, 1).numpy(), np.triu(a, 1))
    np.testing.assert_array_equal(np.argmin(t, axis=0).numpy(), np.argmin(a, axis=0))
    np.testing.assert_array_equal(np.tile(t, (2, 3)).numpy(), np.tile(a, (2, 3)))
    np.testing.assert_array_equal(np.tile(t, 2).numpy(), np.tile(a, 2))
    np.testing.assert_array_equal(np.tile(t, (2, 1, 1)).numpy(), np.tile(a, (2, 1, 1)))
    np.testing.assert_array_equal(np.pad(t, 2).numpy(), np.pad(a, 2))
    np.testing.assert_array_equal(np.pad(t, ((1, 0), (0, 3)), constant_values=1.5).numpy(),
                                  np.pad(a, ((1, 0), (0, 3)), constant_values=1.5))
    np.testing.assert_allclose(np.linalg.norm(t).numpy(), np.linalg.norm(a), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(t, axis=1).numpy(), np.linalg.norm(a, axis=1), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(t, ord=1, axis=0, keepdims=True).numpy(),
                               np.linalg.norm(a, ord=1, axis=0, keepdims=True), rtol=1e-5)


def test_out_argument(rng):
    a = rng.standard_normal(6).astype(np.float32)
    t, out = tessera.from_numpy(a), tessera.empty(6)
    assert np.exp(t, out=out) is out
    np.testing.assert_allclose(out.numpy(), np.exp(a), rtol=2e-6)


@pytest.mark.parametrize("backend", ["interpreter", "cpp"])
def test_compile_numpy_code(rng, backend):
    compiled = tessera.compile(f, backend=backend)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    got = compiled(tessera.from_numpy(a), tessera.from_numpy(b))
    np.testing.assert_allclose(got.numpy(), f(a, b), rtol=1e-5, atol=1e-6)
    arts = compiled.compiled.artifacts()
    assert len(arts) == 1 and arts[0]["backend"] == backend
    if backend == "interpreter":
        graph = arts[0]["graph"]
        for op in ("tanh", "exp", "abs", "sqrt", "mul", "add"):
            assert op in graph, (op, graph)  # captured into one program
