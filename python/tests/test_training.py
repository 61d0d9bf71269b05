"""Training from Python: gradients against NumPy's analytic ones, grad-mode regions, optimizers,
an MLP trained on the CPU and on the reference accelerator, autocast and the gradient scaler."""
import numpy as np
import pytest

import tessera

if not hasattr(tessera, "autograd"):
    pytest.skip("this build has no libtessera_autograd", allow_module_level=True)


def test_gradients_match_numpy(rng):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    tw = tessera.from_numpy(w.copy()).requires_grad_()
    tb = tessera.from_numpy(b.copy()).requires_grad_()
    h = tessera.from_numpy(x) @ tw + tb
    loss = (tessera.relu(h) * tessera.relu(h)).sum()
    assert loss.grad_fn == "SumBackward" and not loss.is_leaf and tw.is_leaf
    loss.backward()
    # d/dh sum(relu(h)^2) = 2 relu(h); dW = x^T (2 relu(h)); db = sum over rows.
    hr = np.maximum(x @ w + b, 0)
    np.testing.assert_allclose(tw.grad.numpy(), x.T @ (2 * hr), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), (2 * hr).sum(0), rtol=1e-5, atol=1e-5)
    # autograd.grad returns instead of accumulating.
    (gw,) = tessera.autograd.grad((tessera.from_numpy(x) @ tw).sum(), tw)
    np.testing.assert_allclose(gw.numpy(), np.repeat(x.sum(0)[:, None], 3, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tb.grad.numpy(), (2 * hr).sum(0), rtol=1e-5, atol=1e-5)  # unchanged


def test_grad_mode_and_errors():
    w = tessera.ones(3).requires_grad_()
    assert w.requires_grad and tessera.autograd.is_grad_enabled()
    with tessera.no_grad():
        assert not tessera.autograd.is_grad_enabled()
        assert not (w * 2).requires_grad
        with tessera.enable_grad():
            assert (w * 2).requires_grad
    with tessera.inference_mode():
        assert not (w * 2).requires_grad
    y = (w * w).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [4, 4, 4])  # accumulated twice: 2 * 2w
    with pytest.raises((RuntimeError, ValueError), match="(?i)backward|freed|retain"):
        y.backward()
    with pytest.raises((RuntimeError, ValueError), match="(?i)floating"):
        tessera.tensor([1, 2]).requires_grad_()
    d = w.detach()
    assert not d.requires_grad
    w.grad = None
    assert w.grad is None


def _mlp_losses(device, steps=100):
    tessera.manual_seed(3)
    rng = np.random.default_rng(42)
    x = rng.standard_normal((128, 6)).astype(np.float32)
    y = (x @ rng.standard_normal((6, 3))).argmax(1).astype(np.int64)
    w1 = (tessera.randn(6, 16) * 0.4).to(device).requires_grad_()
    b1 = tessera.zeros(16).to(device).requires_grad_()
    w2 = (tessera.randn(16, 3) * 0.4).to(device).requires_grad_()
    tx, ty = tessera.from_numpy(x).to(device), tessera.from_numpy(y).to(device)
    opt = tessera.optim.Adam([w1, b1, w2], lr=0.03)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = tessera.autograd._impl.cross_entropy(tessera.relu(tx @ w1 + b1) @ w2, ty)
        loss.backward()
        opt.step()
        losses.append(float(loss.cpu().numpy()))
    return losses


def test_an_mlp_trains_on_the_cpu_and_the_reference_accelerator(mhd):
    cpu = _mlp_losses("cpu")
    assert cpu[0] > 0.8 and cpu[-1] < 0.1, (cpu[0], cpu[-1])
    assert cpu == _mlp_losses("cpu")  # deterministic
    dev = _mlp_losses("my_hardware_device")
    np.testing.assert_allclose(dev, cpu, rtol=1e-3, atol=1e-3)


