"""Gradients against PyTorch's (issue #31): every case runs the same op on the same float64 values in
Tessera and in PyTorch, back-propagates the same random output gradient, and compares each input's
.grad. Runs where torch is importable (`pip install torch`; ./run.sh test does not install it, so a
machine without torch reports these as skipped, not passed). docs/training.md records the last run."""
import numpy as np
import pytest

import tessera

torch = pytest.importorskip("torch")
if not hasattr(tessera, "autograd"):
    pytest.skip("this build has no libtessera_autograd", allow_module_level=True)


def away(rng, shape, lo=0.2, hi=1.0):
    """Values with |x| in [lo, hi) and random signs: kinks at 0 stay away."""
    return rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)


# batch_norm's running statistics (not differentiated): fixed values, the same on both sides.
_BN_MEAN = np.array([0.1, -0.3, 0.5])
_BN_VAR = np.array([0.8, 1.5, 0.6])
_BN_MEAN_T, _BN_VAR_T = tessera.from_numpy(_BN_MEAN.copy()), tessera.from_numpy(_BN_VAR.copy())

# gather's and scatter_reduce's indices (repeats included: their gradients add up).
_GIDX = np.array([[0, 2, 2], [1, 1, 0]], dtype=np.int64)
_SIDX = np.array([[0, 1, 1], [3, 0, 0]], dtype=np.int64)
_GIDX_T, _SIDX_T = tessera.from_numpy(_GIDX.copy()), tessera.from_numpy(_SIDX.copy())

def _write_views(lib):
    def f(a, b, c):
        y = a * 1.5
        first = y[:, 0:2]  # a view made before the writes
        y[:, 1:3].mul_(b)
        y[:, 3].copy_(c * c)
        return y * y + first.sum()
    return f


def _copied(buf, src):
    buf.copy_(src)
    return buf


def _filled(t):
    t.fill_(0.5)
    return t


def _resize(a, size, mode, ctm, nearest="round_prefer_floor"):
    return tessera._C.op("_resize")(a, size, mode, ctm, nearest)


