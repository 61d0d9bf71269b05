"""NumPy functions on tessera tensors: Tensor.__array_ufunc__ and Tensor.__array_function__.

A function written with `np.` calls runs on tessera tensors, on their device, through the ops of the
contract, so `tessera.compile` captures it like any other function over tensors. Only the functions
listed in UFUNCS and FUNCTIONS are covered; any other raises TypeError naming it (no silent trip
through NumPy, which would copy device memory to the host). NumPy's rules apply where they differ from
PyTorch's: integer inputs of true division and of the floating functions (exp, log, sqrt, ...) compute
in float64, as NumPy does. NumPy arrays among the arguments are shared without a copy (from_numpy)
and moved to the tensors' device.
"""
from . import _C
from . import _ops

# NumPy ufunc name -> tessera function.
UFUNCS = {
    "add": _ops.add, "subtract": _ops.sub, "multiply": _ops.mul, "true_divide": _ops.div, "divide": _ops.div,
    "power": _ops.pow, "maximum": _ops.maximum, "minimum": _ops.minimum, "equal": _ops.eq, "not_equal": _ops.ne,
    "less": _ops.lt, "less_equal": _ops.le, "greater": _ops.gt, "greater_equal": _ops.ge,
    "logical_and": _ops.logical_and, "logical_or": _ops.logical_or, "negative": _ops.neg, "absolute": _ops.abs,
    "exp": _ops.exp, "log": _ops.log, "sqrt": _ops.sqrt, "sin": _ops.sin, "cos": _ops.cos, "tanh": _ops.tanh,
    "matmul": _ops.matmul,
}
# Ufuncs whose result is floating for integer inputs in NumPy.
FLOAT_UFUNCS = {"true_divide", "divide", "exp", "log", "sqrt", "sin", "cos", "tanh"}
# ufunc.reduce -> reduction.
REDUCE = {"add": _ops.sum, "multiply": _ops.prod, "maximum": _ops.amax, "minimum": _ops.amin}


def _device_of(values):
    for v in values:
        if isinstance(v, _C.Tensor):
            return v.device
    return None


def _to_tensor(v, device):
    import numpy as np
    if isinstance(v, np.ndarray):
        t = _C._from_array(v) if v.strides and min(v.strides) >= 0 else _C._from_array(np.ascontiguousarray(v))
        return t.to(device) if device is not None and device.type != "cpu" else t
    if isinstance(v, (list, tuple)):
        return [_to_tensor(x, device) for x in v]
    return v


def _numpy_float(args):
    """NumPy's rule for true division and floating functions: integer tensors compute in float64."""
    tensors = [a for a in args if isinstance(a, _C.Tensor)]
    if tensors and all(not t.dtype.is_floating_point for t in tensors):
        return [a.to(_C.float64) if isinstance(a, _C.Tensor) else a for a in args]
    return args


def _axis(axis):
    if axis is None:
        return ()
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def _unsupported(what):
    supported = sorted(set(UFUNCS) | set(FUNCTIONS))
    raise TypeError("%s is not supported on tessera tensors (covered: %s); call .numpy() to run it in NumPy on "
                    "the CPU" % (what, ", ".join("numpy." + n for n in supported)))


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    out = kwargs.pop("out", None)
    name = ufunc.__name__
    device = _device_of(inputs)
    args = [_to_tensor(x, device) for x in inputs]
    if method == "__call__" and name in UFUNCS and not kwargs:
        if name in FLOAT_UFUNCS:
            args = _numpy_float(args)
        if name == "power" and len(args) == 2 and not isinstance(args[1], _C.Tensor):
            result = _ops.pow(args[0], args[1])
        else:
            result = UFUNCS[name](*args)
    elif method == "reduce" and name in REDUCE and len(args) == 1:
        keepdims = kwargs.pop("keepdims", False)
        axis = kwargs.pop("axis", 0)
        if kwargs:
            _unsupported("numpy.%s.reduce with %s" % (name, ", ".join(sorted(kwargs))))
        result = REDUCE[name](args[0], _axis(axis), keepdims)
    else:
        _unsupported("numpy.%s%s" % (name, "" if method == "__call__" else "." + method))
    if out is not None:
        target = out[0] if isinstance(out, tuple) else out
        if not isinstance(target, _C.Tensor):
            raise TypeError("numpy.%s: out= must be a tessera tensor" % name)
        _C._copy_into(target, result)
        return target
    return result