def test_autocast_and_the_gradient_scaler():
    a, b = tessera.randn(4, 8), tessera.randn(8, 2)
    with tessera.amp.autocast("cpu"):
        assert tessera.amp.is_autocast_enabled("cpu")
        m = a @ b
        assert m.dtype is tessera.bfloat16 and tessera.softmax(m, 1).dtype is tessera.float32
    with tessera.amp.autocast("cpu", dtype=tessera.float16):
        assert (a @ b).dtype is tessera.float16
    assert (a @ b).dtype is tessera.float32
    p = tessera.ones(3).requires_grad_()
    opt = tessera.optim.SGD([p], lr=1.0)
    scaler = tessera.amp.GradScaler(init_scale=8.0)
    scaler.scale((p * tessera.tensor([1.0, 2.0, 3.0])).sum()).backward()
    np.testing.assert_array_equal(p.grad.numpy(), [8, 16, 24])
    assert scaler.step(opt)
    np.testing.assert_array_equal(p.numpy(), [0, -1, -2])
    scaler.update()
    opt.zero_grad()
    scaler.scale((p * tessera.tensor([1.0, float("inf"), 1.0])).sum()).backward()
    assert not scaler.step(opt) and scaler.found_inf
    np.testing.assert_array_equal(p.numpy(), [0, -1, -2])  # skipped
    scaler.update()
    assert scaler.get_scale() == 4.0


class Cube(tessera.autograd.Function):
    backward_calls = 0

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        assert not tessera.autograd.is_grad_enabled()  # forward runs with grad mode off
        return x * x * x * scale

    @staticmethod
    def backward(ctx, g):
        Cube.backward_calls += 1
        (x,) = ctx.saved_tensors
        return g * x * x * (3.0 * ctx.scale), None


class SplitSign(tessera.autograd.Function):  # two outputs, one of them not differentiable
    @staticmethod
    def forward(ctx, x, y):
        ctx.needs = ctx.needs_input_grad
        positive = x > 0
        ctx.mark_non_differentiable(positive)
        return x * y, positive

    @staticmethod
    def backward(ctx, g, g_positive):
        return None, g * 2.0  # deliberately not the true gradient of y: the custom rule is what runs


@pytest.mark.parametrize("device", ["cpu", "my_hardware_device"])
def test_custom_python_functions(rng, device):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    tx = tessera.from_numpy(x).to(device).requires_grad_()
    y = Cube.apply(tx, 0.5)
    assert y.grad_fn == "CubeBackward" and y.requires_grad
    np.testing.assert_allclose(y.cpu().numpy(), 0.5 * x ** 3, rtol=1e-5)
    (y * y).sum().backward()
    # d/dx sum((s x^3)^2) = 2 s x^3 * 3 s x^2
    np.testing.assert_allclose(tx.grad.cpu().numpy(), 2 * 0.5 * x ** 3 * 3 * 0.5 * x ** 2, rtol=1e-4, atol=1e-6)

    a = tessera.from_numpy(x).to(device)  # needs no grad
    b = tessera.from_numpy(x).to(device).requires_grad_()
    out, positive = SplitSign.apply(a, b)
    assert out.requires_grad and not positive.requires_grad and positive.dtype is tessera.bool
    out.sum().backward()
    np.testing.assert_allclose(b.grad.cpu().numpy(), np.full_like(x, 2.0))
    assert a.grad is None

    # Without inputs that require grad there is no node, and forward still runs.
    z = Cube.apply(tessera.from_numpy(x).to(device), 2.0)
    assert not z.requires_grad and z.grad_fn is None


def test_custom_function_errors():
    class WrongCount(tessera.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g  # one too many

    class KeepsCtx(tessera.autograd.Function):
        kept = []

        @staticmethod
        def forward(ctx, x):
            KeepsCtx.kept.append(ctx)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g

    x = tessera.ones(2).requires_grad_()
    with pytest.raises(Exception, match="WrongCountBackward: backward returned 2 gradients for 1 forward arguments"):
        WrongCount.apply(x).sum().backward()
    KeepsCtx.apply(x).sum().backward()
    import gc
    gc.collect()
    with pytest.raises(Exception, match="a ctx is valid in forward and in its backward only"):
        KeepsCtx.kept[0].saved_tensors


def test_lr_schedules_follow_pytorchs_formulas():
    import math
    w = tessera.zeros(2).requires_grad_()
    opt = tessera.optim.SGD([w], lr=0.8)
    step = tessera.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    seen = []
    for _ in range(5):
        step.step()
        seen.append(opt.lr)
    assert seen == pytest.approx([0.8, 0.4, 0.4, 0.2, 0.2]) and step.last_epoch == 5  # 0.8 * 0.5^(e // 2)
    opt2 = tessera.optim.Adam([w], lr=1.0)
    cos = tessera.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=4, eta_min=0.2)
    got = []
    for _ in range(4):
        cos.step()
        got.append(opt2.lr)
    assert got == pytest.approx([0.2 + 0.8 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(1, 5)])


