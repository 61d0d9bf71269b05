"""tessera.export / compile / load / save over Python functions (libtessera_compiler)."""
import numpy as np
import pytest

import tessera


def test_export_save_load_run(rng, tmp_path):
    w = tessera.from_numpy(rng.standard_normal((4, 6)).astype(np.float32))

    def f(x):
        return tessera.relu(x @ w + 1), x.sum(dim=[1])

    x = tessera.from_numpy(rng.standard_normal((3, 4)).astype(np.float32))
    ep = tessera.export(f, (x,), dynamic_shapes=[{0: ("batch", 1, 64)}], parameters={"w": w})
    text = str(ep)
    assert "matmul" in text and "relu" in text and "batch in [1, 64]" in text and "parameter" in text
    path = str(tmp_path / "f.tsr")
    tessera.save(ep, path)
    loaded = tessera.load(path)
    x2 = rng.standard_normal((9, 4)).astype(np.float32)  # another batch size: the dim is dynamic
    got, s = loaded(tessera.from_numpy(x2))
    np.testing.assert_allclose(got.numpy(), np.maximum(x2 @ w.numpy() + 1, 0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.numpy(), x2.sum(1), rtol=1e-5, atol=1e-5)
    assert list(loaded.weights) == ["w"]
    with pytest.raises(ValueError):
        loaded(tessera.zeros(100, 4))  # outside the declared range


def test_compile_mode_reduce_overhead_runs_as_default_on_the_cpu(rng):
    """mode="reduce-overhead" replays device graphs where the backend records them (CUDA Graphs);
    on the CPU every call runs as in the default mode."""
    @tessera.compile(mode="reduce-overhead")
    def g(a):
        return tessera.tanh(a * 2.0) + 1

    for _ in range(3):
        a = rng.standard_normal((4, 7)).astype(np.float32)
        np.testing.assert_allclose(g(tessera.from_numpy(a)).numpy(), np.tanh(a * 2) + 1, rtol=1e-5, atol=1e-6)
    stats = g.compiled.stats()
    assert stats["graphs"] == 0 and stats["graph_replays"] == 0 and stats["compiles"] == 1
    with pytest.raises(ValueError, match="reduce-overhead"):
        tessera.compile(lambda a: a, mode="max-speed")(tessera.ones(2))


def test_export_refuses_reading_data():
    def f(x):
        return x * x.sum().item()

    with pytest.raises(ValueError, match="item"):
        tessera.export(f, (tessera.ones(3),))


@pytest.mark.parametrize("backend", ["interpreter", "cpp"])
def test_compile_decorator(rng, backend):
    @tessera.compile(backend=backend)
    def g(a, b):
        return tessera.sigmoid(a * b - 1), a + 1

    a, b = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(2))
    for _ in range(2):
        y, z = g(tessera.from_numpy(a), tessera.from_numpy(b))
        np.testing.assert_allclose(y.numpy(), 1 / (1 + np.exp(-(a * b - 1))), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(z.numpy(), a + 1, rtol=1e-6)
    stats = g.compiled.stats()
    assert stats["calls"] == 2 and stats["compiles"] == 1 and stats["cache_hits"] == 1
    assert g.compiled.artifacts()[0]["backend"] == backend
    assert g.__name__ == "g"
