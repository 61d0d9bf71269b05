"""tessera.nn: layers against NumPy, registration and state dicts, the safetensors file read by an
independent parser, and an MLP and a small CNN trained to a stated loss, the same seed giving the
same losses."""
import json
import struct

import numpy as np
import pytest

import tessera

if not hasattr(tessera, "nn"):
    pytest.skip("this build has no libtessera_autograd", allow_module_level=True)
nn = tessera.nn


def test_linear_conv_layernorm_embedding_match_numpy(rng):
    tessera.manual_seed(int(rng.integers(1 << 30)))
    lin = nn.Linear(4, 3)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    assert w.shape == (3, 4) and np.all(np.abs(w) <= 0.5) and np.all(np.abs(b) <= 0.5)  # +-1/sqrt(4)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(lin(tessera.from_numpy(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)

    conv = nn.Conv2d(2, 3, 3, padding=1)
    cw, cb = conv.weight.detach().numpy(), conv.bias.detach().numpy()
    xi = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    xp = np.pad(xi, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 4, 4), np.float64)
    for o in range(3):
        for i in range(4):
            for j in range(4):
                want[0, o, i, j] = (xp[0, :, i:i + 3, j:j + 3] * cw[o]).sum() + cb[o]
    np.testing.assert_allclose(conv(tessera.from_numpy(xi)).numpy(), want, rtol=1e-4, atol=1e-5)

    ln = nn.LayerNorm(6)
    xl = rng.standard_normal((2, 6)).astype(np.float32)
    ref = (xl - xl.mean(1, keepdims=True)) / np.sqrt(xl.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln(tessera.from_numpy(xl)).numpy(), ref, rtol=1e-4, atol=1e-5)

    emb = nn.Embedding(10, 4)
    idx = np.array([[1, 7], [7, 0]], dtype=np.int64)
    np.testing.assert_array_equal(emb(tessera.from_numpy(idx)).numpy(), emb.weight.detach().numpy()[idx])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.scale = nn.parameter(tessera.ones(4))
        self.not_a_parameter = tessera.zeros(4)  # no grad: a plain attribute

    def forward(self, x):
        return self.norm(self.proj(x)) * self.scale


def test_registration_names_and_state_dict_round_trip(tmp_path):
    m = nn.Sequential(Block(), nn.ReLU(), nn.Linear(4, 2, bias=False))
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.scale", "0.proj.weight", "0.proj.bias", "0.norm.weight", "0.norm.bias", "2.weight"]
    assert len(m.parameters()) == 6 and len(m) == 3 and isinstance(m[2], nn.Linear)
    state = m.state_dict()
    path = tmp_path / "m.safetensors"
    m.save(path)

    # An independent reader of the safetensors layout: 8-byte little-endian header length, JSON header,
    # then the raw little-endian data.
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    assert header["__metadata__"] == {"format": "tessera.nn"}
    for name, t in state.items():
        entry = header[name]
        assert entry["dtype"] == "F32" and entry["shape"] == list(t.shape)
        begin, end = entry["data_offsets"]
        got = np.frombuffer(raw[8 + hlen + begin:8 + hlen + end], dtype="<f4").reshape(t.shape)
        np.testing.assert_array_equal(got, t.numpy())

    other = nn.Sequential(Block(), nn.ReLU(), nn.Linear(4, 2, bias=False))
    assert not np.array_equal(other[2].weight.detach().numpy(), m[2].weight.detach().numpy())
    other.load(path)
    for (n, a), (_, b) in zip(m.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=n)
        assert b.requires_grad and b.is_leaf

    with pytest.raises(KeyError, match="missing.*2.weight"):
        other.load_state_dict({k: v for k, v in state.items() if k != "2.weight"})
    bad = dict(state)
    bad["2.weight"] = tessera.zeros(3, 4)
    with pytest.raises(ValueError, match="'2.weight' has shape"):
        other.load_state_dict(bad)
    with pytest.raises(Exception, match="nope.safetensors"):
        nn.load(tmp_path / "nope.safetensors")
    with pytest.raises(TypeError, match="argument 1 is a int"):
        nn.Sequential(nn.ReLU(), 3)


def synthetic_classes(rng, n=256, d=8, classes=3):
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x @ rng.standard_normal((d, classes))).argmax(1).astype(np.int64)
    return tessera.from_numpy(x), tessera.from_numpy(y)


def train_mlp(seed, device="cpu", steps=150):
    rng = np.random.default_rng(seed)
    x, y = synthetic_classes(rng)
    x, y = x.to(device), y.to(device)
    tessera.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 3)).to(device)
    opt = tessera.optim.AdamW(model.parameters(), lr=0.02)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.cross_entropy(model(x), y)
        loss.backward()
        nn.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(float(loss.cpu().numpy()))
    correct = (model(x).cpu().numpy().argmax(1) == y.cpu().numpy()).mean()
    return losses, correct