def test_exponential_multistep_and_linear_schedules():
    w = tessera.zeros(2).requires_grad_()
    sched = tessera.optim.lr_scheduler

    def run(opt, s, n):
        out = []
        for _ in range(n):
            s.step()
            out.append(opt.lr)
        return out

    o1 = tessera.optim.SGD([w], lr=1.0)
    assert run(o1, sched.ExponentialLR(o1, gamma=0.5), 3) == pytest.approx([0.5, 0.25, 0.125])
    o2 = tessera.optim.SGD([w], lr=2.0)
    assert run(o2, sched.MultiStepLR(o2, milestones=[2, 4], gamma=0.5), 5) == pytest.approx([2, 1, 1, 0.5, 0.5])
    o3 = tessera.optim.SGD([w], lr=0.8)
    warm = sched.LinearLR(o3, start_factor=0.25, total_iters=3)
    assert o3.lr == pytest.approx(0.2)  # PyTorch sets the first factor at construction
    assert run(o3, warm, 4) == pytest.approx([0.4, 0.6, 0.8, 0.8])


def test_one_cycle_and_plateau_schedules():
    # The values PyTorch's OneCycleLR (cycle_momentum=False) and ReduceLROnPlateau give, worked by hand
    # from lr_scheduler.py (the C++ test Optimizers.OneCycleSchedule / ReduceLROnPlateau has the steps).
    w = tessera.zeros(2).requires_grad_()
    sched = tessera.optim.lr_scheduler
    o = tessera.optim.SGD([w], lr=5.0)
    one = sched.OneCycleLR(o, max_lr=1.0, total_steps=10, anneal_strategy="linear")
    lrs = [o.lr]
    for _ in range(9):
        one.step()
        lrs.append(o.lr)
    down = [1.0 + (4e-6 - 1.0) * k / 7 for k in range(1, 8)]
    assert lrs == pytest.approx([0.04, 0.52, 1.0] + down, rel=1e-12)
    with pytest.raises(ValueError, match="cycle_momentum"):
        sched.OneCycleLR(o, max_lr=1.0, total_steps=10, cycle_momentum=True)
    o2 = tessera.optim.SGD([w], lr=1.0)
    plateau = sched.ReduceLROnPlateau(o2, factor=0.5, patience=2, cooldown=1, min_lr=0.2)
    got = []
    for m in [1.0] * 11 + [0.5] * 9:
        plateau.step(m)
        got.append(o2.lr)
    assert got == pytest.approx([1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25]
                                + [0.2] * 6)
    assert plateau.best == 0.5
    with pytest.raises((RuntimeError, ValueError), match="mode"):
        sched.ReduceLROnPlateau(o2, mode="lowest")


def _mlp_run(compiled_step, steps=12, batches=None):
    """Adam on an MLP, eager or as one compiled program per step, on one batch `steps` times or on
    each of `batches` ((x, y) arrays) once; the losses, the final weights, w2's grad and the step."""
    tessera.manual_seed(5)
    rng = np.random.default_rng(7)
    if batches is None:
        x = rng.standard_normal((64, 6)).astype(np.float32)
        batches = [(x, (rng.standard_normal((64, 3))).argmax(1).astype(np.int64))] * steps
    w1 = (tessera.randn(6, 16) * 0.4).requires_grad_()
    w2 = (tessera.randn(16, 3) * 0.4).requires_grad_()
    opt = tessera.optim.AdamW([w1, w2], lr=0.03, capturable=compiled_step)

    def step(x, y):
        opt.zero_grad()
        loss = tessera.autograd._impl.cross_entropy(tessera.relu(x @ w1) @ w2, y)
        loss.backward()
        opt.step()
        return loss

    run = tessera.compile(step) if compiled_step else step
    losses = [float(run(tessera.from_numpy(x), tessera.from_numpy(y)).numpy()) for x, y in batches]
    return losses, w1.detach().numpy(), w2.grad.numpy(), run