def _sum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return _reduction(_ops.sum, "sum", a, axis, keepdims, dtype, out, kw)


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return _reduction(_ops.mean, "mean", _numpy_float([a])[0], axis, keepdims, dtype, out, kw)


def _prod(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return _reduction(_ops.prod, "prod", a, axis, keepdims, dtype, out, kw)


def _amax(a, axis=None, out=None, keepdims=False, **kw):
    return _reduction(_ops.amax, "max", a, axis, keepdims, None, out, kw)


def _amin(a, axis=None, out=None, keepdims=False, **kw):
    return _reduction(_ops.amin, "min", a, axis, keepdims, None, out, kw)


def _reduction(fn, name, a, axis, keepdims, dtype, out, extra):
    if out is not None or extra:
        _unsupported("numpy.%s with %s" % (name, ", ".join(sorted(set(extra) | ({"out"} if out is not None else set())))))
    r = fn(a, _axis(axis), bool(keepdims))
    return r.to(dtype=dtype) if dtype is not None else r


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    if out is not None or kw:
        _unsupported("numpy.var with %s" % ", ".join(sorted(set(kw) | ({"out"} if out is not None else set()))))
    r = _ops.var(_numpy_float([a])[0], _axis(axis), int(ddof), bool(keepdims))
    return r.to(dtype=dtype) if dtype is not None else r


def _argmax(a, axis=None, out=None, keepdims=False):
    if out is not None:
        _unsupported("numpy.argmax with out")
    return _ops.argmax(a, axis, bool(keepdims))


def _concatenate(arrays, axis=0, **kw):
    if kw:
        _unsupported("numpy.concatenate with %s" % ", ".join(sorted(kw)))
    return _ops.cat(list(arrays), axis)


def _stack(arrays, axis=0, **kw):
    if kw:
        _unsupported("numpy.stack with %s" % ", ".join(sorted(kw)))
    return _ops.stack(list(arrays), axis)


def _where(condition, x=None, y=None):
    if x is None or y is None:
        _unsupported("numpy.where with one argument")
    return _ops.where(condition, x, y)


def _reshape(a, *args, **kw):
    shape = kw.pop("shape", kw.pop("newshape", args[0] if args else None))
    if kw.get("order", "C") != "C":
        _unsupported("numpy.reshape with order=%r" % kw["order"])
    return a.reshape(shape)


def _transpose(a, axes=None):
    return a.permute(tuple(axes) if axes is not None else tuple(range(a.ndim - 1, -1, -1)))


FUNCTIONS = {
    "sum": _sum, "mean": _mean, "prod": _prod, "max": _amax, "amax": _amax, "min": _amin, "amin": _amin,
    "var": _var, "argmax": _argmax, "matmul": lambda a, b: _ops.matmul(a, b), "dot": lambda a, b: _ops.matmul(a, b),
    "concatenate": _concatenate, "stack": _stack, "where": _where, "reshape": _reshape, "transpose": _transpose,
    "exp": None, "log": None, "sqrt": None, "sin": None, "cos": None, "tanh": None,  # ufuncs: __array_ufunc__
}


def array_function(self, func, types, args, kwargs):
    name = func.__name__
    impl = FUNCTIONS.get(name)
    if impl is None or getattr(func, "__module__", "numpy").split(".")[0] != "numpy":
        _unsupported("numpy.%s" % name)
    device = _device_of(list(args) + [x for a in args if isinstance(a, (list, tuple)) for x in a])
    args = [_to_tensor(a, device) for a in args]
    return impl(*args, **kwargs)