# (name, function of tessera tensors, function of torch tensors, input makers)
CASES = [
    ("add_broadcast", lambda a, b: tessera.add(a, b, alpha=2.5), lambda a, b: torch.add(a, b, alpha=2.5),
     [lambda r: r.standard_normal((3, 1, 4)), lambda r: r.standard_normal((2, 4))]),
    ("mul_div", lambda a, b: a * b / (b * b + 1), lambda a, b: a * b / (b * b + 1),
     [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((4,))]),
    ("pow", lambda a, b: tessera.pow(a, b), lambda a, b: torch.pow(a, b),
     [lambda r: r.uniform(0.5, 2, (3, 4)), lambda r: r.uniform(-1, 2, (4,))]),
    ("maximum", tessera.maximum, torch.maximum, [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((3, 4))]),
    ("exp_log_sqrt", lambda a: tessera.exp(a) + tessera.log(a) + tessera.sqrt(a),
     lambda a: torch.exp(a) + torch.log(a) + torch.sqrt(a), [lambda r: r.uniform(0.3, 2, (3, 4))]),
    ("trig", lambda a: tessera.sin(a) * tessera.cos(a) + tessera.tanh(a) + tessera.atan(a),
     lambda a: torch.sin(a) * torch.cos(a) + torch.tanh(a) + torch.atan(a), [lambda r: r.uniform(-2, 2, (3, 4))]),
    ("sigmoid_silu_gelu", lambda a: tessera.sigmoid(a) + tessera.silu(a) + tessera.gelu(a) + tessera.gelu(a, approximate="tanh"),
     lambda a: torch.sigmoid(a) + torch.nn.functional.silu(a) + torch.nn.functional.gelu(a)
     + torch.nn.functional.gelu(a, approximate="tanh"), [lambda r: r.uniform(-3, 3, (3, 4))]),
    ("relu_abs", lambda a: tessera.relu(a) + tessera.abs(a), lambda a: torch.relu(a) + torch.abs(a), [lambda r: away(r, (3, 4))]),
    ("leaky_relu_elu", lambda a: tessera.leaky_relu(a, 0.2) + tessera.elu(a, 1.3) + tessera.selu(a) + tessera.celu(a, 0.5),
     lambda a: torch.nn.functional.leaky_relu(a, 0.2) + torch.nn.functional.elu(a, 1.3) + torch.selu(a)
     + torch.celu(a, 0.5), [lambda r: away(r, (3, 4))]),
    ("softplus_mish", lambda a: tessera.softplus(a, 2, 1.5) + tessera.mish(a),
     lambda a: torch.nn.functional.softplus(a, 2, 1.5) + torch.nn.functional.mish(a), [lambda r: r.uniform(-2, 2, (3, 4))]),
    ("hard_activations", lambda a: tessera.hardsigmoid(a) + tessera.hardswish(a) + tessera.hardtanh(a, -2, 2),
     lambda a: torch.nn.functional.hardsigmoid(a) + torch.nn.functional.hardswish(a) + torch.nn.functional.hardtanh(a, -2, 2),
     [lambda r: away(r, (4, 5), 1.0, 1.9) * 2]),
    ("atan2", tessera.atan2, torch.atan2, [lambda r: r.standard_normal((3, 4)), lambda r: away(r, (4,))]),
    ("clamp", lambda a: tessera.clamp(a, -0.5, 0.5), lambda a: torch.clamp(a, -0.5, 0.5), [lambda r: away(r, (3, 4), 0.1, 0.45) * 2]),
    ("sum_mean_var", lambda a: tessera.sum(a, [1]) + tessera.mean(a, [1]) + tessera.var(a, [1]),
     lambda a: a.sum(1) + a.mean(1) + a.var(1), [lambda r: r.standard_normal((3, 5))]),
    ("logsumexp_cumsum", lambda a: tessera.logsumexp(a, [1], True) + tessera.cumsum(a, 1),
     lambda a: torch.logsumexp(a, 1, True) + torch.cumsum(a, 1), [lambda r: r.standard_normal((3, 5))]),
    ("amax", lambda a: tessera.amax(a, [0]), lambda a: torch.amax(a, 0), [lambda r: r.standard_normal((4, 3))]),
    ("matmul", tessera.matmul, torch.matmul, [lambda r: r.standard_normal((2, 3, 4)), lambda r: r.standard_normal((4, 5))]),
    ("linear", tessera.linear, torch.nn.functional.linear,
     [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((5, 4)), lambda r: r.standard_normal((5,))]),
    ("softmax_log_softmax", lambda a: tessera.softmax(a, 1) * tessera.log_softmax(a, 0),
     lambda a: torch.softmax(a, 1) * torch.log_softmax(a, 0), [lambda r: r.standard_normal((3, 4))]),
    ("layer_norm", lambda a, w, b: tessera.layer_norm(a, [4], w, b, 1e-5),
     lambda a, w, b: torch.nn.functional.layer_norm(a, [4], w, b, 1e-5),
     [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((4,)), lambda r: r.standard_normal((4,))]),
    ("sdpa_causal", lambda q, k, v: tessera.scaled_dot_product_attention(q, k, v, is_causal=True),
     lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, None, 0.0, True),
     [lambda r: r.standard_normal((1, 2, 4, 8))] * 3),
    ("conv2d", lambda x, w, b: tessera.conv2d(x, w, b, [1, 1], [1, 1]),
     lambda x, w, b: torch.nn.functional.conv2d(x, w, b, 1, 1),
     [lambda r: r.standard_normal((2, 3, 5, 5)), lambda r: r.standard_normal((4, 3, 3, 3)), lambda r: r.standard_normal((4,))]),
    ("cat_stack", lambda a, b: tessera.cat([a, b], 0) * tessera.stack([a, b], 0).sum(0).sum(),
     lambda a, b: torch.cat([a, b], 0) * torch.stack([a, b], 0).sum(0).sum(),
     [lambda r: r.standard_normal((2, 3)), lambda r: r.standard_normal((2, 3))]),
    ("prelu_per_channel", tessera.prelu, torch.nn.functional.prelu,
     [lambda r: away(r, (2, 3, 4)), lambda r: r.uniform(0.1, 0.5, (3,))]),
    ("repeat", lambda a: tessera.repeat(a, [2, 1, 3]), lambda a: a.repeat(2, 1, 3), [lambda r: r.standard_normal((2, 2))]),
    ("pad_constant", lambda a: tessera.pad(a, [1, 2, -1, 1], "constant", 0.5),
     lambda a: torch.nn.functional.pad(a, [1, 2, -1, 1], "constant", 0.5), [lambda r: r.standard_normal((3, 4))]),
    ("pad_reflect", lambda a: tessera.pad(a, [2, 1, 0, 3], "reflect"),
     lambda a: torch.nn.functional.pad(a, [2, 1, 0, 3], "reflect"), [lambda r: r.standard_normal((2, 3, 4, 5))]),
    ("pad_replicate", lambda a: tessera.pad(a, [3, 1], "replicate"),
     lambda a: torch.nn.functional.pad(a, [3, 1], "replicate"), [lambda r: r.standard_normal((2, 3, 4))]),
    ("pad_circular", lambda a: tessera.pad(a, [1, 3, 2, 0], "circular"),
     lambda a: torch.nn.functional.pad(a, [1, 3, 2, 0], "circular"), [lambda r: r.standard_normal((1, 2, 3, 4))]),
    ("pad_circular_crops", lambda a: tessera.pad(a, [2, -1, -1, 2], "circular"),
     lambda a: torch.nn.functional.pad(a, [2, -1, -1, 2], "circular"), [lambda r: r.standard_normal((1, 2, 4, 5))]),
    ("group_norm", lambda a, w, b: tessera.group_norm(a, 2, w, b, 1e-5),
     lambda a, w, b: torch.nn.functional.group_norm(a, 2, w, b, 1e-5),
     [lambda r: r.standard_normal((2, 4, 3)), lambda r: r.uniform(0.5, 1.5, (4,)), lambda r: r.standard_normal((4,))]),
    ("batch_norm_eval", lambda a, w, b: tessera.batch_norm(a, w, b, _BN_MEAN_T, _BN_VAR_T, False, 0.1, 1e-5, False),
     lambda a, w, b: torch.nn.functional.batch_norm(a, torch.from_numpy(_BN_MEAN), torch.from_numpy(_BN_VAR), w, b,
                                                    False, 0.1, 1e-5),
     [lambda r: r.standard_normal((2, 3, 4)), lambda r: r.uniform(0.5, 1.5, (3,)), lambda r: r.standard_normal((3,))]),
    ("topk_values", lambda a: tessera.topk(a, 2, 1)[0], lambda a: torch.topk(a, 2, 1)[0],
     [lambda r: r.permutation(15).reshape(3, 5) / 7.0]),
    ("gather", lambda a: tessera.gather(a, 1, _GIDX_T), lambda a: torch.gather(a, 1, torch.from_numpy(_GIDX)),
     [lambda r: r.standard_normal((2, 4))]),
    ("scatter_reduce_sum", lambda a, b: tessera.scatter_reduce(a, 1, _SIDX_T, b, "sum", include_self=False),
     lambda a, b: a.scatter_reduce(1, torch.from_numpy(_SIDX), b, "sum", include_self=False),
     [lambda r: r.standard_normal((2, 4)), lambda r: r.standard_normal((2, 3))]),
    ("slice_copy_step", lambda a: tessera.slice_copy(a, 1, 1, None, 2), lambda a: a[:, 1::2],
     [lambda r: r.standard_normal((3, 6))]),
    ("prod_with_a_zero", lambda a: tessera.prod(a, [1]), lambda a: torch.prod(a, 1),
     [lambda r: np.where(np.arange(12).reshape(3, 4) == 5, 0.0, r.uniform(0.5, 1.5, (3, 4)))]),
    ("conv2d_strided_dilated_grouped", lambda x, w, b: tessera.conv2d(x, w, b, [2, 1], [1, 2], [1, 2], 2),
     lambda x, w, b: torch.nn.functional.conv2d(x, w, b, [2, 1], [1, 2], [1, 2], 2),
     [lambda r: r.standard_normal((2, 4, 7, 6)), lambda r: r.standard_normal((6, 2, 3, 3)),
      lambda r: r.standard_normal((6,))]),
    ("conv_transpose2d", lambda x, w, b: tessera.conv_transpose2d(x, w, b, [2, 2], [1, 0], [1, 0], 1, [1, 1]),
     lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, [2, 2], [1, 0], [1, 0], 1, [1, 1]),
     [lambda r: r.standard_normal((2, 3, 4, 3)), lambda r: r.standard_normal((3, 2, 3, 2)),
      lambda r: r.standard_normal((2,))]),
    ("max_pool2d_padded_strided_dilated", lambda a: tessera.max_pool2d(a, [3, 2], [2, 1], [1, 1], [2, 3]),
     lambda a: torch.nn.functional.max_pool2d(a, [3, 2], [2, 1], [1, 1], [2, 3]), [lambda r: r.standard_normal((2, 3, 8, 7))]),
    # Small integers: most windows hold tied maxima; each output's gradient goes to the first.
    ("max_pool2d_ties", lambda a: tessera.max_pool2d(a, [3, 3], [1, 2], [1, 1]),
     lambda a: torch.nn.functional.max_pool2d(a, [3, 3], [1, 2], [1, 1]), [lambda r: r.integers(0, 3, (2, 2, 6, 5))]),
    ("max_pool2d_unbatched_ties", lambda a: tessera.max_pool2d(a, [2, 2], [2, 2]),
     lambda a: torch.nn.functional.max_pool2d(a, [2, 2], [2, 2]), [lambda r: r.integers(0, 2, (3, 5, 4))]),
    ("avg_pool2d_overlapping_padded", lambda a: tessera.avg_pool2d(a, [3, 3], [2, 1], [1, 1]),
     lambda a: torch.nn.functional.avg_pool2d(a, [3, 3], [2, 1], [1, 1]), [lambda r: r.standard_normal((2, 3, 7, 6))]),
    # _resize (ONNX Resize) against F.interpolate: bilinear / bicubic without align_corners are
    # pytorch_half_pixel, with it align_corners; nearest is asymmetric with floor.
    ("resize_bilinear", lambda a: _resize(a, [7, 4], "linear", "pytorch_half_pixel"),
     lambda a: torch.nn.functional.interpolate(a, size=(7, 4), mode="bilinear", align_corners=False),
     [lambda r: r.standard_normal((2, 3, 5, 6))]),
    ("resize_bicubic_align_corners", lambda a: _resize(a, [9, 3], "cubic", "align_corners"),
     lambda a: torch.nn.functional.interpolate(a, size=(9, 3), mode="bicubic", align_corners=True),
     [lambda r: r.standard_normal((1, 2, 4, 5))]),
    ("resize_bicubic", lambda a: _resize(a, [3, 8], "cubic", "pytorch_half_pixel"),
     lambda a: torch.nn.functional.interpolate(a, size=(3, 8), mode="bicubic", align_corners=False),
     [lambda r: r.standard_normal((2, 1, 6, 5))]),
    ("resize_nearest", lambda a: _resize(a, [5, 9], "nearest", "asymmetric", "floor"),
     lambda a: torch.nn.functional.interpolate(a, size=(5, 9), mode="nearest"),
     [lambda r: r.standard_normal((2, 2, 4, 4))]),
    # In-place writes in the graph: copy_ into a fresh buffer (broadcast), fill_ of a non-leaf.
    ("copy_into_buffer", lambda a, b: _copied(tessera.zeros([2, 3, 4], dtype=tessera.float64), a) * b,
     lambda a, b: _copied(torch.zeros(2, 3, 4, dtype=torch.float64), a) * b,
     [lambda r: r.standard_normal((3, 1)), lambda r: r.standard_normal((2, 3, 4))]),
    ("fill_non_leaf", lambda a, b: _filled(a * b) * a + b, lambda a, b: _filled(a * b) * a + b,
     [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((3, 4))]),
    # In-place ops on views of a tensor in the graph (CopySlices): a slice multiplied, a column copied
    # into, both read through a view made before the writes.
    ("inplace_on_views", _write_views(tessera), _write_views(torch),
     [lambda r: r.standard_normal((3, 4)), lambda r: r.standard_normal((3, 2)), lambda r: r.standard_normal((3,))]),
    ("vector_norm", lambda a: tessera.linalg_vector_norm(a, 2, [1]) + tessera.linalg_vector_norm(a, 3.0, [0]).sum(),
     lambda a: torch.linalg.vector_norm(a, 2, [1]) + torch.linalg.vector_norm(a, 3.0, [0]).sum(),
     [lambda r: away(r, (3, 4))]),
]