def test_a_compiled_training_step_matches_the_eager_one():
    eager, w1, g2, _ = _mlp_run(False)
    compiled, cw1, cg2, _ = _mlp_run(True)
    assert eager[-1] < eager[0]
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    np.testing.assert_allclose(cw1, w1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(cg2, g2, rtol=1e-4, atol=1e-6)  # the program sets .grad as backward does


def test_a_compiled_training_step_serves_other_batch_sizes():
    """The second batch size captures the step with the batch symbolic; later sizes reuse it."""
    rng = np.random.default_rng(11)
    batches = []
    for n in (64, 40, 23, 64, 9):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        batches.append((x, (x @ rng.standard_normal((6, 3))).argmax(1).astype(np.int64)))
    eager, w_eager, _, _ = _mlp_run(False, batches=batches)
    comp, w_comp, _, run = _mlp_run(True, batches=batches)
    np.testing.assert_allclose(comp, eager, rtol=1e-5)
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-4, atol=1e-6)
    assert run.compiled.stats()["compiles"] == 2  # 64, then the batch symbolic for 40, 23, 64 and 9


def test_a_compiled_step_with_a_capturable_gradient_scaler_skips_as_the_eager_one():
    """The scaler's skips and scales are ops of the compiled program (Note [Gradient scaler])."""
    rng = np.random.default_rng(2)
    x = tessera.from_numpy(rng.standard_normal((32, 6)).astype(np.float32))
    y = tessera.from_numpy(rng.integers(0, 3, 32).astype(np.int64))
    runs = []
    for compiled in (False, True):
        tessera.manual_seed(9)
        w = (tessera.randn(6, 3) * 0.3).requires_grad_()
        opt = tessera.optim.Adam([w], lr=0.05, capturable=compiled)
        scaler = tessera.amp.GradScaler(init_scale=1e38, growth_interval=2, capturable=compiled)

        def step(x, y):
            opt.zero_grad()
            loss = tessera.autograd._impl.cross_entropy(x @ w, y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        run = tessera.compile(step) if compiled else step
        scales = []
        for _ in range(8):
            run(x, y)
            scales.append(scaler.get_scale())
        runs.append((scales, w.detach().numpy(), run))
    (eager_scales, w_eager, _), (scales, w_comp, run) = runs
    assert scales == eager_scales
    assert any(b < a for a, b in zip(scales, scales[1:]))  # it grew past float32's range and backed off
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-4, atol=1e-6)
    assert run.compiled.stats()["compiles"] == 1


def test_a_custom_function_inside_a_compiled_step_is_traced():
    rng = np.random.default_rng(3)
    x = tessera.from_numpy(rng.standard_normal((16, 4)).astype(np.float32))
    results = []
    for compiled in (False, True):
        tessera.manual_seed(2)
        w = (tessera.randn(4, 4) * 0.3).requires_grad_()
        opt = tessera.optim.SGD([w], lr=0.002, momentum=0.5, capturable=compiled)

        def step(x):
            opt.zero_grad()
            c = Cube.apply(x @ w, 0.5)
            loss = (c * c).mean()
            loss.backward()
            opt.step()
            return loss

        run = tessera.compile(step) if compiled else step
        calls = Cube.backward_calls
        losses = [float(run(x).numpy()) for _ in range(5)]
        results.append((losses, w.detach().numpy(), Cube.backward_calls - calls))
    (eager, w_eager, eager_calls), (comp, w_comp, comp_calls) = results
    assert eager[-1] < eager[0]
    np.testing.assert_allclose(comp, eager, rtol=1e-5)
    np.testing.assert_allclose(w_comp, w_eager, rtol=1e-5, atol=1e-6)
    assert eager_calls == 5 and comp_calls == 1  # the Python backward ran once, at the capture


