"""Quantization of exported programs, 2:4 sparsity and the profiler from Python."""
import json

import numpy as np
import pytest

import tessera
from tessera import quantization as tq


def test_prepare_calibrate_convert_and_lower(rng):
    w = tessera.from_numpy(rng.standard_normal((16, 32)).astype(np.float32) * 0.1)
    b = tessera.from_numpy(rng.standard_normal(16).astype(np.float32) * 0.1)

    def model(x):
        return tessera.relu(tessera.linear(x, w, b))

    xs = [tessera.from_numpy(rng.standard_normal((8, 32)).astype(np.float32)) for _ in range(4)]
    ep = tessera.export(model, (xs[0],), parameters={"w": w, "b": b})
    prepared = tq.prepare(ep, "x86", activation_observer="min_max")
    assert prepared.num_observers > 0
    for x in xs:
        tq.calibrate(prepared, x)
    converted = tq.convert(prepared)
    assert "quantize_per_tensor" in str(converted) and "dequantize" in str(converted)
    ref = model(xs[0]).numpy()
    got = converted(xs[0]).numpy()
    assert np.abs(got - ref).max() < 0.05 * max(1.0, np.abs(ref).max())  # int8 error, not garbage
    assert tq.lower_to_int8(converted) >= 1
    np.testing.assert_allclose(converted(xs[0]).numpy(), got, atol=0.05 * max(1.0, np.abs(ref).max()))
    dyn = tq.quantize_dynamic(ep)
    assert "_quantized_linear_dynamic" in str(dyn)
    with pytest.raises(ValueError, match="unknown observer"):
        tq.prepare(ep, "x86", activation_observer="nope")


def test_sparse_2_4(rng):
    w = rng.standard_normal((8, 16)).astype(np.float32)
    pruned = tessera.sparse.prune_2_4(tessera.from_numpy(w))
    groups = pruned.numpy().reshape(8, 4, 4)
    assert ((groups != 0).sum(-1) <= 2).all()
    s = tessera.sparse.to_sparse_semi_structured(pruned)
    assert tessera.sparse.is_sparse(s) and not tessera.sparse.is_sparse(pruned)
    np.testing.assert_array_equal(tessera.sparse.to_dense(s).numpy(), pruned.numpy())
    x = rng.standard_normal((4, 16)).astype(np.float32)
    np.testing.assert_allclose(tessera.linear(tessera.from_numpy(x), s).numpy(), x @ pruned.numpy().T,
                               rtol=1e-4, atol=1e-4)
    assert "SparseSemiStructuredTensor" in tessera.sparse.describe(s)


def test_profiler_trace_and_summary(tmp_path):
    path = tmp_path / "trace.json"
    with tessera.profiler.profile("%s,summary" % path):
        tessera.exp(tessera.ones(10)) + 1
    assert not tessera.profiler.enabled()
    events = json.loads(path.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert any(n and n.startswith("exp") for n in names) and any(n and n.startswith("add") for n in names)
    assert "exp" in tessera.profiler.summary()


def test_quantization_aware_training(rng):
    w = tessera.from_numpy(rng.standard_normal((4, 8)).astype(np.float32) * 0.3)
    b = tessera.zeros(4)

    def model(x):
        return tessera.linear(tessera.relu(x), w, b)

    x = tessera.from_numpy(rng.standard_normal((64, 8)).astype(np.float32))
    target = tessera.from_numpy(np.maximum(x.numpy(), 0) @ (rng.standard_normal((8, 4)).astype(np.float32) * 0.3))
    ep = tessera.export(model, (x,), parameters={"w": w, "b": b})
    qat = tq.prepare_qat(ep, "x86")
    assert "fake_quantize_per_tensor_affine" in str(qat.training_program)
    assert sorted(qat.named_parameters()) == ["b", "w"]
    opt = tessera.optim.Adam(qat.parameters(), lr=0.02)
    losses = []
    for _ in range(80):
        opt.zero_grad()
        loss = tessera.nn.mse_loss(qat([x])[0], target)
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    assert losses[-1] < 0.2 * losses[0]  # it trains through the fake quantization
    np.testing.assert_array_equal(ep.weights["w"].numpy(), w.numpy())  # the exported program is left alone
    qat.freeze_observers()
    assert qat.observers_frozen
    simulated = qat([x])[0].numpy()
    converted = tq.convert(qat)
    np.testing.assert_allclose(converted(x).numpy(), simulated, atol=1e-5)
    assert tq.lower_to_int8(converted) == 1
