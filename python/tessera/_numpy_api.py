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
    "logical_and": _ops.logical_and, "logical_or": _ops.logical_or, "logical_xor": _ops.logical_xor,
    "logical_not": _ops.logical_not, "negative": _ops.neg, "absolute": _ops.abs, "fabs": _ops.abs,
    "exp": _ops.exp, "expm1": _ops.expm1, "log": _ops.log, "log1p": _ops.log1p, "sqrt": _ops.sqrt,
    "sin": _ops.sin, "cos": _ops.cos, "tan": _ops.tan, "arcsin": _ops.asin, "arccos": _ops.acos,
    "arctan": _ops.atan, "arctan2": _ops.atan2, "sinh": _ops.sinh, "cosh": _ops.cosh, "tanh": _ops.tanh,
    "arcsinh": _ops.asinh, "arccosh": _ops.acosh, "arctanh": _ops.atanh,
    "floor": _ops.floor, "ceil": _ops.ceil, "trunc": _ops.trunc, "rint": _ops.round, "sign": _ops.sign,
    "reciprocal": _ops.reciprocal, "square": lambda x: _ops.mul(x, x),
    "floor_divide": _ops.floor_divide, "remainder": _ops.remainder, "fmod": _ops.fmod,
    "isnan": _ops.isnan, "isinf": _ops.isinf,
    "isfinite": lambda x: _ops.logical_not(_ops.logical_or(_ops.isnan(x), _ops.isinf(x))),
    "bitwise_and": _ops.bitwise_and, "bitwise_or": _ops.bitwise_or, "bitwise_xor": _ops.bitwise_xor,
    "invert": _ops.bitwise_not, "left_shift": _ops.bitwise_left_shift, "right_shift": _ops.bitwise_right_shift,
    "matmul": _ops.matmul,
}
# Ufuncs whose result is floating for integer inputs in NumPy.
FLOAT_UFUNCS = {"true_divide", "divide", "exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "arcsin",
                "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "rint",
                "fabs"}
# Ufuncs NumPy computes in the integer dtype for integer inputs where the op contract would give a
# float (1 / x): refused for integer tensors rather than answered with another dtype.
FLOAT_ONLY_UFUNCS = {"reciprocal"}
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
        if name in FLOAT_ONLY_UFUNCS and not all(a.dtype.is_floating_point for a in args if isinstance(a, _C.Tensor)):
            _unsupported("numpy.%s of an integer array (NumPy keeps the integer dtype)" % name)
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


def _argmin(a, axis=None, out=None, keepdims=False):
    if out is not None:
        _unsupported("numpy.argmin with out")
    return _ops.argmin(a, axis, bool(keepdims))


def _clip(a, a_min=None, a_max=None, out=None, **kw):
    a_min, a_max = kw.pop("min", a_min), kw.pop("max", a_max)
    if out is not None or kw or isinstance(a_min, _C.Tensor) or isinstance(a_max, _C.Tensor):
        _unsupported("numpy.clip with %s" % ("array bounds" if out is None and not kw else
                                             ", ".join(sorted(set(kw) | ({"out"} if out is not None else set())))))
    return _ops.clamp(a, a_min, a_max)


def _cumsum(a, axis=None, dtype=None, out=None):
    if out is not None:
        _unsupported("numpy.cumsum with out")
    if axis is None:
        a, axis = a.reshape((-1,)), 0
    return _ops.cumsum(a, axis, dtype=dtype)


def _flip(m, axis=None):
    return _ops.flip(m, tuple(range(m.ndim)) if axis is None else _axis(axis))


def _tril(m, k=0):
    return _ops.tril(m, k)


def _triu(m, k=0):
    return _ops.triu(m, k)


def _tile(a, reps):
    reps = tuple(reps) if isinstance(reps, (tuple, list)) else (reps,)
    return _ops.repeat(a, (1,) * (a.ndim - len(reps)) + reps)


def _pad(array, pad_width, mode="constant", constant_values=0, **kw):
    if mode != "constant" or kw or not isinstance(constant_values, (int, float)):
        _unsupported("numpy.pad with mode=%r%s" % (mode, "".join(", " + k for k in sorted(kw))))
    n = array.ndim
    if isinstance(pad_width, int):
        pairs = [(pad_width, pad_width)] * n
    else:
        pw = [tuple(p) if isinstance(p, (tuple, list)) else (p, p) for p in pad_width]
        if len(pw) == 1:
            pw = pw * n
        elif len(pw) == 2 and all(isinstance(p, int) for p in pad_width):
            pw = [tuple(pad_width)] * n
        if len(pw) != n:
            raise ValueError("numpy.pad: pad_width has %d entries for an array of %d dims" % (len(pw), n))
        pairs = pw
    flat = []
    for before, after in reversed(pairs):  # the op takes the last dim first, as torch.nn.functional.pad
        flat += [int(before), int(after)]
    return _ops.pad(array, flat, "constant", float(constant_values))


def _norm(x, ord=None, axis=None, keepdims=False):
    if axis is None and ord is not None and x.ndim >= 2:
        _unsupported("numpy.linalg.norm of a matrix with ord=%r (matrix norms)" % (ord,))
    if isinstance(axis, (tuple, list)) and len(axis) == 2 and ord is not None:
        _unsupported("numpy.linalg.norm with two axes and ord=%r (matrix norms)" % (ord,))
    x = _numpy_float([x])[0]
    return _ops.linalg_vector_norm(x, 2 if ord is None else ord, None if axis is None else _axis(axis), bool(keepdims))


FUNCTIONS = {
    "sum": _sum, "mean": _mean, "prod": _prod, "max": _amax, "amax": _amax, "min": _amin, "amin": _amin,
    "var": _var, "argmax": _argmax, "argmin": _argmin, "matmul": lambda a, b: _ops.matmul(a, b),
    "dot": lambda a, b: _ops.matmul(a, b), "concatenate": _concatenate, "stack": _stack, "where": _where,
    "reshape": _reshape, "transpose": _transpose, "clip": _clip, "cumsum": _cumsum, "flip": _flip, "tril": _tril,
    "triu": _triu, "tile": _tile, "pad": _pad, "norm": _norm,
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