@pytest.mark.parametrize("device", ["cpu", "my_hardware_device"])
def test_mlp_trains_to_a_stated_loss_and_repeats(device):
    if device not in [d["name"].split(":")[0] for d in tessera.devices()]:
        pytest.fail(f"{device} is not loaded: {tessera.devices()}")
    losses, correct = train_mlp(7, device)
    assert losses[0] > 0.8, losses[0]  # about ln 3 at the start
    assert losses[-1] < 0.15, losses[-1]
    assert correct > 0.95
    again, _ = train_mlp(7, device)
    assert again == losses  # the same seed, the same losses


def test_cnn_with_conv2d_trains(rng):
    # Images whose class is the quadrant holding the bright pixel.
    n = 64
    x = np.zeros((n, 1, 6, 6), np.float32)
    y = rng.integers(0, 4, n)
    for i, c in enumerate(y):
        x[i, 0, 3 * (c // 2) + rng.integers(3), 3 * (c % 2) + rng.integers(3)] = 1.0
    tx, ty = tessera.from_numpy(x), tessera.from_numpy(y.astype(np.int64))
    tessera.manual_seed(3)
    conv, head = nn.Conv2d(1, 4, 3, padding=1), nn.Linear(4 * 36, 4)
    params = conv.parameters() + head.parameters()
    opt = tessera.optim.Adam(params, lr=0.05)
    for step in range(60):
        for p in params:
            p.grad = None
        logits = head(tessera.relu(conv(tx)).reshape(n, 4 * 36))
        loss = nn.cross_entropy(logits, ty)
        if step == 0:
            first = float(loss.numpy())
        loss.backward()
        opt.step()
    assert first > 1.2 and float(loss.numpy()) < 0.1, (first, float(loss.numpy()))


def test_batchnorm2d_statistics_buffers_and_modes(rng, tmp_path):
    """Training output and running statistics against NumPy; buffers in the state dict and file."""
    bn = nn.BatchNorm2d(2)
    xv = (rng.standard_normal((3, 2, 2, 3)) * 2 + 1).astype(np.float32)
    got = bn(tessera.from_numpy(xv)).detach().numpy()
    mu, var_b, var_u = xv.mean((0, 2, 3)), xv.var((0, 2, 3)), xv.var((0, 2, 3), ddof=1)
    want = (xv - mu[None, :, None, None]) / np.sqrt(var_b[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var_u, rtol=1e-5, atol=1e-6)
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    bn.save(tmp_path / "bn.safetensors")
    other = nn.BatchNorm2d(2)
    other.load(tmp_path / "bn.safetensors")
    np.testing.assert_array_equal(other.running_var.numpy(), bn.running_var.numpy())
    bn.eval()
    got = bn(tessera.from_numpy(xv)).numpy()
    want = (xv - 0.1 * mu[None, :, None, None]) / np.sqrt(0.9 + 0.1 * var_u[None, :, None, None] + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert int(bn.num_batches_tracked.numpy()) == 1  # eval does not count
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        bn.train()(tessera.randn(1, 2, 1, 1))


def test_clip_grad_norm_scales_to_the_bound():
    w = nn.parameter(tessera.from_numpy(np.array([1.0, 2.0], np.float32)))
    (w * tessera.from_numpy(np.array([3.0, 4.0], np.float32))).sum().backward()  # grad (3, 4), norm 5
    assert nn.clip_grad_norm_([w], 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_a_tied_weight_is_one_parameter_and_two_state_dict_entries():
    """One tensor in two modules (an embedding tied to an output layer): listed once, stepped once,
    and kept under both names in the state dict, as in PyTorch."""
    tessera.manual_seed(5)
    inp, out = nn.Linear(4, 4, bias=False), nn.Linear(4, 4)
    out.weight = inp.weight
    m = nn.Sequential(inp, out)
    assert [n for n, _ in m.named_parameters()] == ["0.weight", "1.bias"]
    opt = tessera.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
    m(tessera.ones([1, 4])).sum().backward()
    before, g = inp.weight.detach().numpy().copy(), inp.weight.grad.numpy().copy()
    opt.step()
    np.testing.assert_allclose(inp.weight.detach().numpy(), before - 0.5 * g, rtol=1e-6, atol=1e-6)
    state = m.state_dict()
    assert list(state) == ["0.weight", "1.weight", "1.bias"]
    m.load_state_dict(state)
