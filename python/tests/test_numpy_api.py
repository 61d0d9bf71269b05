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
    np.testing.assert_allclose(np.sum(ta, axis=1).numpy(), a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(np.mean(ta).numpy(), a.mean(), rtol=1e-5)
    np.testing.assert_allclose(np.max(ta, axis=0, keepdims=True).numpy(), a.max(0, keepdims=True))
    np.testing.assert_allclose(np.var(ta, axis=1, ddof=1).numpy(), a.var(1, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(np.add.reduce(ta, axis=0).numpy(), a.sum(0), rtol=1e-5)
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
    with pytest.raises(TypeError, match="numpy.arctan2 is not supported"):
        np.arctan2(t, t)
    with pytest.raises(TypeError, match="numpy.cumsum is not supported"):
        np.cumsum(t)


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