def _scatter_reduce_case(reduce, include_self):
    """scatter_reduce with a reduction other than "sum" into _SIDX's repeated targets; src holds a zero
    in a group of two (prod's zero-aware rule) and self one at a written position."""
    return ("scatter_reduce_%s_%s" % (reduce, "include_self" if include_self else "exclude_self"),
            lambda a, b: tessera.scatter_reduce(a, 1, _SIDX_T, b, reduce, include_self=include_self),
            lambda a, b: a.scatter_reduce(1, torch.from_numpy(_SIDX), b, reduce, include_self=include_self),
            [lambda r: np.where(np.arange(8).reshape(2, 4) == 1, 0.0, r.standard_normal((2, 4))),
             lambda r: np.where(np.arange(6).reshape(2, 3) == 1, 0.0, r.standard_normal((2, 3)))])


CASES += [_scatter_reduce_case(reduce, include_self)
          for reduce in ("prod", "mean", "amax", "amin") for include_self in (True, False)]

@pytest.mark.parametrize("name,ours,theirs,makers", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_pytorch(name, ours, theirs, makers):
    rng = np.random.default_rng()
    values = [np.ascontiguousarray(m(rng), dtype=np.float64) for m in makers]
    tx = [tessera.from_numpy(v.copy()).requires_grad_() for v in values]
    px = [torch.from_numpy(v.copy()).requires_grad_() for v in values]
    out_t, out_p = ours(*tx), theirs(*px)
    g = rng.standard_normal(out_p.shape)
    (out_t * tessera.from_numpy(g)).sum().backward()
    (out_p * torch.from_numpy(g)).sum().backward()
    # After backward: numpy() hands out writable memory, which counts as a write to a saved result.
    np.testing.assert_allclose(out_t.numpy(), out_p.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=name + " forward")
    # PyTorch's hardsigmoid backward multiplies by 1.0f / 6.0f, a float32 sixth, also for float64
    # (3e-8 relative off 1/6); Tessera divides by 6 in the tensor's dtype (docs/training.md).
    atol = 1e-7 if name == "hard_activations" else 1e-9
    for i, (a, b) in enumerate(zip(tx, px)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-7, atol=atol,
                                   err_msg="%s: gradient of input %d" % (name, i))


def test_double_backward_matches_pytorch():
    # A gradient penalty through matmul, softmax and layer_norm: d/dw |d loss / d x|^2 (create_graph).
    rng = np.random.default_rng(11)
    xv, wv, gv = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((3, 5))

    def run(lib, x, w, g):
        if lib is torch:
            h = torch.nn.functional.layer_norm(torch.softmax(x @ w, 1), [5])
            (gx,) = torch.autograd.grad((h * g).sum(), x, create_graph=True)
        else:
            h = tessera.layer_norm(tessera.softmax(x @ w, 1), [5], None, None, 1e-5)
            (gx,) = tessera.autograd.grad((h * g).sum(), x, create_graph=True)
        (gx * gx).sum().backward()
        return w.grad

    ours = run(tessera, tessera.from_numpy(xv.copy()).requires_grad_(), tessera.from_numpy(wv.copy()).requires_grad_(),
               tessera.from_numpy(gv.copy())).numpy()
    theirs = run(torch, torch.from_numpy(xv.copy()).requires_grad_(), torch.from_numpy(wv.copy()).requires_grad_(),
                 torch.from_numpy(gv.copy())).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-10)


