"""Mixed precision (docs/training.md "Mixed precision"): `with tessera.amp.autocast("cpu"):` runs
matmul/linear/conv in bfloat16 (or `dtype=tessera.float16`) and the range-sensitive ops in float32
on that device type, by op policy (Note [Autocast policy]); GradScaler scales the loss for float16
and skips steps with non-finite gradients. Both work on every device, plugin devices included."""
from . import autograd as _autograd  # noqa: F401
from . import _C

_impl = _C._autograd


def autocast(device_type, dtype=None, enabled=True):
    """A context manager: autocast for `device_type` ("cpu", "my_hardware_device", ...) on this thread."""
    return _impl.Autocast(device_type, dtype, bool(enabled))


def is_autocast_enabled(device_type="cpu"):
    return _impl.is_autocast_enabled(device_type)


def GradScaler(init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True,  # noqa: N802
               capturable=False):
    """torch.amp.GradScaler. capturable=True keeps the scale and the skip decision in tensors, for a
    training step inside tessera.compile (with a capturable optimizer; Note [Gradient scaler])."""
    return _impl.GradScaler(float(init_scale), float(growth_factor), float(backoff_factor), int(growth_interval),
                            bool(enabled), bool(capturable))
