"""The op functions generated from the contract: every public op present, numerics against NumPy."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import tessera


def contract(source_dir):
    with open(source_dir / "dispatcher" / "ops" / "ops.json") as f:
        return [op["schema"].split("(")[0] for op in json.load(f)["ops"]]


def test_every_public_op_is_a_function(source_dir):
    names = contract(source_dir)
    public = {n.split(".")[0] for n in names if not n.startswith("_")}
    internal = {n.split(".")[0] for n in names if n.startswith("_")}
    assert public and internal
    for name in public:
        assert callable(getattr(tessera.ops, name)), name
        assert name in tessera.ops.__all__
    for name in internal:
        assert not hasattr(tessera.ops, name), name  # internal ops are not generated
    assert sorted(tessera.ops.OP_NAMES) == sorted(n for n in names if not n.startswith("_"))


def test_a_new_op_in_the_contract_appears_without_a_hand_edit(source_dir, tmp_path):
    with open(source_dir / "dispatcher" / "ops" / "ops.json") as f:
        c = json.load(f)
    c["ops"].append({"schema": "frobnicate.Tensor(Tensor self, *, float strength=0.5) -> Tensor",
                     "shape_rule": "same", "tags": [], "doc": "A new op."})
    (tmp_path / "ops.json").write_text(json.dumps(c))
    out = tmp_path / "_ops.py"
    subprocess.run([sys.executable, str(source_dir / "python" / "gen_ops_py.py"), str(tmp_path / "ops.json"),
                    "--out", str(out), "--stub", str(tmp_path / "_ops.pyi")], check=True)
    code = out.read_text()
    assert "def frobnicate(self, *, strength=0.5):" in code and "_C.op('frobnicate.Tensor')" in code
    assert "def frobnicate(self: Tensor" in (tmp_path / "_ops.pyi").read_text()


def test_generator_rejects_unknown_types(source_dir, tmp_path):
    (tmp_path / "ops.json").write_text(json.dumps({"ops": [{"schema": "f(Blob x) -> Tensor"}]}))
    r = subprocess.run([sys.executable, str(source_dir / "python" / "gen_ops_py.py"), str(tmp_path / "ops.json"),
                        "--out", str(tmp_path / "o.py"), "--stub", str(tmp_path / "o.pyi")], capture_output=True, text=True)
    assert r.returncode == 1 and "op 'f': argument 'x' has type 'Blob'" in r.stderr


UNARY = {
    "exp": np.exp, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "abs": np.abs, "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "silu": lambda x: x / (1 + np.exp(-x)), "erf": np.vectorize(math.erf),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
}
POSITIVE = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x)}


@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE))
def test_unary(rng, name):
    x = rng.standard_normal((7, 9)).astype(np.float32)
    if name in POSITIVE:
        x = np.abs(x) + 0.1
    ref = (UNARY.get(name) or POSITIVE[name])(x.astype(np.float64))
    t = tessera.from_numpy(x)
    np.testing.assert_allclose(getattr(tessera, name)(t).numpy(), ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(getattr(t, name)().numpy(), ref, rtol=2e-5, atol=2e-5)  # and as a method


@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("mean", np.mean), ("prod", np.prod), ("amax", np.amax),
                                      ("amin", np.amin)])
def test_reductions(rng, name, ref):
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    t = tessera.from_numpy(x)
    f = getattr(tessera, name)
    np.testing.assert_allclose(f(t).numpy(), ref(x), rtol=1e-5)
    np.testing.assert_allclose(f(t, 1).numpy(), ref(x, axis=1), rtol=1e-5)
    np.testing.assert_allclose(f(t, (0, 2), True).numpy(), ref(x, axis=(0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(getattr(t, name)(dim=[-1]).numpy(), ref(x, axis=-1), rtol=1e-5)


def test_var_argmax(rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    t = tessera.from_numpy(x)
    np.testing.assert_allclose(tessera.var(t, 1).numpy(), x.var(axis=1, ddof=1), rtol=1e-4)
    np.testing.assert_allclose(tessera.var(t, [0], correction=0).numpy(), x.var(axis=0), rtol=1e-4)
    np.testing.assert_array_equal(tessera.argmax(t, 1).numpy(), x.argmax(axis=1))
    assert tessera.argmax(t).item() == x.argmax()


def test_binary_functions_and_keywords(rng):
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3,)).astype(np.float32)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    np.testing.assert_allclose(tessera.add(ta, tb, alpha=2).numpy(), a + 2 * b, rtol=1e-6)
    np.testing.assert_allclose(tessera.sub(ta, tb, alpha=0.5).numpy(), a - 0.5 * b, rtol=1e-6)
    np.testing.assert_allclose(tessera.maximum(ta, tb).numpy(), np.maximum(a, b))
    np.testing.assert_allclose(tessera.minimum(ta, tb).numpy(), np.minimum(a, b))
    np.testing.assert_allclose(tessera.where(ta > 0, ta, tb).numpy(), np.where(a > 0, a, b))
    np.testing.assert_allclose(tessera.where(ta > 0, ta, 0.0).numpy(), np.where(a > 0, a, 0))  # a number operand
    np.testing.assert_array_equal(tessera.logical_and(ta > 0, tb > 0).numpy(), (a > 0) & (b > 0))
    np.testing.assert_allclose(tessera.pow(ta, 3).numpy(), a ** 3, rtol=1e-5)                 # pow.Tensor_Scalar
    np.testing.assert_allclose(tessera.pow(ta.abs(), tb).numpy(), np.abs(a) ** b, rtol=1e-5)  # pow.Tensor_Tensor
    np.testing.assert_allclose(tessera.pow(self=ta, exponent=2).numpy(), a ** 2, rtol=1e-5)


def test_inplace_ops_return_their_argument(rng):
    a = rng.standard_normal(5).astype(np.float32)
    t = tessera.from_numpy(a.copy())
    assert tessera.add_(t, tessera.ones(5), alpha=2) is t
    assert t.mul_(tessera.full((5,), 3.0)) is t
    np.testing.assert_allclose(t.numpy(), (a + 2) * 3, rtol=1e-6)
    assert t.fill_(1.5) is t and t.tolist() == [1.5] * 5
    assert t.zero_() is t and t.tolist() == [0.0] * 5


def test_nn_ops(rng):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    tx = tessera.from_numpy(x)
    np.testing.assert_allclose(tessera.linear(tx, tessera.from_numpy(w), tessera.from_numpy(bias)).numpy(),
                               x @ w.T + bias, rtol=1e-4, atol=1e-4)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(tessera.softmax(tx, -1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tessera.log_softmax(tx, 2).numpy(), np.log(e / e.sum(-1, keepdims=True)),
                               rtol=1e-4, atol=1e-5)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(tessera.layer_norm(tx, [8]).numpy(), (x - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    q, k, v = (rng.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    got = tessera.scaled_dot_product_attention(*(tessera.from_numpy(a) for a in (q, k, v)))
    np.testing.assert_allclose(got.numpy(), p @ v, rtol=1e-4, atol=1e-4)


def test_list_and_index_ops(rng):
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    np.testing.assert_array_equal(tessera.cat([ta, tb], 1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(tessera.stack((ta, tb)).numpy(), np.stack([a, b]))
    idx = np.array([2, 0], dtype=np.int64)
    np.testing.assert_array_equal(tessera.index_select(ta, 1, tessera.from_numpy(idx)).numpy(), a[:, idx])
    g = rng.integers(0, 3, size=(2, 3)).astype(np.int64)
    np.testing.assert_array_equal(tessera.gather(ta, 1, tessera.from_numpy(g)).numpy(), np.take_along_axis(a, g, 1))
    np.testing.assert_array_equal(tessera.embedding(ta, tessera.tensor([1, 0, 1])).numpy(), a[[1, 0, 1]])


def test_pooling_and_conv(rng):
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    tx = tessera.from_numpy(x)
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # (1, 2, 4, 4, 3, 3)
    np.testing.assert_allclose(tessera.conv2d(tx, tessera.from_numpy(w)).numpy(),
                               np.einsum("nchwij,ocij->nohw", win, w), rtol=1e-4, atol=1e-4)
    pooled = x.reshape(1, 2, 3, 2, 3, 2)
    np.testing.assert_allclose(tessera.max_pool2d(tx, 2).numpy(), pooled.max(axis=(3, 5)))
    np.testing.assert_allclose(tessera.avg_pool2d(tx, [2, 2]).numpy(), pooled.mean(axis=(3, 5)), rtol=1e-5, atol=1e-6)


def test_boxed_op_handles():
    op = tessera._C.op("add.Tensor")
    assert op.name == "add.Tensor" and op.schema.startswith("add.Tensor(Tensor self, Tensor other")
    assert "add.Tensor" in tessera._C.op_names()


def test_type_stubs_are_generated():
    import ast
    import pathlib
    pkg = pathlib.Path(tessera.__file__).parent
    for stub in ("_C.pyi", "_ops.pyi"):
        tree = ast.parse((pkg / stub).read_text())  # valid Python syntax
        assert tree.body, stub
    assert "class Tensor" in (pkg / "_C.pyi").read_text() and (pkg / "py.typed").exists()
    assert "def softmax(self: Tensor" in (pkg / "_ops.pyi").read_text()


def test_typed_bindings_match_the_boxed_call(rng):
    """The common ops bound to their typed C++ functions (python/src/typed_ops.cpp) are what tessera.<op>
    and t.<op>() are, and give what the boxed call gives, with its argument errors."""
    names = tessera._C._typed_names
    assert {"add", "mul", "relu", "exp", "sum"} <= set(names)
    a = tessera.from_numpy(rng.random((3, 4), dtype=np.float32) + 0.5)
    b = tessera.from_numpy(rng.random((3, 4), dtype=np.float32) + 0.5)
    for name, full in names.items():
        f = getattr(tessera, name)
        assert f is getattr(tessera._C, "_typed_" + name), name
        assert getattr(tessera.Tensor, name) is getattr(tessera.Tensor, "_typed_" + name), name
        boxed = tessera._C.op(full, typed=False)
        assert not boxed.typed and tessera._C.op(full).typed
        nargs = 2 if "other" in boxed.schema else 1
        args = (a, b.T if name == "matmul" else b)[:nargs]
        want = boxed(*args).numpy()
        np.testing.assert_array_equal(f(*args).numpy(), want, err_msg=name)
        np.testing.assert_array_equal(getattr(a, name)(*args[1:]).numpy(), want, err_msg=name)
    # Numbers for tensors, keywords, defaults and the boxed fallback (an int for int[]).
    np.testing.assert_allclose(tessera.add(a, 2.0, alpha=3).numpy(), a.numpy() + 6.0, rtol=1e-6)
    np.testing.assert_allclose(a.sum(1, keepdim=True).numpy(), a.numpy().sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(tessera.sum(a, dim=(0,)).numpy(), a.numpy().sum(0), rtol=1e-6)
    with pytest.raises(TypeError, match=r"add.Tensor\(\): argument 'other' \(position 2\) must be a Tensor or a number"):
        tessera.add(a, "x")
    with pytest.raises(TypeError, match=r"sum\(\): argument 'keepdim' \(position 3\) must be a bool"):
        tessera.sum(a, (0,), 1)


# The pointwise ops for ONNX models (docs/pointwise-ops.md), against NumPy in float64.
def _hard(x):
    return np.clip(x + 3, 0, 6) / 6


ONNX_UNARY = {
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc, "sign": np.sign,
    "reciprocal": lambda x: 1 / x, "tan": np.tan, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "expm1": np.expm1, "softsign": lambda x: x / (1 + np.abs(x)),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))), "hardsigmoid": _hard, "hardswish": lambda x: x * _hard(x),
    "selu": lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
}
ONNX_UNIT = {"asin": np.arcsin, "acos": np.arccos, "atanh": np.arctanh, "log1p": np.log1p}


@pytest.mark.parametrize("name", sorted(ONNX_UNARY) + sorted(ONNX_UNIT))
def test_onnx_pointwise_unary(rng, name):
    x = (rng.standard_normal((7, 9)) * 2).astype(np.float32)
    if name in ONNX_UNIT:
        x = rng.uniform(-0.9, 0.9, (7, 9)).astype(np.float32)
    if name == "round":
        x[0] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, -4.5]  # ties go to even, as np.round
    ref = (ONNX_UNARY.get(name) or ONNX_UNIT[name])(x.astype(np.float64))
    np.testing.assert_allclose(getattr(tessera, name)(tessera.from_numpy(x)).numpy(), ref, rtol=2e-5, atol=2e-6)


def test_onnx_pointwise_parameters_and_predicates(rng):
    x = (rng.standard_normal((5, 6)) * 3).astype(np.float32)
    t, d = tessera.from_numpy(x), x.astype(np.float64)
    check = lambda got, want: np.testing.assert_allclose(got.numpy(), want, rtol=2e-5, atol=2e-6)  # noqa: E731
    check(tessera.leaky_relu(t, 0.2), np.where(d > 0, d, 0.2 * d))
    check(tessera.elu(t, alpha=0.5, scale=2.0), np.where(d > 0, 2 * d, np.expm1(d)))
    check(tessera.celu(t, 2.0), np.maximum(d, 0) + np.minimum(0, 2 * np.expm1(d / 2)))
    check(tessera.softplus(t, beta=2, threshold=1), np.where(2 * d > 1, d, np.log1p(np.exp(2 * d)) / 2))
    check(tessera.hardtanh(t, -0.5, 0.5), np.clip(d, -0.5, 0.5))
    y = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0], dtype=np.float32)
    ty = tessera.from_numpy(y)
    np.testing.assert_array_equal(tessera.isnan(ty).numpy(), np.isnan(y))
    np.testing.assert_array_equal(tessera.isinf(ty).numpy(), np.isinf(y))
    np.testing.assert_array_equal(tessera.logical_not(ty).numpy(), np.logical_not(y))
    with pytest.raises(ValueError, match="takes floating tensors only"):
        tessera.leaky_relu(tessera.tensor([1, 2]))


def test_onnx_pointwise_binary(rng):
    a = rng.integers(-50, 50, (4, 6)).astype(np.int32)
    b = rng.choice([-7, -3, -1, 1, 2, 5], (6,)).astype(np.int32)
    ta, tb = tessera.from_numpy(a), tessera.from_numpy(b)
    np.testing.assert_array_equal(tessera.remainder(ta, tb).numpy(), np.remainder(a, b))   # the sign of b
    np.testing.assert_array_equal(tessera.fmod(ta, tb).numpy(), np.fmod(a, b))             # the sign of a
    np.testing.assert_array_equal(tessera.floor_divide(ta, tb).numpy(), np.floor_divide(a, b))
    np.testing.assert_array_equal(tessera.remainder(ta, 3).numpy(), np.remainder(a, 3))    # a number operand
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        np.testing.assert_array_equal(getattr(tessera, name)(ta, tb).numpy(), getattr(np, name)(a, b))
    np.testing.assert_array_equal(tessera.bitwise_not(ta).numpy(), np.invert(a))
    u = rng.integers(0, 256, (8,)).astype(np.uint8)
    s = np.arange(8, dtype=np.uint8)
    tu, ts = tessera.from_numpy(u), tessera.from_numpy(s)
    np.testing.assert_array_equal(tessera.bitwise_left_shift(tu, ts).numpy(), np.left_shift(u, s))
    np.testing.assert_array_equal(tessera.bitwise_right_shift(tu, ts).numpy(), np.right_shift(u, s))
    np.testing.assert_array_equal(tessera.logical_xor(ta > 0, tb > 0).numpy(), np.logical_xor(a > 0, b > 0))
    f, g = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    tf, tg = tessera.from_numpy(f), tessera.from_numpy(g)
    np.testing.assert_allclose(tessera.atan2(tf, tg).numpy(), np.arctan2(f, g), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(tessera.remainder(tf, tg).numpy(), np.remainder(f, g), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tessera.fmod(tf, tg).numpy(), np.fmod(f, g), rtol=1e-5, atol=1e-6)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = np.array([0.1, -2.0, 0.5], dtype=np.float32)
    np.testing.assert_allclose(tessera.prelu(tessera.from_numpy(x), tessera.from_numpy(w)).numpy(),
                               np.where(x > 0, x, w[:, None] * x), rtol=1e-6)
    with pytest.raises((ValueError, RuntimeError), match="ZeroDivisionError"):
        tessera.remainder(ta, tessera.tensor([0], dtype=tessera.int32))