def test_batchnorm2d_matches_pytorch():
    """nn.BatchNorm2d in training mode: output, input/weight/bias gradients and running statistics
    after two batches, then the eval output, against torch.nn.BatchNorm2d on the same float64 values."""
    rng = np.random.default_rng(17)
    ours = tessera.nn.BatchNorm2d(3, momentum=0.2, dtype=tessera.float64)
    theirs = torch.nn.BatchNorm2d(3, momentum=0.2, dtype=torch.float64)
    wv, bv = rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    with tessera.autograd.no_grad():
        ours.weight.copy_(tessera.from_numpy(wv.copy()))
        ours.bias.copy_(tessera.from_numpy(bv.copy()))
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(wv.copy()))
        theirs.bias.copy_(torch.from_numpy(bv.copy()))
    for step in range(2):
        xv, gv = rng.standard_normal((4, 3, 2, 5)) * 2 + 1, rng.standard_normal((4, 3, 2, 5))
        tx, px = tessera.from_numpy(xv.copy()).requires_grad_(), torch.from_numpy(xv.copy()).requires_grad_()
        out_t, out_p = ours(tx), theirs(px)
        (out_t * tessera.from_numpy(gv)).sum().backward()
        (out_p * torch.from_numpy(gv)).sum().backward()
        np.testing.assert_allclose(out_t.detach().numpy(), out_p.detach().numpy(), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ours.bias.grad.numpy(), theirs.bias.grad.numpy(), rtol=1e-7, atol=1e-9)
    assert int(ours.num_batches_tracked.numpy()) == int(theirs.num_batches_tracked) == 2
    ours.eval()
    theirs.eval()
    xv = rng.standard_normal((2, 3, 2, 2))
    np.testing.assert_allclose(ours(tessera.from_numpy(xv.copy())).numpy(),
                               theirs(torch.from_numpy(xv.copy())).detach().numpy(), rtol=1e-9, atol=1e-12)