def test_second_derivatives_with_create_graph():
    x = tessera.tensor([-1.5, 0.5, 2.0], dtype=tessera.float64).requires_grad_()
    (g,) = tessera.autograd.grad((x * x * x).sum(), x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), 3 * np.array([-1.5, 0.5, 2.0]) ** 2)
    assert g.requires_grad
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-9.0, 3.0, 12.0])  # d/dx 3x^2 = 6x
    # A gradient penalty: d/dw of |d(tanh(x w)).sum()/dx|^2, against central differences.
    rng = np.random.default_rng(4)
    xv, wv = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))

    def penalty(w_np, want_grad=False):
        xt = tessera.from_numpy(xv.copy()).requires_grad_()
        w = tessera.from_numpy(w_np.copy()).requires_grad_()
        (gx,) = tessera.autograd.grad(tessera.tanh(xt @ w).sum(), xt, create_graph=True)
        p = (gx * gx).sum()
        if not want_grad:
            return float(p.detach().numpy())
        p.backward()
        return w.grad.numpy()

    analytic = penalty(wv, True)
    numeric = np.zeros_like(wv)
    for i in np.ndindex(wv.shape):
        d = np.zeros_like(wv)
        d[i] = 1e-6
        numeric[i] = (penalty(wv + d) - penalty(wv - d)) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("decoupled", [False, True])
def test_fused_and_unfused_adam_follow_pytorchs_update(rng, decoupled):
    """Adam/AdamW's fused step (the CPU's _fused_adam_ kernel) and the op-by-op step against
    torch/optim/adam.py's update written out in NumPy (float64)."""
    p0 = rng.standard_normal((7, 5))
    grads = [rng.standard_normal((7, 5)) for _ in range(4)]
    lr, wd, b1, b2, eps = 0.1, 0.05, 0.9, 0.999, 1e-8
    want, m, v = p0.copy(), np.zeros_like(p0), np.zeros_like(p0)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            want *= 1 - lr * wd
        else:
            g = g + wd * want
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        want -= lr / (1 - b1 ** t) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
    make = tessera.optim.AdamW if decoupled else tessera.optim.Adam
    for fused in (None, False):
        w = tessera.from_numpy(p0.copy()).requires_grad_()
        opt = make([w], lr=lr, weight_decay=wd, fused=fused)
        for g in grads:
            opt.zero_grad()
            (w * tessera.from_numpy(g)).sum().backward()
            opt.step()
        np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"fused={fused}")


class _DoubleInPlace(tessera.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(tessera.from_numpy(np.array([2.0])))
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2.0


def test_mark_dirty_rebases_the_written_input(rng):
    a_np = rng.standard_normal(5)
    a = tessera.from_numpy(a_np.copy()).requires_grad_()
    x = a * 3.0
    y = _DoubleInPlace.apply(x)
    assert y.grad_fn == "_DoubleInPlaceBackward" and x.grad_fn == "_DoubleInPlaceBackward"
    (y * y).sum().backward()  # y = 6a, so d(36 a^2)/da = 72 a
    np.testing.assert_allclose(a.grad.numpy(), 72 * a_np, rtol=1e-12)
    leaf = tessera.from_numpy(np.array([1.0, 2.0])).requires_grad_()
    with pytest.raises(Exception, match="a leaf Variable that requires grad is being used in an in-place operation"):
        _DoubleInPlace.apply(leaf)


@pytest.mark.parametrize("nesterov", [False, True])
def test_fused_and_unfused_sgd_follow_pytorchs_update(rng, nesterov):
    """SGD with momentum: the fused step (_fused_sgd_) and the op-by-op one against
    torch/optim/sgd.py's update written out in NumPy (float64)."""
    p0 = rng.standard_normal((6, 5))
    grads = [rng.standard_normal((6, 5)) for _ in range(4)]
    lr, mom, wd = 0.1, 0.9, 0.02
    damp = 0.0 if nesterov else 0.3
    want, buf = p0.copy(), None
    for g in grads:
        d = g + wd * want
        buf = d.copy() if buf is None else mom * buf + (1 - damp) * d
        want -= lr * (d + mom * buf if nesterov else buf)
    for fused in (None, False):
        w = tessera.from_numpy(p0.copy()).requires_grad_()
        opt = tessera.optim.SGD([w], lr=lr, momentum=mom, dampening=damp, weight_decay=wd, nesterov=nesterov,
                                fused=fused)
        for g in grads:
            opt.zero_grad()
            (w * tessera.from_numpy(g)).sum().backward()
            opt.step()
        np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"fused={fused}")
