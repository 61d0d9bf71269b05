"""Optimizers (libtessera_nn; PyTorch's update rules): SGD, Adam, AdamW over a list of tensors that
require grad. `opt.zero_grad()`, `opt.step()`, `opt.lr` (read/write). Schedules:
`lr_scheduler.StepLR(opt, step_size, gamma=0.1)`, `lr_scheduler.CosineAnnealingLR(opt, T_max,
eta_min=0)`, `ExponentialLR(opt, gamma)`, `MultiStepLR(opt, milestones, gamma=0.1)`,
`LinearLR(opt, start_factor=1/3, end_factor=1.0, total_iters=5)`, `OneCycleLR(opt, max_lr, total_steps, ...)`
(cycle_momentum=False only), each `step()`ped by the caller once per epoch (or step), as in PyTorch,
and `ReduceLROnPlateau(opt, mode="min", factor=0.1, patience=10, ...)` stepped with the metric.
`capturable=True` (PyTorch's name) keeps the step count and lr in tensors, so that a training step
(forward, backward, `opt.step()`) runs under `tessera.compile` as one program (docs/training.md).
Adam, AdamW and SGD with momentum update all their parameters of one dtype on one device with one
fused op (`fused=None` or `True`, the default: the device's `_multi_tensor_adam_` /
`_multi_tensor_sgd_` kernel, or on a device without one the per-parameter `_fused_adam_` /
`_fused_sgd_`); `fused=False` runs the update op by op."""
from . import autograd as _autograd  # noqa: F401 (Tensor methods, and the check that training is built)
from . import _C

_impl = _C._autograd


def SGD(params, lr=0.01, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, capturable=False,  # noqa: N802
        fused=None):
    return _impl.SGD(list(params), float(lr), float(momentum), float(dampening), float(weight_decay), bool(nesterov),
                     bool(capturable), fused is None or bool(fused))


def Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, capturable=False, fused=None):  # noqa: N802
    return _impl.Adam(list(params), float(lr), float(betas[0]), float(betas[1]), float(eps), float(weight_decay),
                      bool(capturable), fused is None or bool(fused))


def AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, capturable=False, fused=None):  # noqa: N802
    return _impl.AdamW(list(params), float(lr), float(betas[0]), float(betas[1]), float(eps), float(weight_decay),
                       bool(capturable), fused is None or bool(fused))


class lr_scheduler:  # noqa: N801 (PyTorch's path: tessera.optim.lr_scheduler.StepLR)
    """Learning-rate schedules; each sets the optimizer's lr from the lr it had when made."""

    StepLR = _impl.StepLR
    CosineAnnealingLR = _impl.CosineAnnealingLR
    ExponentialLR = _impl.ExponentialLR
    MultiStepLR = _impl.MultiStepLR
    LinearLR = _impl.LinearLR
    ReduceLROnPlateau = _impl.ReduceLROnPlateau

    @staticmethod
    def OneCycleLR(optimizer, max_lr, total_steps, pct_start=0.3, anneal_strategy="cos", div_factor=25.0,  # noqa: N802
                   final_div_factor=1e4, cycle_momentum=False):
        """PyTorch's one-cycle lr policy; cycling the momentum (PyTorch's default) is not done."""
        if cycle_momentum:
            raise ValueError("OneCycleLR: cycle_momentum is not supported; pass cycle_momentum=False")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        return _impl.OneCycleLR(optimizer, float(max_lr), int(total_steps), float(pct_start),
                                anneal_strategy == "cos", float(div_factor), float(final_div_factor))
