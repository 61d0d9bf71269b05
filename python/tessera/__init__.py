"""Tessera for Python: tensors on any device, every device a plugin (docs/python.md).

    import numpy as np, tessera
    a = tessera.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))   # shares memory
    b = (a * 2 + 1).exp()
    print(b, b.numpy())

The op functions (tessera.add, tessera.softmax, ...) are generated from the op contract
(dispatcher/ops/ops.json) at build time; tessera.ops lists them.
"""
from . import _C
from ._C import (Tensor, dtype, device, Stream, Event, promote_types, get_default_dtype, set_default_dtype,
                 bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, qint8, quint8, qint32,
                 float, double, half, long, int, short,
                 empty, zeros, ones, full, rand, randn, arange, zeros_like, ones_like, empty_like, manual_seed,
                 allclose, equal, plugins, load_plugin, devices, device_count, synchronize, memory_stats, memory_info,
                 empty_cache,
                 current_stream, set_current_stream, known_device_names, privateuse_backend_name,
                 rename_privateuse_backend, _dtype_from_name)
from . import _ops as ops
from ._ops import *  # noqa: F401,F403 (every public op of the contract)
from ._interop import from_numpy, from_dlpack
from ._privateuse import (rename_privateuse1_backend, generate_methods_for_privateuse1_backend,
                          generate_methods_for_device, generate_methods_for_plugin_devices)
from . import _tensor_methods

# The factories above (ops.h: shapes, dtype= and device= keywords) take the place of the contract's
# low-level arange; the contract's stays reachable as tessera.ops.arange.
arange = _C.arange
_tensor_methods.install(Tensor, ops)


def tensor(data, *, dtype=None, device=None):
    """A new tensor holding `data` (nested sequences of numbers, a NumPy array or a number), copied.
    Python floats give the default dtype (float32), ints int64 and bools bool, as in PyTorch; a NumPy
    array keeps its dtype."""
    import numpy as np
    if isinstance(data, Tensor):
        t = data.clone()
    else:
        a = np.asarray(data)
        if not isinstance(data, np.ndarray) and a.dtype == np.float64:
            a = a.astype(get_default_dtype().name)
        t = from_numpy(np.ascontiguousarray(a)).clone()
    if dtype is not None or device is not None:
        t = t.to(device=device, dtype=dtype)
    return t


def is_tensor(obj):
    return isinstance(obj, Tensor)


__version__ = "0.1.0"


# ---- export, compile and the program file (libtessera_compiler; docs/python.md)
from ._C import ExportedProgram, CompiledFunction, load, save  # noqa: E402
from . import quantization, sparse, profiler  # noqa: E402,F401
if _C._autograd.available:  # training (docs/python.md "Training")
    from . import autograd, optim, amp, nn  # noqa: E402,F401
    from .autograd import no_grad, enable_grad, inference_mode  # noqa: E402,F401
from ._C import export as _export  # noqa: E402


def export(fn, args, *, dynamic_shapes=None, parameters=None, input_names=None):
    """Captures fn(*args) (a function over tessera tensors) as an ExportedProgram: call it, save it
    (tessera.save / .save), print its graph. dynamic_shapes: one entry per input, None or
    {dim: "name" | ("name", min, max)}. parameters: {name: tensor} for tensors fn closes over."""
    return _export(fn, tuple(args), dynamic_shapes=dynamic_shapes, parameters=dict(parameters or {}),
                   input_names=list(input_names or []))


def compile(fn=None, *, dynamic=None, backend="cpp", name=None, recompile_limit=8, mode="default"):  # noqa: A001
    """tessera::compile over a Python function of tessera tensors, as a decorator or a call:
    captured on the first call, guarded, recompiled when a guard fails (docs/compile.md). backend:
    "cpp" (generated C++), "interpreter", a compiler plugin's name, or "auto". mode: "default" or
    "reduce-overhead" (artifacts replayed as device graphs where the backend records them: CUDA
    Graphs on cuda)."""
    def wrap(f):
        import functools
        compiled = _C._compile(f, dynamic, backend, name or getattr(f, "__name__", "compiled_fn"), recompile_limit,
                               mode)

        @functools.wraps(f)
        def call(*args):
            return compiled(*args)
        call.compiled = compiled
        return call
    return wrap(fn) if fn is not None else wrap
